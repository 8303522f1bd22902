"""Model clients. Every provider is reached through one small interface:
`complete(messages, tools, on_delta) -> AssistantReply`.

`OpenAICompatibleClient` speaks chat completions with tool calls (vLLM, Ollama,
llama.cpp server, OpenAI) through the official `openai` library, streaming so
the user sees text as it arrives. The offline demo model implements the same
interface without any network.

A model call is bounded (`ModelLimits`, from settings):

- deadlines: connect, first byte (until the first data event), idle (between
  data events; SSE comments and empty chunks are not progress) and total (the
  whole call, retries included, enforced even while bytes drip). Connect and
  the wait for the response headers are httpx timeouts; the others are kept by
  a watchdog thread that shuts the socket down when one expires, so a blocked
  read returns at once;
- the stream is parsed here, strictly: anything but an event stream, a
  malformed chunk, a provider error event, or an end without `finish_reason`
  and `[DONE]` is a failure, never an empty "completed" answer;
- retries (backoff with jitter, a short Retry-After honoured) only for
  429 / 5xx and connection errors before any response, only within the total
  deadline; never once a response started;
- caps: the answer's length (the call fails), one tool call's arguments (reading
  stops; the executor refuses the oversize call), one SSE line's length.

Every failure is a `ModelError` with a user-readable, translated message.
"""

from __future__ import annotations

import email.utils
import functools
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from django.utils.translation import gettext as _


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it (cut after the cap + 1 characters)


@dataclass(frozen=True)
class AssistantReply:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


class ModelError(Exception):
    """The provider could not be reached or answered with an error."""


class ModelTimeoutError(ModelError):
    """A deadline (connect, first byte, idle, total) expired."""


class ModelConnectionError(ModelError):
    """No connection to the provider (after the allowed retries)."""


class ModelStatusError(ModelError):
    """The provider answered with an HTTP error status."""


class ModelStreamError(ModelError):
    """The answer was not a complete, well-formed event stream."""


class ModelLimitError(ModelError):
    """The answer was larger than allowed; reading stopped."""


class ModelClient(Protocol):
    def complete(
        self, *, messages: list[dict], tools: list[dict], on_delta: Callable[[str], None]
    ) -> AssistantReply: ...


@dataclass(frozen=True)
class ModelLimits:
    connect_seconds: float = 5.0
    first_byte_seconds: float = 60.0
    idle_seconds: float = 30.0
    total_seconds: float = 180.0
    max_retries: int = 2
    retry_base_seconds: float = 0.5
    retry_after_max_seconds: float = 10.0
    answer_max_chars: int = 200_000
    tool_argument_max_chars: int = 100_000

    @classmethod
    def from_settings(cls) -> ModelLimits:
        from django.conf import settings

        return cls(
            connect_seconds=settings.OWLAI_MODEL_CONNECT_SECONDS,
            first_byte_seconds=settings.OWLAI_MODEL_FIRST_BYTE_SECONDS,
            idle_seconds=settings.OWLAI_MODEL_IDLE_SECONDS,
            total_seconds=settings.OWLAI_MODEL_TOTAL_SECONDS,
            max_retries=settings.OWLAI_MODEL_MAX_RETRIES,
            retry_base_seconds=settings.OWLAI_MODEL_RETRY_BASE_SECONDS,
            retry_after_max_seconds=settings.OWLAI_MODEL_RETRY_AFTER_MAX_SECONDS,
            answer_max_chars=settings.OWLAI_MODEL_ANSWER_MAX_CHARS,
            tool_argument_max_chars=settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS,
        )

    @property
    def max_line_bytes(self) -> int:
        # One SSE line carries one JSON chunk; even an escaped (\\uXXXX) chunk
        # holding a whole capped answer or argument fits in this.
        return 6 * max(self.answer_max_chars, self.tool_argument_max_chars) + 64 * 1024


FIRST_BYTE, IDLE, TOTAL = "first_byte", "idle", "total"


def _timeout_error(kind: str, limits: ModelLimits) -> ModelTimeoutError:
    if kind == FIRST_BYTE:
        message = _("the model did not start answering within %(seconds)s seconds.")
        seconds = limits.first_byte_seconds
    elif kind == IDLE:
        message = _("the model stopped sending for more than %(seconds)s seconds.")
        seconds = limits.idle_seconds
    elif kind == "connect":
        message = _("no connection to the model server within %(seconds)s seconds.")
        seconds = limits.connect_seconds
    else:
        message = _("the model's answer took longer than %(seconds)s seconds.")
        seconds = limits.total_seconds
    return ModelTimeoutError(message % {"seconds": f"{seconds:g}"})


class _Watchdog:
    """Keeps the first-byte, idle and total deadlines of one attempt. On
    expiry it records which one and shuts the socket down, so the reader
    blocked in `recv` gets end-of-file at once."""

    def __init__(self, limits: ModelLimits, total_deadline: float) -> None:
        self._limits = limits
        self._total_deadline = total_deadline
        self._phase = FIRST_BYTE
        self._phase_deadline = time.monotonic() + limits.first_byte_seconds
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        self._stopped = False
        self.expired: str | None = None
        self._thread = threading.Thread(target=self._run, name="owlai-model-watchdog", daemon=True)
        self._thread.start()

    def attach(self, sock: socket.socket | None) -> None:
        with self._cond:
            self._sock = sock
            if self.expired:
                self._shutdown()

    def progress(self) -> None:
        """A data event arrived: the idle clock restarts (never past the total)."""
        with self._cond:
            self._phase = IDLE
            deadline = time.monotonic() + self._limits.idle_seconds
            earlier = deadline < self._phase_deadline
            self._phase_deadline = deadline
            if earlier:
                # Only a deadline moved earlier needs the thread awake (the
                # first data event, when idle is shorter than first byte); a
                # later one it finds when it wakes for the old one. Waking it
                # on every chunk cost a thread switch per chunk.
                self._cond.notify()

    def check(self) -> None:
        """The reader's own clock check, so a drip of bytes cannot outrun the watchdog."""
        with self._cond:
            if self.expired is None and time.monotonic() >= min(self._phase_deadline, self._total_deadline):
                self._expire()
            expired = self.expired
        if expired:
            raise _timeout_error(expired, self._limits)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped and self.expired is None:
                wait = min(self._phase_deadline, self._total_deadline) - time.monotonic()
                if wait <= 0:
                    self._expire()
                    return
                self._cond.wait(wait)

    def _expire(self) -> None:
        self.expired = TOTAL if self._total_deadline <= self._phase_deadline else self._phase
        self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            try:
                # The plain socket's shutdown (for TLS too): wakes a blocked recv.
                socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
            except (OSError, TypeError):
                pass


class _Retry(Exception):
    def __init__(self, error: ModelError, delay: float | None = None) -> None:
        self.error = error
        self.delay = delay  # what the provider asked for (Retry-After), if anything


def _retry_after(headers) -> float | None:
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class OpenAICompatibleClient:
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        limits: ModelLimits | None = None,
    ) -> None:
        """The deadlines and caps come from `limits` (default: settings)."""
        import httpx
        import openai

        self._openai = openai
        self._httpx = httpx
        self._limits = limits or ModelLimits.from_settings()
        self._client = _shared_openai(base_url, api_key or "unused")
        self._model = model

    def complete(self, *, messages: list[dict], tools: list[dict], on_delta: Callable[[str], None]) -> AssistantReply:
        limits = self._limits
        # The history and tools go out as built (plain JSON values), through
        # `extra_body`, which the SDK merges into the request body as is: its
        # typed transform of `messages` walks every message of the history on
        # every call and cost more CPU than the rest of the request.
        body: dict = {"messages": messages}
        if tools:
            body["tools"] = tools
        kwargs: dict = {"model": self._model, "messages": [], "stream": True, "extra_body": body}
        total_deadline = time.monotonic() + limits.total_seconds
        attempt = 0
        while True:
            try:
                return self._attempt(kwargs, on_delta, total_deadline)
            except _Retry as retry:
                attempt += 1
                if attempt > limits.max_retries:
                    raise retry.error from retry.__cause__
                backoff = limits.retry_base_seconds * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                delay = max(backoff, retry.delay or 0.0)
                if retry.delay is not None and retry.delay > limits.retry_after_max_seconds:
                    raise retry.error from retry.__cause__  # asked to wait longer than we would
                if time.monotonic() + delay >= total_deadline:
                    raise retry.error from retry.__cause__
                time.sleep(delay)

    def _attempt(self, kwargs: dict, on_delta: Callable[[str], None], total_deadline: float) -> AssistantReply:
        httpx, openai, limits = self._httpx, self._openai, self._limits
        remaining = total_deadline - time.monotonic()
        if remaining <= 0:
            raise _timeout_error(TOTAL, limits)
        # The read timeout bounds the wait for the headers (the first byte)
        # and is a backstop per read; the watchdog keeps idle and total.
        timeout = httpx.Timeout(
            connect=min(limits.connect_seconds, remaining),
            read=min(max(limits.first_byte_seconds, limits.idle_seconds), remaining),
            write=min(max(limits.connect_seconds, limits.idle_seconds), remaining),
            pool=min(limits.connect_seconds, remaining),
        )
        watchdog = _Watchdog(limits, total_deadline)
        try:
            try:
                manager = self._client.chat.completions.with_streaming_response.create(**kwargs, timeout=timeout)
                response = manager.__enter__()
            except openai.APIStatusError as exc:
                raise self._status_error(exc) from exc
            except openai.APIConnectionError as exc:
                cause = exc.__cause__
                if isinstance(cause, httpx.ConnectTimeout):
                    raise _Retry(_timeout_error("connect", limits)) from exc
                if isinstance(cause, httpx.TimeoutException):
                    # Connected, asked, and no answer: a slow model is not retried.
                    kind = TOTAL if time.monotonic() >= total_deadline else FIRST_BYTE
                    raise _timeout_error(kind, limits) from exc
                raise _Retry(ModelConnectionError(_("the model server could not be reached."))) from exc
            except openai.OpenAIError as exc:
                raise ModelError(_("the model call failed (%(kind)s).") % {"kind": exc.__class__.__name__}) from exc
            try:
                http = response.http_response
                stream = http.extensions.get("network_stream")
                watchdog.attach(stream.get_extra_info("socket") if stream is not None else None)
                return self._read(http, on_delta, watchdog)
            finally:
                manager.__exit__(None, None, None)
        finally:
            watchdog.stop()

    def _status_error(self, exc) -> Exception:
        status = exc.status_code
        if status == 429:
            error = ModelStatusError(_("the model server is rate limiting requests (HTTP 429)."))
        else:
            error = ModelStatusError(_("the model server answered with HTTP status %(status)d.") % {"status": status})
        if status == 429 or status >= 500:
            return _Retry(error, _retry_after(exc.response.headers))
        return error

    def _read(self, http, on_delta: Callable[[str], None], watchdog: _Watchdog) -> AssistantReply:
        limits = self._limits
        content_type = http.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type and content_type != "text/event-stream":
            raise ModelStreamError(
                _("the model server sent %(type)s instead of a streamed answer.") % {"type": content_type[:60]}
            )
        content: list[str] = []
        content_chars = 0
        calls: dict[int, dict[str, str]] = {}
        argument_chars = 0
        finished = done = False
        data: list[str] = []
        try:
            for line in self._lines(http, watchdog):
                if line:
                    if line.startswith(":"):
                        continue  # a comment (keep-alive): not progress
                    name, _sep, value = line.partition(":")
                    if name == "data":
                        data.append(value[1:] if value.startswith(" ") else value)
                    elif name not in ("event", "id", "retry"):
                        raise ModelStreamError(_("the model server's answer is not an event stream."))
                    continue
                if not data:
                    continue
                payload, data = "\n".join(data), []
                if payload.strip() == "[DONE]":
                    done = True
                    break
                choice = self._chunk(payload)
                delta = choice.get("delta") or {}
                if choice.get("finish_reason"):
                    finished = True
                if finished or any(value for key, value in delta.items() if key != "role"):
                    watchdog.progress()  # an empty chunk is no more progress than a comment
                text = delta.get("content")
                if isinstance(text, str) and text:
                    content_chars += len(text)
                    if content_chars > limits.answer_max_chars:
                        raise ModelLimitError(
                            _("the model's answer exceeded %(max)d characters and was stopped.")
                            % {"max": limits.answer_max_chars}
                        )
                    content.append(text)
                    on_delta(text)
                oversize = False
                # Tool calls arrive in fragments keyed by index; stitch them.
                for fragment in delta.get("tool_calls") or []:
                    index = fragment.get("index", 0) if isinstance(fragment, dict) else None
                    if (
                        not isinstance(index, int)
                        or isinstance(index, bool)
                        or not isinstance(fragment.get("function") or {}, dict)
                    ):
                        raise ModelStreamError(_("the model server sent a malformed chunk."))
                    slot = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                    if fragment.get("id"):
                        slot["id"] = str(fragment["id"])[:200]
                    function = fragment.get("function") or {}
                    name, piece = function.get("name") or "", function.get("arguments") or ""
                    if not isinstance(name, str):
                        raise ModelStreamError(_("the model server sent a malformed chunk."))
                    if not isinstance(piece, str):
                        piece = json.dumps(piece)  # some servers send the arguments as an object
                    slot["name"] = (slot["name"] + name)[:200]
                    room = limits.tool_argument_max_chars + 1 - len(slot["arguments"])
                    slot["arguments"] += piece[: max(room, 0)]
                    argument_chars += len(piece)
                    if len(slot["arguments"]) > limits.tool_argument_max_chars:
                        # Stop reading: the executor refuses this call by its size.
                        calls = {i: s for i, s in calls.items() if i <= index}
                        oversize = True
                        break
                if oversize:
                    finished = done = True
                    break
                if argument_chars > 4 * limits.tool_argument_max_chars:
                    raise ModelLimitError(_("the model's tool calls were too large and were stopped."))
        except ModelError:
            watchdog.check()  # a deadline that expired meanwhile is the real cause
            raise
        except self._httpx.HTTPError as exc:
            watchdog.check()
            raise ModelStreamError(_("the model's answer was cut off before it finished.")) from exc
        watchdog.check()
        if not finished or not done:
            raise ModelStreamError(_("the model's answer was cut off before it finished."))
        tool_calls = [
            ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments=slot["arguments"])
            for index, slot in sorted(calls.items())
        ]
        return AssistantReply(content="".join(content), tool_calls=tool_calls)

    def _chunk(self, payload: str) -> dict:
        """The first choice of one data event (empty for a usage-only chunk)."""
        try:
            chunk = json.loads(payload)
        except ValueError as exc:
            raise ModelStreamError(_("the model server sent a malformed chunk.")) from exc
        if not isinstance(chunk, dict):
            raise ModelStreamError(_("the model server sent a malformed chunk."))
        error = chunk.get("error")
        if error:
            code = ""
            if isinstance(error, dict):
                code = str(error.get("code") or error.get("type") or "")
            raise ModelStatusError(
                _("the model server reported an error (%(code)s).") % {"code": code[:80] or "unknown"}
            )
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise ModelStreamError(_("the model server sent a malformed chunk."))
        if not choices:
            return {}  # e.g. a usage-only chunk
        choice = choices[0]
        if not isinstance(choice, dict) or not isinstance(choice.get("delta") or {}, dict):
            raise ModelStreamError(_("the model server sent a malformed chunk."))
        return choice

    def _lines(self, http, watchdog: _Watchdog) -> Iterator[str]:
        """Lines of the body, each at most `max_line_bytes`; the clock is
        checked after every read so dripping bytes cannot hold the call."""
        limit = self._limits.max_line_bytes
        buffer = bytearray()
        for piece in http.iter_bytes():
            watchdog.check()
            buffer += piece
            while True:
                end = buffer.find(b"\n")
                if end < 0:
                    break
                line = bytes(buffer[:end]).rstrip(b"\r")
                del buffer[: end + 1]
                try:
                    yield line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ModelStreamError(_("the model server's answer is not an event stream.")) from exc
            if len(buffer) > limit:
                raise ModelLimitError(_("the model server sent a chunk that is too large; reading stopped."))
        if buffer.strip():
            yield buffer.decode("utf-8", errors="replace")
        # End of body: an empty line dispatches a pending event.
        yield ""


def warm_up() -> None:
    """Import what a model call needs, ahead of the first turn. The library
    loads lazily, and its first use imports several hundred modules (pydantic
    models for every API it knows): a worker's first turn paid about a second
    of CPU for it, in the middle of a user's wait."""
    import httpx  # noqa: F401
    import openai

    openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0).chat.completions  # noqa: B018


@functools.lru_cache(maxsize=64)
def _shared_openai(base_url: str, api_key: str):
    """One library client per (server, key) per process, shared by the
    worker's threads (httpx clients are thread-safe): building one loads the
    CA store into a new SSL context, which cost about half of a worker's CPU
    per turn, and a shared client keeps its connections to the model server
    alive between turns. A rotated key is a new entry. Retries are ours (only
    where safe, within the total deadline). Local servers usually ignore the
    key, but the library requires one."""
    import openai

    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
