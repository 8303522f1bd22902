"""A scripted OpenAI-compatible chat-completions server on loopback.

It answers each request with the next scripted reply and records every
request body, so tests can prove what did and did not reach a model. A
scripted reply may also be a function of the request body, for a model that
reacts to what it reads (an attacker reusing the tokens it was given).
Supports streaming (SSE) and non-streaming responses.

A scripted step may also be a `Fault` (see the constructors below): an HTTP
error status, a 200 with HTML, a malformed or cut stream, silence, a drip of
keep-alive comments, a huge answer or tool argument. Huge payloads are
generated piece by piece, so the server itself holds little memory;
`sent_bytes` records what each streamed reply actually wrote before the
client stopped reading.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    content: str = ""
    tool_calls: list[tuple[str, str, dict | str]] = field(default_factory=list)  # (id, name, arguments)


def text(content: str) -> Reply:
    return Reply(content=content)


def tool_call(name: str, arguments: dict | str, call_id: str = "call_1") -> Reply:
    return Reply(tool_calls=[(call_id, name, arguments)])


@dataclass
class Fault:
    kind: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content: str = ""  # text streamed before the fault
    seconds: float = 0.0  # how long to stay silent / keep dripping
    interval: float = 0.05
    size: int = 0  # characters of a huge answer or tool argument
    piece: int = 4096  # characters per streamed piece


def status(code: int, *, retry_after: str | None = None) -> Fault:
    """An HTTP error with an OpenAI-style JSON error body."""
    return Fault("status", status=code, headers={"Retry-After": retry_after} if retry_after is not None else {})


def html() -> Fault:
    """A 200 whose body is an HTML page (a proxy's login or error page)."""
    return Fault("html")


def malformed(content: str = "partial") -> Fault:
    """Some text, then a data line that is not JSON."""
    return Fault("malformed", content=content)


def cut(content: str = "half an answ") -> Fault:
    """Some text, then the connection closes: no finish_reason, no [DONE]."""
    return Fault("cut", content=content)


def no_done(content: str = "answer") -> Fault:
    """A finish_reason, but the stream closes without [DONE]."""
    return Fault("no_done", content=content)


def no_finish(content: str = "answer") -> Fault:
    """[DONE] without any finish_reason."""
    return Fault("no_finish", content=content)


def silence(seconds: float, *, headers: bool = False) -> Fault:
    """Nothing (not even headers, unless `headers`) for `seconds`."""
    return Fault("silence", seconds=seconds, headers={"sent": "1"} if headers else {})


def stall(content: str, seconds: float) -> Fault:
    """Some text, then silence for `seconds` (the idle deadline)."""
    return Fault("stall", content=content, seconds=seconds)


def drip(seconds: float, *, content: str = "", interval: float = 0.05) -> Fault:
    """Optional text, then `: keep-alive` comments every `interval` for `seconds`."""
    return Fault("drip", content=content, seconds=seconds, interval=interval)


def huge_text(size: int, *, piece: int = 4096) -> Fault:
    """An answer of `size` characters in pieces (then a proper finish)."""
    return Fault("huge_text", size=size, piece=piece)


def huge_line(size: int) -> Fault:
    """One data line carrying `size` characters of content."""
    return Fault("huge_line", size=size)


def huge_tool_argument(size: int, *, name: str = "run_sql", piece: int = 8192) -> Fault:
    """A tool call whose arguments (`{"sql": "SELECT 'xxxx…'"}`) are `size` characters, in pieces."""
    return Fault("huge_tool_argument", size=size, piece=piece, content=name)


class FakeLLMServer:
    def __init__(self, script: list[Reply] | None = None) -> None:
        self.script: list = list(script or [])  # Reply, or a function(request body) -> Reply
        self.requests: list[dict] = []
        self.sent_bytes: list[int] = []  # per streamed fault reply
        self.delay = 0.0  # seconds every request waits before its reply (a slow model)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    reply = server.script.pop(0) if server.script else Reply(content="(script exhausted)")
                if server.delay:
                    server._stop.wait(server.delay)
                # An adaptive step (a scripted attacker reading what it was sent).
                if callable(reply):
                    reply = reply(body)
                if isinstance(reply, Fault):
                    sent = [0]
                    try:
                        self._fault(body, reply, sent)
                    except (BrokenPipeError, ConnectionResetError):
                        pass  # the client stopped reading: as it should
                    finally:
                        with server._lock:
                            server.sent_bytes.append(sent[0])
                    self.close_connection = True
                elif body.get("stream"):
                    self._stream(body, reply)
                else:
                    self._plain(body, reply)

            def _fault(self, body: dict, fault: Fault, sent: list[int]) -> None:
                def write(data: bytes) -> None:
                    self.wfile.write(data)
                    self.wfile.flush()
                    sent[0] += len(data)

                def event(delta: dict, finish: str | None = None) -> None:
                    payload = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                    write(f"data: {json.dumps(payload)}\n\n".encode())

                def sse_headers() -> None:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    self.wfile.flush()

                kind = fault.kind
                if kind == "status":
                    data = json.dumps({"error": {"message": "scripted failure", "type": "server_error"}}).encode()
                    self.send_response(fault.status)
                    for name, value in fault.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    write(data)
                    return
                if kind == "html":
                    data = b"<html><body><h1>Please sign in</h1></body></html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    write(data)
                    return
                if kind == "silence":
                    if fault.headers:
                        sse_headers()
                    server._stop.wait(fault.seconds)
                    return
                sse_headers()
                event({"role": "assistant", "content": ""})
                if fault.content and kind != "huge_tool_argument":
                    event({"content": fault.content})
                if kind == "malformed":
                    write(b'data: {"choices": [{"delta": {"content": "x"\n\n')
                elif kind == "no_done":
                    event({}, finish="stop")
                elif kind == "no_finish":
                    write(b"data: [DONE]\n\n")
                elif kind == "stall":
                    server._stop.wait(fault.seconds)
                    event({}, finish="stop")
                    write(b"data: [DONE]\n\n")
                elif kind == "drip":
                    until = time.monotonic() + fault.seconds
                    while time.monotonic() < until and not server._stop.is_set():
                        write(b": keep-alive\n\n")
                        event({"content": ""})  # an empty chunk is no progress either
                        server._stop.wait(fault.interval)
                elif kind == "huge_text":
                    for start in range(0, fault.size, fault.piece):
                        event({"content": "x" * min(fault.piece, fault.size - start)})
                    event({}, finish="stop")
                    write(b"data: [DONE]\n\n")
                elif kind == "huge_line":
                    # One line, written in pieces so the server holds little.
                    write(b'data: {"choices": [{"index": 0, "finish_reason": null, "delta": {"content": "')
                    for start in range(0, fault.size, 65536):
                        write(b"y" * min(65536, fault.size - start))
                    write(b'"}}]}\n\n')
                    event({}, finish="stop")
                    write(b"data: [DONE]\n\n")
                elif kind == "huge_tool_argument":
                    head = '{"sql": "SELECT \''
                    call = {"index": 0, "id": "call_big", "type": "function"}
                    event({"tool_calls": [{**call, "function": {"name": fault.content, "arguments": head}}]})
                    remaining = fault.size - len(head) - 3
                    while remaining > 0:
                        part = min(fault.piece, remaining)
                        event({"tool_calls": [{"index": 0, "function": {"arguments": "x" * part}}]})
                        remaining -= part
                    event({"tool_calls": [{"index": 0, "function": {"arguments": "'\"}"}}]})
                    event({}, finish="tool_calls")
                    write(b"data: [DONE]\n\n")
                # "cut": nothing more; the connection closes.

            def _tool_calls_json(self, reply: Reply) -> list[dict]:
                return [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
                    }
                    for call_id, name, args in reply.tool_calls
                ]

            def _plain(self, body: dict, reply: Reply) -> None:
                message: dict = {"role": "assistant", "content": reply.content or None}
                if reply.tool_calls:
                    message["tool_calls"] = self._tool_calls_json(reply)
                payload = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", ""),
                    "choices": [
                        {"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}
                    ],
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()

                def chunk(delta: dict, finish: str | None = None) -> None:
                    payload = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                    self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
                    self.wfile.flush()

                chunk({"role": "assistant", "content": ""})
                # Split text into small pieces, as real servers do.
                for start in range(0, len(reply.content), 7):
                    chunk({"content": reply.content[start : start + 7]})
                for index, call in enumerate(self._tool_calls_json(reply)):
                    arguments = call["function"]["arguments"]
                    half = len(arguments) // 2
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": call["id"],
                                    "type": "function",
                                    "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
                                }
                            ]
                        }
                    )
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
                chunk({}, finish="tool_calls" if reply.tool_calls else "stop")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # many concurrent turns (bench/load.py)

            def handle_error(self, request, client_address) -> None:  # a client that hung up is no error here
                pass

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def wait_sent(self, count: int = 1, timeout: float = 10.0) -> list[int]:
        """`sent_bytes` once `count` fault replies have finished writing."""
        until = time.monotonic() + timeout
        while len(self.sent_bytes) < count and time.monotonic() < until:
            time.sleep(0.01)
        return self.sent_bytes

    def all_request_text(self) -> str:
        return "\n".join(json.dumps(r, ensure_ascii=False) for r in self.requests)


def main() -> None:
    """A standalone model server: `python -m tests.support.fake_llm --delay 1
    --text '...'` answers every call with that text after the delay, prints
    its base URL on the first line and serves until stopped. bench/load.py
    runs it in its own process, so the bench's websocket clients do not slow
    the model's answers down through their own process's interpreter lock."""
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--text", default="OK")
    args = parser.parse_args()

    class Endless(list):
        def pop(self, index: int = -1):
            return Reply(content=args.text)

        def __bool__(self) -> bool:
            return True

    server = FakeLLMServer()
    server.script = Endless()
    server.delay = args.delay
    server.requests = _Discard()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with server:
        print(server.base_url, flush=True)
        try:
            stopped.wait()
        except KeyboardInterrupt:
            pass
    sys.exit(0)


class _Discard(list):
    """A request log that keeps nothing (a long bench would fill memory)."""

    def append(self, item) -> None:
        pass


if __name__ == "__main__":
    main()
