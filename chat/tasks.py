"""Celery tasks: take ids, load, call one service."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from asgiref.sync import async_to_sync, sync_to_async
from celery import shared_task
from django.conf import settings
from django.db import close_old_connections

from chat.turns.recovery import turns_recover
from chat.turns.runner import turn_run

logger = logging.getLogger(__name__)


@shared_task(
    name="chat.run_turn",
    acks_late=True,
    ignore_result=True,
    # Prefork pool: the soft limit raises inside the turn, which then fails
    # cleanly; the hard limit is the backstop. The threads pool (production,
    # README) cannot enforce them: there the heartbeat stops for a turn past
    # OWLAI_TURN_TIMEOUT_SECONDS and the recovery job fails it (chat.services).
    soft_time_limit=settings.OWLAI_TURN_TIMEOUT_SECONDS,
    time_limit=settings.OWLAI_TURN_TIMEOUT_SECONDS + 30,
)
def run_turn(turn_id: int) -> None:
    turn_run(turn_id=turn_id)


@shared_task(name="chat.recover_turns", ignore_result=True)
def recover_turns() -> None:
    """Beat, every OWLAI_TURN_RECOVERY_SECONDS: fail turns whose worker died,
    enqueue once more turns no worker claimed (chat.services.turns_recover)."""
    turns_recover()


@shared_task(name="chat.expire_approvals", ignore_result=True)
def expire_approvals() -> int:
    """Beat, every OWLAI_APPROVAL_SWEEP_SECONDS: approval requests nobody
    answered in time expire and their turns go on (chat.approvals)."""
    from chat.approvals import tool_approvals_expire

    return tool_approvals_expire()


@shared_task(name="chat.purge_conversations", ignore_result=True)
def purge_conversations() -> int:
    """Daily (beat): conversations past their retention go."""
    from chat.retention import conversations_purge

    return conversations_purge()


# Tasks started in-process keep a reference here until done (asyncio only
# keeps weak references to tasks).
_in_process: set[asyncio.Task] = set()


def _run_in_process(turn_id: int) -> None:
    try:
        run_turn.apply(args=(turn_id,))
    finally:
        close_old_connections()


async def enqueue_turn(turn_id: int) -> None:
    """Run a turn in this process: the embedded profile (eager tasks) has no
    worker. It runs in a thread, so the socket stays responsive and events
    published through the in-memory layer reach it on this event loop. With
    a broker, callers send the task themselves (`run_turn.delay`)."""
    task = asyncio.get_running_loop().create_task(sync_to_async(_run_in_process, thread_sensitive=False)(turn_id))
    _in_process.add(task)
    task.add_done_callback(_in_process.discard)


def resume_turn_soon(turn_id: int) -> None:
    """A turn queued again after an approval decision goes to a worker as a
    new task (`chat.run_turn` continues it from its stored state). In the
    embedded profile it runs in a thread of this process. Never raises: the
    decision is committed; a turn whose task could not be sent stays queued
    and the recovery job sends it again."""
    try:
        if not settings.CELERY_TASK_ALWAYS_EAGER:
            run_turn.delay(turn_id)
        elif _server_loop_running():
            # Called from a socket's or a view's worker thread: the turn runs
            # as the consumer runs it, so its events reach the in-memory layer
            # on the server's event loop.
            async_to_sync(enqueue_turn)(turn_id)
        else:
            threading.Thread(target=_run_in_process, args=(turn_id,), name=f"owlai-turn-{turn_id}", daemon=True).start()
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
