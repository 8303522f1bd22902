"""Celery tasks: take ids, load, call one service."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_shutting_down
from django.conf import settings

from chat.turns import dispatch, handover
from chat.turns.recovery import turns_recover
from chat.turns.runner import turn_run

logger = logging.getLogger(__name__)


@shared_task(
    name=dispatch.RUN_TASK,
    acks_late=True,
    ignore_result=True,
    # Prefork pool: the soft limit raises inside the turn, which then fails
    # cleanly; the hard limit is the backstop. The threads pool (production,
    # README) cannot enforce them: there the heartbeat stops for a turn past
    # OWLAI_TURN_TIMEOUT_SECONDS and the recovery job fails it (chat.turns.recovery).
    soft_time_limit=settings.OWLAI_TURN_TIMEOUT_SECONDS,
    time_limit=settings.OWLAI_TURN_TIMEOUT_SECONDS + 30,
)
def run_turn(turn_id: int) -> None:
    turn_run(turn_id=turn_id)


@worker_shutting_down.connect
def _hand_over_running_turns(sig=None, how=None, **kwargs) -> None:
    """SIGTERM (a deploy, a restart): running turns hand over to another
    worker at their next safe point, or fail visibly before the grace period
    is over (chat.turns.handover). Called in the signal handler: only sets a
    flag and starts a timer."""
    handover.begin()


@shared_task(name="chat.recover_turns", ignore_result=True)
def recover_turns() -> None:
    """Every OWLAI_TURN_RECOVERY_SECONDS, from beat or a worker's sweep timer,
    under the sweep's lease (owlai.ops.sweeps): fail turns whose worker died,
    enqueue once more turns no worker claimed (chat.turns.recovery.turns_recover)."""
    turns_recover()


@shared_task(name="chat.expire_approvals", ignore_result=True)
def expire_approvals() -> int:
    """Every OWLAI_APPROVAL_SWEEP_SECONDS, under the sweep's lease: approval requests nobody
    answered in time expire and their turns go on (chat.approvals)."""
    from chat.approvals import tool_approvals_expire

    return tool_approvals_expire()


@shared_task(name="chat.purge_conversations", ignore_result=True)
def purge_conversations() -> int:
    """Daily (beat): conversations past their retention go."""
    from chat.retention import conversations_purge

    return conversations_purge()


@shared_task(name="chat.requeue_after_broker_restart", ignore_result=True)
def requeue_after_broker_restart() -> int:
    """One worker, when the broker's Redis restarted (owlai.ops.sweeps): every
    queued turn goes to the broker once more at once."""
    from chat.turns.recovery import turns_requeue_queued

    return turns_requeue_queued()
