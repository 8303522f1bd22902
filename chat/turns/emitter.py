"""What the agent loop calls to say something: coalesces streamed text and
hands every event to the journal (chat.turns.journal, the one writer).

`message.delta` text is coalesced: pieces arriving within
OWLAI_DELTA_COALESCE_SECONDS of the last stored delta are held and go out
with the next piece or the next other event, so a fast model costs a row per
~50 ms rather than a row per token. `message.completed` is held too, with
the delta text not yet stored: it is followed by the next tool call or, most
often, by the end of the turn, which stores them with its own events
(`take_held`) and sends them with `turn.finished` as one message; a tool
call stores them in one write before its own (`flush`). Either way the
answer's tail costs no write of its own.

Only a running turn's events are written: once the turn is no longer running
(the recovery job failed it, Stop ended it), or a number it would take is
already taken, the emitter goes quiet (`lost`): the turn is no longer this
worker's to report.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import DatabaseError, IntegrityError

from chat.models import TurnStatus
from chat.protocol import ServerEvent
from chat.turns import journal

logger = logging.getLogger(__name__)


class TurnEmitter:
    def __init__(self, *, group: str, turn_id: int) -> None:
        self.group = group
        self.turn_id = turn_id
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
        if event_type == ServerEvent.MESSAGE_COMPLETED and self._held is None:
            # The pending delta text stays held with it (it comes just
            # before, in order): whatever follows stores both in its write.
            self._held = (event_type, payload)
            return
        self.flush()
        self._store(event_type, payload)

    def flush(self) -> None:
        """Store and publish what is held (delta text, a completed message),
        in one write."""
        held = self.take_held()
        if held:
            self._last_delta = time.monotonic()
            self._store_frames(held)

    def take_held(self) -> list[tuple[str, dict]]:
        """What is held, for the caller to store with its own events."""
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
            self._store(ServerEvent.MESSAGE_DELTA, {"text": text})

    def _store(self, event_type: str, payload: dict) -> None:
        self._store_frames([(event_type, payload)])

    def _store_frames(self, frames: list[tuple[str, dict]]) -> None:
        if self.lost:
            return
        try:
            stored = journal.append(turn_id=self.turn_id, group=self.group, frames=frames, when=(TurnStatus.RUNNING,))
        except IntegrityError:
            stored = None
        except DatabaseError:
            # Not stored means not sent: a client must never see a frame a
            # resync could not give back. The turn itself goes on.
            logger.exception("turn %s: could not store %s", self.turn_id, ", ".join(kind for kind, _ in frames))
            return
        if stored is None:
            self.lost = True
            logger.warning("turn %s is no longer running here; no longer reporting it", self.turn_id)


def make_emitter(*, group: str, turn_id: int) -> TurnEmitter:
    return TurnEmitter(group=group, turn_id=turn_id)
