"""A running turn's heartbeat: one thread per worker process renews
`heartbeat_at` of every turn running in it, so the recovery job can tell a
live turn from one whose worker died (chat.turns.recovery).
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from chat.models import Turn, TurnStatus

logger = logging.getLogger(__name__)


class _Heartbeats:
    """One thread per worker process renews `heartbeat_at` of every turn
    running in it, with one UPDATE per OWLAI_TURN_HEARTBEAT_SECONDS on one
    database connection of its own, also while the turns wait for a slow
    model. So a thread pool of 64 turns holds one heartbeat connection, not 64.
    It dies with the worker process (kill -9, a lost pool child), and then the
    recovery job sees the heartbeats go stale and fails the turns.

    A turn is beaten at most OWLAI_TURN_TIMEOUT_SECONDS: the thread pool
    cannot kill a stuck task, so past that its heartbeat goes stale, the
    recovery job fails it, and the turn's thread stops at its next step
    (`runner._interruption`) without writing anything."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._beating = threading.Lock()  # held while an UPDATE is in flight
        self._turns: dict[int, float] = {}  # turn id -> monotonic time after which it is no longer beaten
        self._thread: threading.Thread | None = None

    def add(self, turn_id: int) -> None:
        with self._cond:
            self._turns[turn_id] = time.monotonic() + settings.OWLAI_TURN_TIMEOUT_SECONDS
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="owlai-turn-heartbeats", daemon=True)
                self._thread.start()
            self._cond.notify()  # the interval may have changed

    def remove(self, turn_id: int) -> None:
        with self._cond:
            self._turns.pop(turn_id, None)
            if not self._turns:
                self._cond.notify()  # the thread ends and closes its connection
        with self._beating:  # no beat of this turn lands after it left
            pass

    def _run(self) -> None:
        # A turn's claim writes its first heartbeat, so a turn joining does
        # not call for a beat: beats keep their interval, whatever the number
        # of turns starting (one UPDATE per turn start was most of this
        # thread's work under load).
        last_beat = time.monotonic()
        try:
            while True:
                with self._cond:
                    if not self._turns:
                        self._thread = None
                        return
                    now = time.monotonic()
                    # Read each time: a shorter interval applies at once.
                    due = last_beat + settings.OWLAI_TURN_HEARTBEAT_SECONDS
                    if now < due:
                        self._cond.wait(due - now)
                        continue
                    last_beat = now
                    self._beating.acquire()
                    ids = [turn_id for turn_id, until in self._turns.items() if until > now]
                try:
                    if ids:
                        Turn.objects.filter(pk__in=ids, status=TurnStatus.RUNNING).update(heartbeat_at=timezone.now())
                except DatabaseError as exc:
                    logger.warning("turns %s: heartbeat not written: %s", ids, exc)
                    connection.close()  # a fresh connection next time
                finally:
                    self._beating.release()
        finally:
            connection.close()  # this thread's own connection


_HEARTBEATS = _Heartbeats()


def running_here() -> list[int]:
    """The turns running in this process now (chat.turns.handover)."""
    with _HEARTBEATS._cond:
        return list(_HEARTBEATS._turns)


class TurnHeartbeat:
    """While a turn runs, its `heartbeat_at` is renewed every
    OWLAI_TURN_HEARTBEAT_SECONDS by the process's heartbeat thread (_Heartbeats)."""

    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id

    def __enter__(self) -> TurnHeartbeat:
        _HEARTBEATS.add(self.turn_id)
        return self

    def __exit__(self, *exc) -> None:
        _HEARTBEATS.remove(self.turn_id)
