"""Websocket endpoint for one conversation: /ws/chat/<conversation id>/.

Thin: validate frames, start turns through `chat.turns.start`, relay turn events
from the conversation's group. A bad frame gets an `error` event and the
socket stays open.

The database is the truth: on connect, on request (`sync`) and after a
channel-layer outage, the client gets the conversation's state and stored
events from the database; live frames are only the fast path. A transient
channel-layer error (Redis restarting) never closes the socket with 1011.

Limits, per socket (settings OWLAI_WS_*; README "Websocket protocol"):

* Rate. Every frame takes a token from a bucket (OWLAI_WS_FRAMES_PER_SECOND,
  burst OWLAI_WS_FRAME_BURST); `turn.start` also from its own
  (OWLAI_WS_TURN_STARTS_PER_MINUTE, burst OWLAI_WS_TURN_START_BURST), on top
  of the rule that a conversation runs one turn at a time. The defaults let a
  fast person send ten messages in a row and one every three seconds after
  that; a script that keeps starting turns is refused within the minute. A
  frame without a token gets an `error` `rate_limited` (a refused `turn.start`
  with `retry_after`, the seconds until it may send again, also in the
  message) and is dropped, unread; the socket stays open. Refused frames fill a third bucket that drains at
  OWLAI_WS_FLOOD_FACTOR x the frame rate and holds OWLAI_WS_FLOOD_SECONDS of
  that: a client that keeps flooding far past its limit overflows it and is
  closed with CLOSE_RATE_LIMITED (4429).

* Send buffer. ASGI has no backpressure for websockets, and daphne has none
  either: `websocket.send` goes straight to autobahn's `sendMessage`, which
  writes to the Twisted transport, which keeps whatever the kernel would not
  take in memory, without bound, for as long as the client does not read
  (that is how one idle client grew daphne by 180 MiB). The application
  never sees that buffer through ASGI, so the consumer looks for it itself:
  the `send` callable daphne hands the application is
  `functools.partial(Server.handle_reply, protocol)` (behind the session
  middleware's wrapper, `real_send`), and the protocol's `transport` is a
  Twisted `FileDescriptor` whose unwritten bytes are `dataBuffer` (from
  `offset`) plus `_tempDataLen`; behind TLS the same is read one transport
  down. Before every frame the consumer reads that figure: over
  OWLAI_WS_SEND_BUFFER_BYTES it sends nothing more, leaves the group and
  closes with CLOSE_TOO_SLOW (4408). Autobahn aborts the connection when the
  client does not answer the close within its close-handshake timeout
  (1 s), which frees the buffer. So a socket costs at most the cap plus one
  frame, and a client that was merely slow reconnects and gets everything
  from the database (`state`, `sync`): nothing is lost.
  Under another server (or the test communicator) no transport is found and
  the check is off; servers that do apply backpressure (uvicorn) make
  `send` wait instead, which costs this socket only.

* Other sockets. The worker's `group_send` never waits for a socket: the
  Redis layer adds to each member channel under its capacity and drops (and
  counts, chat.layers) for a full one; each consumer relays from its own
  channel. A slow client therefore stalls nothing but its own socket.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
import uuid

from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from accounts.language import browser_language
from chat.models import Conversation
from chat.protocol import ClientFrame, ServerEvent
from chat.sockets import SessionSocket, off_loop
from chat.turns import dispatch
from chat.turns.cancel import TurnCancelRefused, turn_cancel
from chat.turns.start import TurnRefused, turn_start
from chat.turns.timeline import conversation_state, turn_events_after

logger = logging.getLogger(__name__)


# Refusals are sent as close codes on an accepted socket (not an HTTP 403
# at the handshake, which a browser reports only as 1006): the page can tell
# "sign in again" (4401) from "not yours" (4403) from "no such endpoint" (4404).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
# The channel layer is unreachable: the client reconnects with backoff.
CLOSE_TRY_AGAIN_LATER = 1013
# The client kept sending far more frames than its limit.
CLOSE_RATE_LIMITED = 4429
# The client did not read: more than OWLAI_WS_SEND_BUFFER_BYTES waited for it.
CLOSE_TOO_SLOW = 4408


class TokenBucket:
    """`rate` tokens per second up to `burst`; starts full."""

    def __init__(self, rate: float, burst: float, clock=time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.stamp = clock()

    def take(self) -> bool:
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def wait(self) -> float:
        """Seconds until the next token."""
        self._refill()
        return max(0.0, (1 - self.tokens) / self.rate)

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now


def find_protocol(send, depth: int = 0):
    """daphne's WebSocketProtocol behind the ASGI `send` callable, or None
    (see the module docstring). Follows partials and `*send` attributes of
    the middleware wrappers only, a few levels deep."""
    if send is None or depth > 6:
        return None
    if hasattr(send, "transport") and hasattr(send, "sendMessage"):
        return send
    if isinstance(send, functools.partial):
        for part in send.args:
            found = find_protocol(part, depth + 1)
            if found is not None:
                return found
        return None
    owner = getattr(send, "__self__", None)
    if owner is None:
        return None
    for name, value in list(vars(owner).items()) if hasattr(owner, "__dict__") else []:
        if name.endswith("send") and callable(value):
            found = find_protocol(value, depth + 1)
            if found is not None:
                return found
    return None


def write_buffer_bytes(transport, depth: int = 0) -> int | None:
    """Bytes written to `transport` that the peer has not taken yet, or None
    when this transport does not tell."""
    if transport is None or depth > 2:
        return None
    size = getattr(transport, "get_write_buffer_size", None)  # asyncio transports
    if callable(size):
        return int(size())
    if hasattr(transport, "dataBuffer") and hasattr(transport, "_tempDataLen"):  # Twisted FileDescriptor
        return len(transport.dataBuffer) - getattr(transport, "offset", 0) + transport._tempDataLen
    # TLS (TLSMemoryBIOProtocol): the ciphertext waits one transport down.
    return write_buffer_bytes(getattr(transport, "transport", None), depth + 1)


class ChatConsumer(SessionSocket):
    # The rate buckets' clock (a test gives a scripted one).
    clock = staticmethod(time.monotonic)
    _protocol = None

    async def connect(self) -> None:
        clock = self.clock
        self._frames = TokenBucket(settings.OWLAI_WS_FRAMES_PER_SECOND, settings.OWLAI_WS_FRAME_BURST, clock)
        self._turn_starts = TokenBucket(
            settings.OWLAI_WS_TURN_STARTS_PER_MINUTE / 60.0, settings.OWLAI_WS_TURN_START_BURST, clock
        )
        flood_rate = settings.OWLAI_WS_FRAMES_PER_SECOND * settings.OWLAI_WS_FLOOD_FACTOR
        self._flood = TokenBucket(flood_rate, max(1.0, flood_rate * settings.OWLAI_WS_FLOOD_SECONDS), clock)
        self._protocol = find_protocol(self.base_send)
        self.language = self._language()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        conversation_id = self.scope["url_route"]["kwargs"]["conversation_id"]
        self.conversation = await self._owned_conversation(conversation_id, user.pk)
        if self.conversation is None:
            # Same answer for "not yours" and "does not exist".
            await self._refuse(CLOSE_FORBIDDEN)
            return
        self.groups_joined = (self.conversation.group_name,)
        joined = await self._join()
        await self.accept()
        if not joined:
            await self.close(code=CLOSE_TRY_AGAIN_LATER)
            return
        # Joined first, then read: whatever is stored after this read also
        # reaches this socket live (or shows up as a gap and is synced).
        await self._send_state()

    async def layer_recovered(self, message: dict) -> None:
        """The channel layer was unreachable (chat.layers): memberships may
        be gone with Redis and frames may be lost. Join again and send the
        state from the database."""
        if self.closing or not self.groups_joined:
            return
        if await self._join():
            await self._send_state()

    async def _send_state(self) -> None:
        await self._send_json(await self._state())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.closing:
            return
        with translation.override(self.language):
            try:
                await self._receive(text_data, bytes_data)
            except Exception:
                # A frame must never take the socket down (1011): whatever
                # went wrong is logged and answered, the socket stays open.
                logger.exception("frame on %s could not be handled", self.channel_name)
                await self._error("internal_error", _("The frame could not be handled. Please try again."))

    async def _receive(self, text_data: str | None, bytes_data: bytes | None) -> None:
        if not self._frames.take():
            await self._rate_limited(_("Too many frames; slow down."))
            return
        if text_data is None:
            await self._error("bad_frame", _("Binary frames are not supported; send JSON text."))
            return
        # "surrogatepass": a server that hands over lone surrogates must not
        # make the size check itself raise; they are refused just below.
        if len(text_data.encode("utf-8", "surrogatepass")) > settings.OWLAI_WS_MAX_FRAME_BYTES:
            await self._error("frame_too_large", _("The frame is too large."))
            return
        try:
            payload = json.loads(text_data)
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            await self._error("malformed_json", _("The frame is not valid JSON."))
            return
        if not _is_valid_unicode(payload):
            # JSON escapes such as "\ud800" decode to lone surrogates, which
            # no database, log or socket can carry as UTF-8.
            await self._error("invalid_unicode", _("The frame contains invalid Unicode (a lone surrogate)."))
            return
        if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
            await self._error("bad_event", _("An event must be a JSON object with a string 'type'."))
            return
        ref = payload.get("ref")
        if ref is not None and not (isinstance(ref, str) and len(ref) <= 64):
            await self._error("bad_event", _("'ref' must be a string of at most 64 characters."))
            return
        # turn.start checks the session in the same step as it starts the
        # turn (one trip to the database's thread, on the hot path).
        if (
            payload["type"] in (ClientFrame.TURN_CANCEL, ClientFrame.SYNC, ClientFrame.APPROVAL_DECIDE)
            and not await self._session_alive()
        ):
            # Signed out (or the session expired) since this socket opened:
            # the page signs in again and comes back (README close codes).
            await self._close(CLOSE_UNAUTHENTICATED)
            return
        if payload["type"] == ClientFrame.TURN_START:
            if not self._turn_starts.take():
                # Said in seconds: "wait a moment" left a person guessing.
                seconds = max(1, math.ceil(self._turn_starts.wait()))
                message = ngettext(
                    "Too many messages in a short time; you can send again in %(seconds)d second.",
                    "Too many messages in a short time; you can send again in %(seconds)d seconds.",
                    seconds,
                ) % {"seconds": seconds}
                await self._rate_limited(message, ref=ref, retry_after=seconds)
                return
            await self._turn_start(payload, ref)
        elif payload["type"] == ClientFrame.TURN_CANCEL:
            await self._turn_cancel(payload, ref)
        elif payload["type"] == ClientFrame.SYNC:
            await self._sync_frame(payload)
        elif payload["type"] == ClientFrame.APPROVAL_DECIDE:
            await self._approval_decide(payload, ref)
        else:
            await self._error("unknown_type", _("Unknown event type: %(type)s") % {"type": payload["type"][:50]})

    async def _rate_limited(self, message: str, ref: str | None = None, retry_after: int | None = None) -> None:
        if not self._flood.take():
            logger.warning("closing %s: it keeps sending far past its rate limit", self.channel_name)
            await self._close(CLOSE_RATE_LIMITED)
            return
        extra = {} if retry_after is None else {"retry_after": retry_after}
        await self._error("rate_limited", message, ref=ref, **extra)

    async def _turn_start(self, payload: dict, ref: str | None) -> None:
        text = payload.get("text")
        model = payload.get("model")
        if not isinstance(text, str):
            await self._error("bad_event", _("'text' must be a string."), ref=ref)
            return
        if model is not None and (isinstance(model, bool) or not isinstance(model, (str, int))):
            await self._error("bad_event", _("'model' must be a model id or name."), ref=ref)
            return
        supersedes = payload.get("supersedes")
        if supersedes is not None and not _is_count(supersedes):
            await self._error("bad_event", _("'supersedes' must be a turn id."), ref=ref)
            return
        try:
            turn = await self._start(text, None if model in (None, "") else str(model), supersedes)
        except TurnRefused as refused:
            await self._error("turn_refused", str(refused), ref=ref)
            return
        if turn is None:
            # Signed out (or the session expired) since this socket opened:
            # the page signs in again and comes back (README close codes).
            await self._close(CLOSE_UNAUTHENTICATED)
            return
        if ref is not None:
            # Only to this socket, before any event of the turn (the worker's
            # events wait in this consumer's queue until this handler
            # returns): the page now knows its message was taken.
            started = {"type": ServerEvent.TURN_STARTED, "turn_id": turn.pk, "ref": ref}
            if supersedes is not None:
                started["supersedes"] = supersedes
            await self._send_json(started)
        if dispatch.in_process():
            await dispatch.run_in_process(turn.pk)  # in this process, on this event loop

    async def _turn_cancel(self, payload: dict, ref: str | None) -> None:
        """{"type": "turn.cancel"} (optionally "turn_id"): Stop. The turn ends
        with `turn.finished` status `cancelled` once its worker sees it."""
        turn_id = payload.get("turn_id")
        if turn_id is not None and not _is_count(turn_id):
            await self._error("bad_event", _("'turn_id' must be a non-negative integer."), ref=ref)
            return
        try:
            await self._cancel(turn_id)
        except TurnCancelRefused as refused:
            await self._error("cancel_refused", str(refused), ref=ref)

    async def _sync_frame(self, payload: dict) -> None:
        """{"type": "sync", "turn_id": N, "after_seq": K}: the stored events of
        turn N after K; without turn_id, the whole state as on connect."""
        turn_id, after_seq = payload.get("turn_id"), payload.get("after_seq", 0)
        if turn_id is None:
            await self._send_state()
            return
        if not _is_count(turn_id) or not _is_count(after_seq):
            await self._error("bad_event", _("'turn_id' and 'after_seq' must be non-negative integers."))
            return
        frames = await self._events_after(turn_id, after_seq)
        if frames is None:
            await self._error("bad_event", _("No such turn in this conversation."))
            return
        for frame in frames:
            await self._send_json(frame)

    async def _approval_decide(self, payload: dict, ref: str | None) -> None:
        """{"type": "approval.decide", "approval_id": "...", "decision":
        "approve" | "always_allow" | "deny"}: the answer to an
        `approval.requested` of this conversation (chat.approvals). The
        outcome arrives as the turn's `approval.decided` event."""
        from chat.approvals import DECISIONS, ApprovalError

        approval_id, decision = payload.get("approval_id"), payload.get("decision")
        if not _is_uuid(approval_id) or decision not in DECISIONS:
            await self._error(
                "bad_event",
                _("'approval_id' must be a request's id and 'decision' approve, always_allow or deny."),
                ref=ref,
            )
            return
        try:
            await self._decide(approval_id, decision)
        except ApprovalError as refused:
            await self._error("approval_refused", str(refused), ref=ref)

    @off_loop
    def _decide(self, approval_id: str, decision: str) -> None:
        from chat.approvals import tool_approval_decide

        with translation.override(self.language):
            tool_approval_decide(
                approval_id=approval_id,
                decision=decision,
                actor=self.scope["user"],
                conversation_id=self.conversation.pk,
            )

    async def conversation_deleted(self, message: dict) -> None:
        """The owner deleted the conversation (chat.services.conversation_delete):
        nothing more is sent on this socket."""
        await self.close(code=CLOSE_FORBIDDEN)

    async def turn_event(self, message: dict) -> None:
        await self._send_json(message["event"])

    async def turn_events(self, message: dict) -> None:
        """Events stored together (a turn's last ones), in order."""
        for frame in message["events"]:
            await self._send_json(frame)

    async def _send_json(self, frame: dict) -> None:
        if self.closing:
            return
        buffered = self._buffered_bytes()
        if buffered is not None and buffered > settings.OWLAI_WS_SEND_BUFFER_BYTES:
            logger.warning(
                "closing %s: its client does not read (%d bytes waiting, cap %d); it resyncs on reconnect",
                self.channel_name,
                buffered,
                settings.OWLAI_WS_SEND_BUFFER_BYTES,
            )
            await self._close(CLOSE_TOO_SLOW)
            return
        await self.send(text_data=json.dumps(frame, ensure_ascii=False))

    def _buffered_bytes(self) -> int | None:
        """Bytes sent on this socket its client has not read yet (daphne), or None."""
        if self._protocol is None:
            return None
        return write_buffer_bytes(getattr(self._protocol, "transport", None))

    async def _error(self, code: str, message: str, *, ref: str | None = None, **extra) -> None:
        frame = {"type": ServerEvent.ERROR, "code": code, "message": message, **extra}
        if ref is not None:
            frame["ref"] = ref
        await self._send_json(frame)

    @off_loop
    def _state(self) -> dict:
        return conversation_state(conversation=self.conversation)

    @off_loop
    def _events_after(self, turn_id: int, after_seq: int) -> list[dict] | None:
        return turn_events_after(conversation=self.conversation, turn_id=turn_id, after_seq=after_seq)

    @off_loop
    def _start(self, text: str, model: str | None, supersedes: int | None = None):
        """The new turn, or None when the session has ended (see
        _session_alive). With a broker the turn is handed to a worker here,
        once stored, in the same trip off the event loop."""
        if not self._session_alive_now():
            return None
        with translation.override(self.language):
            # turn_start reads the conversation afresh under its lock.
            turn = turn_start(
                conversation=self.conversation, user=self.scope["user"], text=text, model=model, supersedes=supersedes
            )
        dispatch.send_after_start(turn.pk)
        return turn

    @off_loop
    def _cancel(self, turn_id: int | None) -> str:
        with translation.override(self.language):
            return turn_cancel(conversation=self.conversation, actor=self.scope["user"], turn_id=turn_id)

    @off_loop
    def _owned_conversation(self, conversation_id: str, user_id: int) -> Conversation | None:
        return Conversation.objects.live().filter(pk=conversation_id, owner_id=user_id).first()

    def _language(self) -> str:
        """The browser's language (the switcher's cookie, then Accept-Language),
        as on the page; a signed-in user's stored choice reaches the cookie
        through the page (accounts.middleware), and wins at turn start."""
        headers = dict(self.scope.get("headers") or [])
        accept = headers.get(b"accept-language", b"").decode("latin-1")
        cookie = self.scope.get("cookies", {}).get(settings.LANGUAGE_COOKIE_NAME, "")
        return browser_language(cookie=cookie, accept_language=accept) or settings.LANGUAGE_CODE


class ClosingConsumer(AsyncWebsocketConsumer):
    """Accepts and closes at once with `code`: for websocket paths that lead
    nowhere (4404) and origins that are not allowed (4403), so they end with
    a documented close code rather than an error at the handshake."""

    code = CLOSE_NOT_FOUND

    def __init__(self, *args, code: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if code is not None:
            self.code = code

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=self.code)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        pass  # closing; nothing is read


def _is_valid_unicode(value) -> bool:
    """No lone surrogate anywhere in a decoded JSON value (keys included)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


def _is_uuid(value) -> bool:
    if not isinstance(value, str) or len(value) > 40:
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
