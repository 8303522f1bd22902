"""Turn events on the conversation's channel-layer group.

The worker (Celery, or in-process in the embedded profile) publishes; every
websocket connected to the conversation relays them to its browser.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

# Server -> client event types (README documents their payloads).
TURN_ACCEPTED = "turn.accepted"
TURN_REJECTED = "turn.rejected"
TOOL_STARTED = "tool.started"
TOOL_FINISHED = "tool.finished"
MESSAGE_DELTA = "message.delta"
MESSAGE_COMPLETED = "message.completed"
TURN_FINISHED = "turn.finished"
ERROR = "error"


def conversation_group(conversation_id_hex: str) -> str:
    return f"conversation.{conversation_id_hex}"


def make_emitter(*, group: str, turn_id: int) -> Callable[[str, dict], None]:
    layer = get_channel_layer()
    send = async_to_sync(layer.group_send)

    def emit(event_type: str, payload: dict) -> None:
        event = {"type": event_type, "turn_id": turn_id, **payload}
        try:
            send(group, {"type": "turn.event", "event": event})
        except Exception:
            # Streaming is best effort; the turn and its audit rows are not.
            logger.exception("could not publish %s for turn %s", event_type, turn_id)

    return emit


def notify_conversation_deleted(*, group: str) -> None:
    """Tell the conversation's open sockets to close (best effort, like all
    streaming: the deletion itself is already committed)."""
    try:
        async_to_sync(get_channel_layer().group_send)(group, {"type": "conversation.deleted"})
    except Exception:
        logger.exception("could not notify %s of its deletion", group)
