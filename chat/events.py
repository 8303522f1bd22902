"""Turn events: stored first, then sent on the conversation's channel-layer group.

The database is the truth and the channel layer only the transport: every
event a turn produces gets the next `seq` of its turn and a `TurnEvent` row
before it is published, so a frame the layer drops (a full channel, a Redis
restart) costs the user nothing: the page sees the gap in `seq` and asks for
the rest (`sync`), which `replay` reads back from the database.

The worker (Celery, or in-process in the embedded profile) publishes; every
websocket connected to the conversation relays them to its browser.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from chat.layers import group_send_now
from chat.protocol import LayerMessage, ServerEvent
from owlai import prepared

if TYPE_CHECKING:
    from chat.models import TurnEvent as TurnEventRow

logger = logging.getLogger(__name__)


def conversation_group(conversation_id_hex: str) -> str:
    return f"conversation.{conversation_id_hex}"


def publish(group: str, frame: dict) -> None:
    """Best effort: the frame is already stored, a client that misses it
    resyncs. Never raises (a Redis outage must not fail a governed turn)."""
    publish_all(group, [frame])


def publish_all(group: str, frames: list[dict]) -> None:
    """Frames stored together (a turn's last events) go out as one message;
    the sockets send them one by one, in order. Best effort, as `publish`."""
    if not frames:
        return
    if len(frames) == 1:
        message = {"type": LayerMessage.TURN_EVENT.value, "event": frames[0]}
    else:
        message = {"type": LayerMessage.TURN_EVENTS.value, "events": frames}
    try:
        group_send_now(group, message)
    except Exception as exc:
        first = frames[0]
        logger.warning(
            "could not publish %s #%s (and %d more) of turn %s: %s",
            first.get("type"),
            first.get("seq"),
            len(frames) - 1,
            first.get("turn_id"),
            exc,
        )


class TurnEmitter:
    """Stores and publishes one turn's events, numbering them.

    Only the worker that claimed the turn emits for it (the claim is a
    conditional UPDATE), so the next `seq` is kept in memory: one INSERT per
    event, no counter row to lock. Should another party have numbered an
    event of this turn meanwhile (the recovery job failing a turn whose
    heartbeat went stale), the unique (turn, seq) constraint refuses ours and
    the emitter goes quiet (`lost`): the turn is no longer ours to report.

    `message.delta` text is coalesced: pieces arriving within
    OWLAI_DELTA_COALESCE_SECONDS of the last stored delta are held and go
    out with the next piece or the next other event, so a fast model costs a
    row per ~50 ms rather than a row per token. `message.completed` is held
    too: it is followed by the next tool call or, most often, by the end of
    the turn, which stores it in its own transaction (`take_held`) and sends
    it with `turn.finished` as one message."""

    def __init__(self, *, group: str, turn_id: int, next_seq: int = 1) -> None:
        self.group = group
        self.turn_id = turn_id
        self.next_seq = next_seq
        self.lost = False
        self._pending: list[str] = []
        self._last_delta = 0.0
        self._held: tuple[str, dict] | None = None  # a message.completed not yet stored

    def __call__(self, event_type: str, payload: dict) -> None:
        if event_type == ServerEvent.MESSAGE_DELTA and self._held is None:
            self._pending.append(payload.get("text", ""))
            if time.monotonic() - self._last_delta >= settings.OWLAI_DELTA_COALESCE_SECONDS:
                self._flush_deltas()
            return
        self.flush()
        if event_type == ServerEvent.MESSAGE_COMPLETED:
            self._held = (event_type, payload)
            return
        self._store_and_publish(event_type, payload)

    def flush(self) -> None:
        """Store and publish what is held (delta text, a completed message)."""
        self._flush_deltas()
        if self._held is not None:
            held, self._held = self._held, None
            self._store_and_publish(*held)

    def take_held(self) -> list[tuple[str, dict]]:
        """What is held, for the caller to `record` in its own transaction
        (before its own events) and publish after commit."""
        held: list[tuple[str, dict]] = []
        text = "".join(self._pending)
        self._pending = []
        if text:
            held.append((ServerEvent.MESSAGE_DELTA, {"text": text}))
        if self._held is not None:
            held.append(self._held)
            self._held = None
        return held

    def _flush_deltas(self) -> None:
        if not self._pending:
            return
        text = "".join(self._pending)
        self._pending = []
        self._last_delta = time.monotonic()
        if text:
            self._store_and_publish(ServerEvent.MESSAGE_DELTA, {"text": text})

    def numbered(self, event_type: str, payload: dict) -> TurnEventRow:
        """The next event as a row to INSERT, numbered; the caller stores it
        (and sets `next_seq` back should that fail)."""
        from chat.models import TurnEvent

        event = TurnEvent(turn_id=self.turn_id, seq=self.next_seq, type=event_type, payload=payload)
        self.next_seq += 1
        return event

    def record(self, event_type: str, payload: dict) -> dict:
        """Store one event inside the caller's transaction (which decides,
        e.g. with the turn's final status, whether it happened) and return
        its frame; the caller publishes after commit. Raises on conflict."""
        from chat.models import TurnEvent

        event = TurnEvent(turn_id=self.turn_id, seq=self.next_seq, type=event_type, payload=payload)
        prepared.insert(event)
        self.next_seq += 1
        return event.as_frame()

    def _store_and_publish(self, event_type: str, payload: dict) -> None:
        if self.lost:
            return
        try:
            if connection.in_atomic_block:
                # A savepoint, so a refused insert leaves the caller's transaction usable.
                with transaction.atomic():
                    frame = self.record(event_type, payload)
            else:
                frame = self.record(event_type, payload)  # one INSERT: atomic on its own
        except IntegrityError:
            self.lost = True
            logger.warning(
                "turn %s: event #%s already taken; no longer reporting this turn", self.turn_id, self.next_seq
            )
            return
        except DatabaseError:
            # Not stored means not sent: a client must never see a frame a
            # resync could not give back. The turn itself goes on.
            logger.exception("turn %s: could not store %s", self.turn_id, event_type)
            return
        publish(self.group, frame)


def make_emitter(*, group: str, turn_id: int, next_seq: int = 1) -> TurnEmitter:
    return TurnEmitter(group=group, turn_id=turn_id, next_seq=next_seq)


def replay(*, turn_id: int, after_seq: int = 0) -> list[dict]:
    """The stored frames of one turn after `after_seq`, in order."""
    from chat.models import TurnEvent

    rows = prepared.fetchall(_replay_sql(), [turn_id, after_seq])
    return [_fresh(prepared.instances(TurnEvent, row).as_frame()) for row in rows]


@cache
def _replay_sql() -> str:
    # Prepared: every socket's connect and every resync replays a turn.
    from chat.models import TurnEvent

    return (
        f"SELECT {prepared.columns(TurnEvent, 'e')} FROM {TurnEvent._meta.db_table} e"
        " WHERE e.turn_id = %s AND e.seq > %s ORDER BY e.seq"
    )


def _fresh(frame: dict) -> dict:
    """A replayed `approval.requested` says how long it has *now*: the stored
    `expires_in` was counted when it was asked (the page counts down from it
    rather than from `expires_at`, whose reading depends on the browser's
    clock)."""
    if frame.get("type") == ServerEvent.APPROVAL_REQUESTED and isinstance(frame.get("expires_at"), str):
        try:
            expires_at = datetime.fromisoformat(frame["expires_at"])
        except ValueError:
            return frame
        frame["expires_in"] = max(0, round((expires_at - timezone.now()).total_seconds()))
    return frame


def notify_conversation_deleted(*, group: str) -> None:
    """Tell the conversation's open sockets to close (best effort, like all
    streaming: the deletion itself is already committed)."""
    try:
        group_send_now(group, {"type": LayerMessage.CONVERSATION_DELETED.value})
    except Exception:
        logger.exception("could not notify %s of its deletion", group)
