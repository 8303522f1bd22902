"""A scripted OpenAI-compatible chat-completions server on loopback.

It answers each request with the next scripted reply and records every
request body, so tests can prove what did and did not reach a model. A
scripted reply may also be a function of the request body, for a model that
reacts to what it reads (an attacker reusing the tokens it was given).
Supports streaming (SSE) and non-streaming responses.
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


class FakeLLMServer:
    def __init__(self, script: list[Reply] | None = None) -> None:
        self.script: list = list(script or [])  # Reply, or a function(request body) -> Reply
        self.requests: list[dict] = []
        self._lock = threading.Lock()
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
                # An adaptive step (a scripted attacker reading what it was sent).
                if callable(reply):
                    reply = reply(body)
                if body.get("stream"):
                    self._stream(body, reply)
                else:
                    self._plain(body, reply)

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

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def all_request_text(self) -> str:
        return "\n".join(json.dumps(r, ensure_ascii=False) for r in self.requests)
