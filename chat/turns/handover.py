"""A worker that is told to stop (a deploy's SIGTERM: Celery's warm
shutdown) hands its running turns over instead of being killed with them.

From `begin` on, every turn of this process stops at its next safe point
(before a model or tool call: `runner._interruption` answers HANDOVER),
stores its loop state as a waiting run does (chat.agent.LoopState, the tool
session) and goes back to the queue (lifecycle.hand_over) for another worker,
which continues it where it stopped: nothing that ran is run again. A
message this process takes meanwhile goes back to the broker unclaimed.

A turn still inside one long model or tool call when the grace period is
nearly over (OWLAI_WORKER_SHUTDOWN_GRACE_SECONDS: the supervisor's stop
timeout) is failed visibly then, before the supervisor's SIGKILL, rather than
reported "worker lost" a recovery period later; its thread finds it no longer
running and writes nothing more.

Only the threads pool (the production choice) shares one flag with its
tasks; a prefork child is not told (its SIGTERM ends it)."""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import translation
from django.utils.translation import gettext as _

from chat.models import Turn, TurnStatus
from chat.turns import dispatch, heartbeat, lifecycle
from chat.turns.emitter import TurnEmitter

logger = logging.getLogger(__name__)

_stopping = threading.Event()
STOPPED_CODE = "worker_stopped"


def requested() -> bool:
    """This process is stopping: turns hand over at their next safe point."""
    return _stopping.is_set()


def begin(grace_seconds: float | None = None) -> None:
    """The process is stopping (once; later calls do nothing): turns hand
    over from now on, and those still running near the end of the grace
    period are failed visibly."""
    if _stopping.is_set():
        return
    _stopping.set()
    grace = settings.OWLAI_WORKER_SHUTDOWN_GRACE_SECONDS if grace_seconds is None else grace_seconds
    # Leave the supervisor's kill a margin: the failures must be written first.
    deadline = max(grace - min(5.0, grace / 4), 0.0)
    # Called from a signal handler: everything else (locks, logging) happens
    # in the thread.
    threading.Thread(target=_at_deadline, args=(deadline,), name="owlai-turn-handover", daemon=True).start()


def _at_deadline(deadline: float) -> None:
    running = heartbeat.running_here()
    logger.warning("stopping: %d running turn(s) hand over; any still running in %.0f s fail", len(running), deadline)
    threading.Event().wait(deadline)
    fail_still_running()


def reset() -> None:
    """(tests) The process runs turns again."""
    _stopping.clear()


def hand_over(turn: Turn, emit: TurnEmitter, loop_state: dict) -> bool:
    """The turn goes back to the queue with its state; another worker gets it
    after commit. False when it no longer ran here (recovery, the deadline)."""
    with transaction.atomic():
        if not lifecycle.hand_over(turn, emit, loop_state=loop_state):
            logger.warning("turn %s was finished elsewhere; not handed over", turn.pk)
            return False
        transaction.on_commit(lambda: pass_on(turn.pk))
    logger.info("turn %s handed over (worker stopping)", turn.pk)
    return True


def pass_on(turn_id: int) -> None:
    """To the broker for another worker. Never raises: a turn whose message
    cannot be sent stays queued and the recovery job sends it again."""
    try:
        dispatch.send(turn_id)
    except Exception as exc:
        logger.warning("turn %s: not passed on (%s); recovery will enqueue it again", turn_id, exc)


def fail_still_running() -> int:
    """The grace period is nearly over: every turn still running in this
    process fails, visibly and with the reason, while it still can."""
    failed = 0
    try:
        for turn_id in heartbeat.running_here():
            turn = Turn.objects.select_related("conversation").filter(pk=turn_id).first()
            if turn is None:
                continue
            with translation.override(lifecycle.turn_language(turn)):
                message = _(
                    "The worker running this turn was stopped (a restart or a deploy) before the turn could "
                    "be handed to another worker. Please send your message again."
                )
            running = Q(status=TurnStatus.RUNNING)
            if lifecycle.fail_abandoned(turn, condition=running, code=STOPPED_CODE, message=message):
                failed += 1
    except Exception:
        logger.exception("stopping: the turns still running could not all be failed")
    finally:
        connection.close()  # this thread's own connection
    if failed:
        logger.warning("stopping: %d turn(s) still running at the end of the grace period failed", failed)
    return failed
