"""Following a turn's events to its end, for HTTP clients.

The database is the truth (chat.turns.journal stores every event, numbered,
before it is published), so a follower reads the stored events after the
last `seq` it gave out (chat.events.replay), and uses the conversation's
channel-layer group only as a wake-up: a published event makes it read at
once, and without one (a dropped frame, a Redis outage, no layer at all) it
reads again every OWLAI_AGENTAPI_POLL_SECONDS. Nothing is lost and nothing
is given twice.

Everything here is async: under daphne a streaming response is served on
the event loop, so a client waiting minutes for an approval holds no
thread. Database reads run off the loop, each closing its connection, as
the websocket consumer's do."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from chat import events
from chat.models import ACTIVE_TURN_STATUSES, Turn
from chat.protocol import ServerEvent

logger = logging.getLogger(__name__)

# The turn's events after which nothing more comes.
LAST_EVENTS = frozenset({ServerEvent.TURN_FINISHED})


def _read(turn_id: int, after_seq: int) -> tuple[list[dict], str | None]:
    """The stored events after `after_seq` and the turn's status (None when
    the turn is gone). The status is read first: a turn's last events are
    stored in the statement that ends it (chat.turns.journal), so a turn
    read as ended has all its events in the read that follows."""
    status = Turn.objects.filter(pk=turn_id).values_list("status", flat=True).first()
    return events.replay(turn_id=turn_id, after_seq=after_seq), status


_read_off_loop = database_sync_to_async(_read, thread_sensitive=False)


@contextlib.asynccontextmanager
async def _wake_ups(group: str):
    """A channel of the layer that is in `group`, or None without a usable
    layer (the follower then only polls)."""
    layer = get_channel_layer()
    channel = None
    if layer is not None:
        try:
            channel = await layer.new_channel("agentapi.")
            await layer.group_add(group, channel)
        except Exception as exc:  # no layer: polling alone still gets every event
            logger.warning("agent API follower could not join %s: %s", group, exc)
            channel = None
    try:
        yield layer, channel
    finally:
        if channel is not None:
            with contextlib.suppress(Exception):
                await layer.group_discard(group, channel)


async def _wait(layer, channel, seconds: float) -> None:
    """Until something is published to the group, or `seconds`."""
    if channel is None:
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(layer.receive(channel), timeout=seconds)
    except TimeoutError:
        pass
    except Exception as exc:  # the layer failed: poll instead
        logger.warning("agent API follower lost its wake-ups: %s", exc)
        await asyncio.sleep(seconds)


async def follow(*, turn_id: int, group: str, after_seq: int = 0, stop_at=frozenset()) -> AsyncIterator[dict | None]:
    """The turn's stored frames after `after_seq`, in order, as they come,
    up to its `turn.finished` (or a frame whose type is in `stop_at`). Yields
    None when nothing came for OWLAI_AGENTAPI_KEEPALIVE_SECONDS (the caller
    sends a keep-alive), and ends after OWLAI_AGENTAPI_STREAM_SECONDS (the
    client goes on from the last `seq` it got)."""
    poll = settings.OWLAI_AGENTAPI_POLL_SECONDS
    deadline = time.monotonic() + settings.OWLAI_AGENTAPI_STREAM_SECONDS
    last, quiet_since = after_seq, time.monotonic()
    async with _wake_ups(group) as (layer, channel):
        while True:
            frames, status = await _read_off_loop(turn_id, last)
            for frame in frames:
                last = frame["seq"]
                yield frame
                if frame["type"] in LAST_EVENTS or frame["type"] in stop_at:
                    return
            if status is None or (not frames and status not in ACTIVE_TURN_STATUSES):
                return  # gone, or ended and everything after `after_seq` given out
            now = time.monotonic()
            if frames:
                quiet_since = now
            elif now - quiet_since >= settings.OWLAI_AGENTAPI_KEEPALIVE_SECONDS:
                quiet_since = now
                yield None
            if now >= deadline:
                return
            await _wait(layer, channel, poll)


def sse(frame: dict) -> str:
    """One Server-Sent Event: the event name is the frame's type (chat.protocol),
    its id the frame's `seq` (a reconnecting client sends it back as
    Last-Event-ID), its data the frame as the websocket sends it."""
    data = json.dumps(frame, ensure_ascii=False)
    return f"id: {frame['seq']}\nevent: {frame['type']}\ndata: {data}\n\n"


KEEPALIVE = ": keep-alive\n\n"
