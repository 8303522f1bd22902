"""MCP client for connectors (the official `mcp` SDK), usable from sync code.

`ConnectorSessions` is what a turn (or a sync) holds: one background event
loop, and one open MCP session per connector, reused by every call of the
turn and closed when the turn ends. Every wait is bounded: connecting
(process start or HTTP connect, plus the handshake) by `connect_timeout`,
each call by the connector's `call_timeout`, closing by CLOSE_TIMEOUT.

Failures are ConnectorError subclasses whose message is safe to show to the
model and the admin: it names what went wrong (timeout, crash, refused
connection, protocol error), never the server's own error text, arguments
or results (those may carry personal data; `server_message` keeps the
server's text for a caller that masks it first).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pydantic
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from governance.connectors.definitions import ToolDefinition
from governance.connectors.spelling import normalised, normalised_text, text_fields

logger = logging.getLogger(__name__)

# Closing a session to a hung stdio server: stdin closed, a grace period,
# then SIGTERM and SIGKILL (the SDK's own bounded sequence, ~4 s at worst).
CLOSE_TIMEOUT = 10.0
# Pages of tools/list followed before giving up (a server that paginates
# forever must not hang a sync).
MAX_LIST_PAGES = 50
MAX_TOOLS = 1000
# Slack on top of an operation's own deadline before the calling thread stops
# waiting for the event loop itself.
_LOOP_GRACE = 5.0


class ConnectorError(Exception):
    """A connector could not be used; str() is safe for the model and the admin."""

    outcome_reason = "connector error"

    def __init__(self, message: str, *, server_message: str = ""):
        super().__init__(message)
        self.server_message = server_message


class ConnectorConfigError(ConnectorError):
    """The connector's settings cannot be used (missing secret, command no longer allowed)."""

    outcome_reason = "connector misconfigured"


class ConnectorUnavailable(ConnectorError):
    """Could not connect, start the server, or complete the handshake."""

    outcome_reason = "connector unavailable"


class ConnectorTimeout(ConnectorError):
    outcome_reason = "connector timed out"


class ConnectorCrashed(ConnectorError):
    """The connection or the server process ended in the middle of a call."""

    outcome_reason = "connector connection lost"


class ConnectorProtocolError(ConnectorError):
    """The server answered with an error or with something that is not valid MCP."""

    outcome_reason = "connector protocol error"


class DefinitionMismatch(ConnectorError):
    """The server's current definition of the tool is not the pinned one."""

    outcome_reason = "tool definition changed"


@dataclass(frozen=True)
class StdioCommand:
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False)  # values are secrets
    cwd: str = ""


@dataclass(frozen=True)
class ConnectorTarget:
    """How to reach one connector, secrets resolved (see targets.py). Never
    logged: `headers` and `stdio.env` hold secret values."""

    key: str  # sessions are reused per key; a changed setting gives a new key
    name: str
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    stdio: StdioCommand | None = None
    call_timeout: float = 30.0
    connect_timeout: float = 10.0


@dataclass(frozen=True)
class ToolCallResult:
    """A tool's answer as plain JSON-able values: content blocks (text,
    embedded resources, links; binary replaced by a size marker),
    structured content, and whether the tool reported an error."""

    content: list[dict[str, Any]]
    structured: Any = None
    is_error: bool = False


def content_blocks(blocks: list[Any]) -> list[dict[str, Any]]:
    """The SDK's content blocks as plain dicts, every string in one spelling
    (governance.connectors.spelling). Binary data never goes on: images,
    audio and blob resources become a marker with type and size."""
    out: list[dict[str, Any]] = []
    for block in blocks or []:
        kind = getattr(block, "type", None)
        if kind == "text":
            out.append({"type": "text", **text_fields(block.text)})
        elif kind in ("image", "audio"):
            out.append({"type": kind, "mime_type": block.mime_type, "bytes": _b64_size(block.data)})
        elif kind == "resource":
            resource = block.resource
            item: dict[str, Any] = {"type": "resource", "uri": normalised_text(str(resource.uri))}
            item["mime_type"] = resource.mime_type
            if getattr(resource, "text", None) is not None:
                item.update(text_fields(resource.text))
            else:
                item["bytes"] = _b64_size(getattr(resource, "blob", "") or "")
            out.append(item)
        elif kind == "resource_link":
            out.append(
                {"type": "resource_link", "uri": normalised_text(str(block.uri)), "name": normalised_text(block.name)}
            )
        else:
            out.append({"type": "unsupported"})
    return out


def _b64_size(data: str) -> int:
    return (len(data) * 3) // 4 - data[-2:].count("=") if data else 0


def classify_error(exc: BaseException, *, phase: str, timeout: float) -> ConnectorError:
    """One ConnectorError for whatever the SDK, the transport or the deadline raised.
    `phase` is "connect" or "call" (a lost connection means a crash only mid-call)."""
    try:
        return _classify(_leaf(exc), phase=phase, timeout=timeout)
    except Exception:  # classifying must not fail: a generic error then
        return ConnectorError("the connector call failed")


def _classify(leaf: BaseException, *, phase: str, timeout: float) -> ConnectorError:
    if isinstance(leaf, ConnectorError):
        return leaf
    if isinstance(leaf, TimeoutError | concurrent.futures.TimeoutError | httpx2.TimeoutException):
        what = "connecting to the connector" if phase == "connect" else "the connector's answer"
        return ConnectorTimeout(f"timed out after {timeout:g} s waiting for {what}")
    if isinstance(leaf, MCPError):
        if leaf.code == REQUEST_TIMEOUT:
            return ConnectorTimeout(f"timed out after {timeout:g} s waiting for the connector's answer")
        if leaf.code == CONNECTION_CLOSED:
            return _lost(phase)
        return ConnectorProtocolError(
            f"the connector answered with an error (code {leaf.code})", server_message=str(leaf.message)[:500]
        )
    if isinstance(leaf, anyio.EndOfStream | anyio.BrokenResourceError | anyio.ClosedResourceError):
        return _lost(phase)
    if isinstance(leaf, httpx2.HTTPStatusError):
        return ConnectorUnavailable(f"the connector's server answered HTTP {leaf.response.status_code}")
    if isinstance(leaf, httpx2.TransportError | OSError):
        if phase == "connect":
            return ConnectorUnavailable(f"could not reach the connector ({type(leaf).__name__})")
        return _lost(phase)
    if isinstance(leaf, pydantic.ValidationError | ValueError | RuntimeError | KeyError | TypeError):
        return ConnectorProtocolError(f"the connector sent an invalid MCP message ({type(leaf).__name__})")
    return ConnectorError(f"the connector call failed ({type(leaf).__name__})")


def _lost(phase: str) -> ConnectorError:
    if phase == "connect":
        return ConnectorUnavailable("the connector closed the connection while connecting")
    return ConnectorCrashed("the connector's server stopped or closed the connection during the call")


def _leaf(exc: BaseException) -> BaseException:
    """The first meaningful exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


@asynccontextmanager
async def _connected(target: ConnectorTarget) -> AsyncIterator[Any]:
    """An initialised SDK client. The connect deadline covers the transport and
    the handshake, and only those; closing is bounded by CLOSE_TIMEOUT. The
    whole session lives in this one task (anyio's task groups and cancel
    scopes must be left in the task that entered them)."""
    scope = anyio.CancelScope(deadline=anyio.current_time() + target.connect_timeout)
    with scope:
        async with AsyncExitStack() as stack:
            if target.stdio is not None:
                params = StdioServerParameters(
                    command=target.stdio.command,
                    args=list(target.stdio.args),
                    env=dict(target.stdio.env),
                    cwd=target.stdio.cwd or None,
                )
                # The server's stderr may hold data: not into our logs. (The
                # SDK's default, sys.stderr, may also lack a file descriptor
                # in a Celery worker.)
                transport: Any = stdio_client(params, errlog=subprocess.DEVNULL)  # type: ignore[arg-type]
            else:
                http = await stack.enter_async_context(
                    create_mcp_http_client(
                        headers=dict(target.headers),
                        # read: a backstop; the call deadline normally ends a slow call first.
                        timeout=httpx2.Timeout(target.connect_timeout, read=target.call_timeout + _LOOP_GRACE),
                    )
                )
                transport = streamable_http_client(target.url, http_client=http)
            # No sampling, elicitation or roots callbacks: a connector's server
            # cannot ask the model anything or read anything of ours. No
            # response cache: a sync must see the server's list as it is now.
            client = await stack.enter_async_context(
                Client(transport, cache=None, read_timeout_seconds=target.call_timeout)
            )
            scope.deadline = math.inf
            try:
                yield client
            finally:
                scope.deadline = anyio.current_time() + CLOSE_TIMEOUT
    if scope.cancelled_caught:
        raise TimeoutError("connector deadline")


@dataclass
class _Open:
    target: ConnectorTarget
    context: Any  # the portal's sync wrapper of _connected
    client: Any
    definitions: dict[str, ToolDefinition] | None = None


class ConnectorSessions:
    """The MCP sessions of one turn (or one sync): opened on first use, reused
    by later calls to the same connector, closed by `close()` (or `with`).
    A session whose call timed out or crashed is closed and dropped; the next
    call opens a new one. Used from one thread at a time."""

    def __init__(self) -> None:
        self._portal_context: Any = None
        self._portal: BlockingPortal | None = None
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> ConnectorSessions:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # --- public API -----------------------------------------------------------------

    def list_tools(self, target: ConnectorTarget) -> list[ToolDefinition]:
        """Every tool the server lists now (all pages), in server order."""
        session = self._session(target)
        deadline = target.connect_timeout + target.call_timeout
        try:
            tools = self._run(session, _list_all, session.client, timeout=deadline)
        except BaseException as exc:
            self._drop(target.key)
            raise classify_error(exc, phase="call", timeout=deadline) from None
        session.definitions = {tool.name: tool for tool in tools}
        return tools

    def call_tool(
        self, target: ConnectorTarget, name: str, arguments: dict[str, Any], *, pinned_hash: str | None = None
    ) -> ToolCallResult:
        """Call one tool. With `pinned_hash`, the server's current definition
        of the tool (listed once per session) must hash to it, or nothing is
        sent: DefinitionMismatch."""
        session = self._session(target)
        if pinned_hash is not None:
            if session.definitions is None:
                self.list_tools(target)
                session = self._session(target)
            current = (session.definitions or {}).get(name)
            if current is None or current.hash != pinned_hash:
                raise DefinitionMismatch("the connector's server changed this tool; an admin must review it first")
        timeout = target.call_timeout
        try:
            result = self._run(session, _call, session.client, name, arguments, timeout, timeout=timeout)
        except BaseException as exc:
            self._drop(target.key)
            raise classify_error(exc, phase="call", timeout=timeout) from None
        return result

    def close(self) -> None:
        with self._lock:
            keys = list(self._open)
        for key in keys:
            self._drop(key)
        if self._portal_context is not None:
            try:
                self._portal_context.__exit__(None, None, None)
            except Exception:
                logger.warning("connector event loop did not stop cleanly", exc_info=True)
            self._portal_context = self._portal = None

    # --- internals ------------------------------------------------------------------

    def _loop(self) -> BlockingPortal:
        if self._portal is None:
            self._portal_context = start_blocking_portal(name="owlai-connectors")
            self._portal = self._portal_context.__enter__()
        return self._portal

    def _session(self, target: ConnectorTarget) -> _Open:
        with self._lock:
            existing = self._open.get(target.key)
        if existing is not None:
            return existing
        portal = self._loop()
        context = portal.wrap_async_context_manager(_connected(target))
        started = time.monotonic()
        try:
            # Bounded by the connect deadline inside _connected.
            client = context.__enter__()
        except BaseException as exc:
            raise classify_error(exc, phase="connect", timeout=target.connect_timeout) from None
        logger.debug("connector %s connected in %.1f ms", target.name, (time.monotonic() - started) * 1000)
        session = _Open(target=target, context=context, client=client)
        with self._lock:
            self._open[target.key] = session
        return session

    def _run(self, session: _Open, func: Any, *args: Any, timeout: float) -> Any:
        future = self._loop().start_task_soon(func, *args)
        try:
            return future.result(timeout=timeout + _LOOP_GRACE)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _drop(self, key: str) -> None:
        with self._lock:
            session = self._open.pop(key, None)
        if session is None:
            return
        try:
            # Bounded: _connected gives closing CLOSE_TIMEOUT.
            session.context.__exit__(None, None, None)
        except BaseException:
            # Closing a broken session fails in many ways; it is dropped either way.
            logger.debug("closing connector session %s failed", session.target.name, exc_info=True)


async def _list_all(client: Any) -> list[ToolDefinition]:
    tools: list[ToolDefinition] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            tools.append(
                ToolDefinition(
                    name=tool.name,
                    description=tool.description or "",
                    input_schema=dict(tool.input_schema or {}),
                )
            )
        if len(tools) > MAX_TOOLS:
            raise ConnectorProtocolError(f"the connector lists more than {MAX_TOOLS} tools")
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise ConnectorProtocolError(f"the connector's tool list did not end after {MAX_LIST_PAGES} pages")


async def _call(client: Any, name: str, arguments: dict[str, Any], timeout: float) -> ToolCallResult:
    with anyio.fail_after(timeout):
        result = await client.call_tool(name, arguments, read_timeout_seconds=timeout)
    return ToolCallResult(
        content=content_blocks(result.content),
        structured=normalised(result.structured_content),
        is_error=bool(result.is_error),
    )
