"""Turn events: the transport (publishing on the conversation's channel-layer
group) and the read back (`replay`).

The database is the truth and the channel layer only the transport: every
event a turn produces gets the next `seq` of its turn and a `TurnEvent` row
before it is published (chat.turns.journal, the one writer), so a frame the layer drops (a full channel, a Redis
restart) costs the user nothing: the page sees the gap in `seq` and asks for
the rest (`sync`), which `replay` reads back from the database.

The worker (Celery, or in-process in the embedded profile) publishes; every
websocket connected to the conversation relays them to its browser.
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING

from django.utils import timezone

from chat.layers import group_send_now
from chat.protocol import LayerMessage, ServerEvent
from owlai import prepared

if TYPE_CHECKING:
    pass

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
