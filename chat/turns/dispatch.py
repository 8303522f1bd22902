"""The one place a run is handed to a worker, or run in this process.

With a broker a stored run goes to a worker as the `chat.run_turn` task; the
embedded profile (eager tasks, no worker) runs it in a thread of this
process, so the socket stays responsive and events published through the
in-memory layer reach it on the server's event loop.

The task is found by its name in the Celery app (chat.tasks registers it when
the app loads), so nothing here imports the runner: the runner, approvals and
the recovery job all hand runs over through this module without an import
loop. Handing over never runs a turn twice: the worker's claim is a
conditional UPDATE (chat.turns.lifecycle.turn_claim).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.db import close_old_connections

logger = logging.getLogger(__name__)

RUN_TASK = "chat.run_turn"

# Runs started in-process keep a reference here until done (asyncio only
# keeps weak references to tasks).
_in_process: set[asyncio.Task] = set()


def _task():
    from owlai.celery import app

    return app.tasks[RUN_TASK]


def in_process() -> bool:
    """No worker takes runs (the embedded profile): this process runs them."""
    return bool(settings.CELERY_TASK_ALWAYS_EAGER)


def send(turn_id: int) -> None:
    """To a worker through the broker. Raises when the broker cannot take it
    (the caller decides: the run stays queued and recovery sends it again)."""
    _task().delay(turn_id)


def send_after_start(turn_id: int) -> None:
    """A turn just stored by the consumer goes to a worker (with a broker;
    in-process runs start from the event loop, `run_in_process`). Never
    raises: the turn is stored as queued and the recovery job sends it again."""
    if in_process():
        return
    try:
        send(turn_id)
    except Exception as exc:
        logger.warning("turn %s stored but not enqueued: %s", turn_id, exc)


def _run_here(turn_id: int) -> None:
    try:
        _task().apply(args=(turn_id,))
    finally:
        close_old_connections()


def run_now(turn_id: int) -> None:
    """Run a turn in this thread, to its end (or its wait): a script's run,
    which has nothing else to do meanwhile. The same task a worker runs."""
    _run_here(turn_id)


async def run_in_process(turn_id: int) -> None:
    """Run a turn in this process, in a thread, from the server's event loop."""
    task = asyncio.get_running_loop().create_task(sync_to_async(_run_here, thread_sensitive=False)(turn_id))
    _in_process.add(task)
    task.add_done_callback(_in_process.discard)


def resume_soon(turn_id: int) -> None:
    """A turn queued again after an approval decision goes to a worker as a
    new task (`chat.run_turn` continues it from its stored state). In the
    embedded profile it runs in a thread of this process. Never raises: the
    decision is committed; a turn whose task could not be sent stays queued
    and the recovery job sends it again."""
    try:
        if not in_process():
            send(turn_id)
        elif _server_loop_running():
            # Called from a socket's or a view's worker thread: the turn runs
            # as the consumer runs it, so its events reach the in-memory layer
            # on the server's event loop.
            async_to_sync(run_in_process)(turn_id)
        else:
            threading.Thread(target=_run_here, args=(turn_id,), name=f"owlai-turn-{turn_id}", daemon=True).start()
    except Exception as exc:
        logger.warning("turn %s: could not be handed to a worker after its approval: %s", turn_id, exc)


def _server_loop_running() -> bool:
    """Whether this thread was started by sync_to_async from a running event
    loop of this process (asgiref keeps that loop in a thread-local), so that
    async_to_sync runs on it."""
    from asgiref.sync import SyncToAsync

    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    same_process = getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) == os.getpid()
    return loop is not None and same_process and loop.is_running()
