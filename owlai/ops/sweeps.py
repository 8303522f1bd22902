"""Every worker runs the periodic sweeps itself, under a database lease, so
that turn recovery, approval expiry, digests and retention go on while beat
is down, and two beats (or twenty workers) never run a sweep twice per
period.

- `guard_sweep_tasks` makes each sweep task take its lease before it runs,
  however it was started (beat's message or this module's timer);
- `SweepTimer` is one thread per worker process that, every
  OWLAI_SWEEP_TICK_SECONDS, writes the worker's heartbeat, starts each sweep
  whose lease is free (in a thread of its own: a slow connector sync does not
  hold recovery up) and watches the broker for a restart (its Redis run id
  changed: messages may be lost, OWLAI_BROKER_RESTART_TASK re-enqueues).

Sweeps are found by task name in the Celery app: nothing here imports the
layers above."""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models.functions import Now

from owlai.ops import leases
from owlai.ops.models import ProcessHeartbeat, SweepLease

logger = logging.getLogger(__name__)

BROKER_WATCH = "broker-run-id"


def sweep_periods() -> dict[str, float]:
    """Task name -> period in seconds, from beat's schedule (one source)."""
    periods: dict[str, float] = {}
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        schedule = entry["schedule"]
        seconds = schedule if isinstance(schedule, (int, float)) else schedule.run_every.total_seconds()
        periods[entry["task"]] = float(seconds)
    return periods


def guard_sweep_tasks(app, holder: str) -> None:
    """Each sweep task's body runs only under its lease: a second beat's
    message, or the timer of another worker, finds it taken and does nothing."""
    for name, period in sweep_periods().items():
        task = app.tasks.get(name)
        if task is None or getattr(task, "_owlai_leased", False):
            continue
        task.run = _leased(name, period, holder, task.run)
        task._owlai_leased = True


def _leased(name: str, period: float, holder: str, run):
    def leased_run(*args, **kwargs):
        # A little less than the period, so that the next round of a timer
        # or of beat is not refused for a few milliseconds' drift; runs stay
        # at least 0.9 periods apart, whoever starts them.
        if not leases.lease_take(name, seconds=0.9 * period, holder=holder):
            # A second beat's message, or a timer was first: logged, as a
            # second beat running by mistake is worth seeing.
            logger.info("sweep %s: lease held elsewhere, skipped", name)
            return None
        ok = False
        try:
            result = run(*args, **kwargs)
            ok = True
            return result
        finally:
            try:
                leases.lease_done(name, ok=ok)
            except DatabaseError:
                connection.close()

    return leased_run


class SweepTimer:
    def __init__(self, app, holder: str) -> None:
        self.app = app
        self.holder = holder
        self._running: dict[str, threading.Thread] = {}
        self._stop = threading.Event()
        self._last_heartbeat = 0.0
        self._broker = None

    def start(self) -> None:
        if settings.OWLAI_SWEEP_TICK_SECONDS <= 0:
            logger.warning("sweep timer off (OWLAI_SWEEP_TICK_SECONDS=0): sweeps run only from beat")
            return
        threading.Thread(target=self._loop, name="owlai-sweeps", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(settings.OWLAI_SWEEP_TICK_SECONDS):
            try:
                self.tick()
            except Exception:
                logger.exception("sweep timer: tick failed")
                connection.close()  # a fresh connection next tick

    def tick(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= settings.OWLAI_WORKER_HEARTBEAT_SECONDS:
            leases.heartbeat(self.holder, ProcessHeartbeat.KIND_WORKER)
            leases.heartbeats_prune(older_than_seconds=24 * 3600)
            self._last_heartbeat = now
        idle = [name for name in sweep_periods() if not (name in self._running and self._running[name].is_alive())]
        held = _leases_held(idle)  # one cheap read first: most ticks start nothing
        for name in idle:
            if name in held:
                continue
            task = self.app.tasks.get(name)
            if task is None:
                continue
            thread = threading.Thread(target=_run_sweep, args=(task,), name=f"owlai-sweep-{name}", daemon=True)
            self._running[name] = thread
            thread.start()
        self.broker_watch()

    def broker_watch(self) -> None:
        """The broker restarted (its run id changed) since the last look:
        messages it held may be gone, so queued turns go to it once more now
        rather than after OWLAI_TURN_QUEUE_SECONDS."""
        run_id = self._broker_run_id()
        if not run_id:
            return
        row = SweepLease.objects.filter(name=BROKER_WATCH).first()
        if row is None:
            SweepLease.objects.get_or_create(name=BROKER_WATCH, defaults={"state": run_id})
            return
        if row.state == run_id:
            return
        # Compare-and-set: of all workers seeing the change, one re-enqueues.
        if not SweepLease.objects.filter(name=BROKER_WATCH, state=row.state).update(state=run_id):
            return
        logger.warning("broker restarted (run id %s -> %s): re-enqueueing queued turns", row.state, run_id)
        task = self.app.tasks.get(settings.OWLAI_BROKER_RESTART_TASK)
        if task is not None:
            try:
                task.run()
            except Exception:
                logger.exception("re-enqueue after the broker restart failed")

    def _broker_run_id(self) -> str:
        try:
            if self._broker is None:
                self._broker = self.app.connection_for_read()
            client = self._broker.default_channel.client
            return str(client.info("server").get("run_id", ""))
        except Exception as exc:
            logger.debug("broker run id not read: %s", exc)
            if self._broker is not None:
                try:
                    self._broker.release()
                except Exception:
                    pass
            self._broker = None
            return ""


def _leases_held(names: list[str]) -> set[str]:
    """Which of `names` hold a lease now (one query for all of them)."""
    if not names:
        return set()
    return set(SweepLease.objects.filter(name__in=names, expires_at__gt=Now()).values_list("name", flat=True))


def _run_sweep(task) -> None:
    try:
        task.run()
    except Exception:
        logger.exception("sweep %s failed", task.name)
    finally:
        connection.close()  # this thread's own connection
