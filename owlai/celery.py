"""Celery app. Workers load the same settings, so a bad install config or a
too-short retention stops the worker exactly as it stops the web process."""

import logging
import os
import time

from celery import Celery
from celery.backends.base import DisabledBackend
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    beat_init,
    worker_init,
    worker_ready,
    worker_shutdown,
)
from kombu.transport import TRANSPORT_ALIASES

from owlai.broker import TRANSPORTS
from owlai.startup import freeze_startup_objects

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "owlai.settings")

# Every Redis broker URL (redis://, rediss://, sentinel://, whichever settings
# module names it) uses the transport that reuses its Redis client
# (owlai.broker). Registered before any connection is made: kombu resolves a
# scheme once and caches the class.
TRANSPORT_ALIASES.update(TRANSPORTS)


class _Celery(Celery):
    @property
    def backend(self):
        """Results are never stored (CELERY_TASK_IGNORE_RESULT, and every task
        ignores its result), so the backend is Celery's stateless disabled one
        and one per process serves every thread. Celery builds one per thread,
        and building one scans every installed package's entry points (tens of
        milliseconds): with the threads pool that was paid again by each of its
        threads, and was 40% of a worker's CPU in bench/load.py. A configured
        result backend keeps Celery's own per-thread instances."""
        shared = self.__dict__.get("_owlai_disabled_backend")
        if shared is not None:
            return shared
        backend = super().backend
        if isinstance(backend, DisabledBackend):
            self.__dict__["_owlai_disabled_backend"] = backend
        return backend


app = _Celery("owlai")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
@after_setup_task_logger.connect
def _log_with_ids(logger=None, **kwargs) -> None:
    """Celery replaces the root logger's handlers (and sets the task
    logger's): they get the request/run ids and, with OWLAI_LOG_FORMAT=json,
    JSON lines as the web process's (owlai.logs)."""
    from django.conf import settings

    from owlai.logs import use_on

    if logger is not None:
        use_on(logger, as_json=settings.OWLAI_LOG_FORMAT == "json")


@worker_init.connect
def _enforce_runtime_db_role(**kwargs) -> None:
    """A worker whose database role could rewrite the audit trail must not
    start. SystemExit, because Celery logs and swallows ordinary exceptions
    raised by signal handlers."""
    from django.core.exceptions import ImproperlyConfigured

    from audit.db_roles import enforce_runtime_db_role

    try:
        enforce_runtime_db_role()
    except ImproperlyConfigured as exc:
        raise SystemExit(f"OwlAI worker refused to start: {exc}") from exc
    _worker_db_connections()


def _worker_db_connections() -> None:
    """Workers keep a connection no longer than OWLAI_WORKER_DB_CONN_MAX_AGE
    (default 0: closed when the task ends, by Celery's Django fixup, in the
    thread that ran it). With the threads pool each thread has its own
    connection; one kept open per idle thread would add up to the pool size."""
    from django.conf import settings
    from django.db import connections

    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = settings.OWLAI_WORKER_DB_CONN_MAX_AGE
    connections.close_all()
    # The start-up checks above opened the pool (OWLAI_DB_POOL_SIZE) in this
    # process; prefork children must not inherit its sockets and threads.
    for connection in connections.all(initialized_only=True):
        if getattr(connection, "pool", None) is not None:
            connection.close_pool()


@worker_ready.connect
def _log_startup_warnings(**kwargs) -> None:
    from governance.exposure import log_startup_warnings

    log_startup_warnings()


# With the threads pool, a finished task's late acknowledgement (and so the
# room to take the next message, the prefetch limit being the pool size) is
# handled by the consumer's event loop only when that loop wakes up for
# something else: up to seconds later (celery/celery#6941). Under load every
# slot ended up holding a finished, unacknowledged turn while new turns
# waited in Redis: at 200 conversations, turns waited ~30 s (p95) for an idle
# worker. A short repeating timer wakes the loop so acknowledgements, and
# with them new turns, move at once.
THREADS_POOL_WAKE_SECONDS = 0.05


@worker_ready.connect
def _wake_the_threads_pool_loop(sender=None, **kwargs) -> None:
    from celery.concurrency.thread import TaskPool as ThreadsPool

    if sender is not None and isinstance(getattr(sender, "pool", None), ThreadsPool):
        sender.timer.call_repeatedly(THREADS_POOL_WAKE_SECONDS, _noop)


def _noop() -> None:
    pass


@worker_init.connect
def _warm_up_model_client(**kwargs) -> None:
    # Before the pool starts: prefork children inherit the imported modules.
    from chat.llm import warm_up

    warm_up()


@worker_init.connect
def _freeze_before_the_pool(**kwargs) -> None:
    # Prefork children then share the start-up objects' pages (owlai.startup).
    freeze_startup_objects()


@worker_ready.connect
def _freeze_once_ready(**kwargs) -> None:
    # What the consumer and a threads pool built since, too (owlai.startup).
    freeze_startup_objects()


# --- No single point of failure (owlai.ops.sweeps) ---------------------------
_sweep_timer = None


@worker_init.connect
def _lease_the_sweeps(**kwargs) -> None:
    # Before the pool starts, so prefork children inherit the guarded tasks.
    from owlai.ops.leases import process_name
    from owlai.ops.sweeps import guard_sweep_tasks

    app.loader.import_default_modules()
    guard_sweep_tasks(app, process_name("worker"))


@worker_ready.connect
def _start_the_sweep_timer(**kwargs) -> None:
    global _sweep_timer
    from owlai.ops.leases import process_name
    from owlai.ops.sweeps import SweepTimer

    _sweep_timer = SweepTimer(app, process_name("worker"))
    _sweep_timer.start()


@worker_shutdown.connect
def _stop_the_sweep_timer(**kwargs) -> None:
    if _sweep_timer is not None:
        _sweep_timer.stop()


@beat_init.connect
def _beat_heartbeat(**kwargs) -> None:
    """Beat says it is alive every OWLAI_BEAT_HEARTBEAT_SECONDS (/readyz)."""
    import threading

    from django.conf import settings
    from django.db import connection

    from owlai.ops.leases import heartbeat, process_name
    from owlai.ops.models import ProcessHeartbeat

    name = process_name("beat")

    def beat() -> None:
        while True:
            try:
                heartbeat(name, ProcessHeartbeat.KIND_BEAT)
            except Exception as exc:
                logging.getLogger(__name__).warning("beat heartbeat not written: %s", exc)
                connection.close()
            time.sleep(settings.OWLAI_BEAT_HEARTBEAT_SECONDS)

    threading.Thread(target=beat, name="owlai-beat-heartbeat", daemon=True).start()
