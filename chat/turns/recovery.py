"""Recovery: the database says what a lost worker or a lost message
left. `turns_recover` runs every OWLAI_TURN_RECOVERY_SECONDS, in whichever
worker takes the sweep's lease (owlai.ops.sweeps; beat's message takes the
same lease); a turn whose worker died is failed, visibly, never re-run.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from chat.models import Turn, TurnStatus
from chat.turns import dispatch, lifecycle

logger = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    failed_running: int = 0
    requeued: int = 0
    failed_queued: int = 0


def turns_recover(*, conversation_id=None, requeue: bool = True) -> RecoveryReport:
    """Every OWLAI_TURN_RECOVERY_SECONDS, under the sweep's lease (and
    `turn_start`, for its own conversation, without re-enqueueing):

    - a running turn whose heartbeat is older than OWLAI_TURN_STALE_SECONDS
      lost its worker: it is failed (never re-run: its model and tool calls
      may already have happened) and its sockets are told;
    - a queued turn no worker claimed within OWLAI_TURN_QUEUE_SECONDS (its
      message may have died with Redis) is enqueued once more; still queued
      OWLAI_TURN_QUEUE_SECONDS later, it is failed."""
    now = timezone.now()
    report = RecoveryReport()
    turns = Turn.objects.all()
    if conversation_id is not None:
        turns = turns.filter(conversation_id=conversation_id)
    stale = Q(status=TurnStatus.RUNNING) & (
        Q(heartbeat_at__lt=now - timedelta(seconds=settings.OWLAI_TURN_STALE_SECONDS))
        | Q(heartbeat_at__isnull=True, created_at__lt=now - timedelta(seconds=settings.OWLAI_TURN_STALE_SECONDS))
    )
    queue_deadline = now - timedelta(seconds=settings.OWLAI_TURN_QUEUE_SECONDS)
    unclaimed_twice = Q(status=TurnStatus.QUEUED, requeued_at__lt=queue_deadline)
    if not requeue:
        # Where nothing re-enqueues (turn_start), a queued turn gets the same
        # total wait before it is failed.
        unclaimed_twice |= Q(status=TurnStatus.QUEUED, requeued_at__isnull=True) & _queued_before(
            queue_deadline - timedelta(seconds=settings.OWLAI_TURN_QUEUE_SECONDS)
        )
    for turn_id in turns.filter(stale).values_list("pk", flat=True):
        if _turn_fail_abandoned(
            turn_id=turn_id,
            condition=stale,
            code="worker_lost",
            message=_("The worker running this turn stopped before it finished. Please send your message again."),
        ):
            report.failed_running += 1
    for turn_id in turns.filter(unclaimed_twice).values_list("pk", flat=True):
        if _turn_fail_abandoned(
            turn_id=turn_id,
            condition=unclaimed_twice,
            code="not_started",
            message=_("No worker picked up this turn. Please send your message again."),
        ):
            report.failed_queued += 1
    if requeue:
        unclaimed = Q(status=TurnStatus.QUEUED, requeued_at__isnull=True) & _queued_before(queue_deadline)
        for turn_id in turns.filter(unclaimed).values_list("pk", flat=True):
            if _turn_requeue(turn_id=turn_id, condition=unclaimed):
                report.requeued += 1
    if report.failed_running or report.failed_queued or report.requeued:
        logger.warning("turn recovery: %s", report)
    return report


def _queued_before(moment) -> Q:
    """Handed to the queue before `moment`: when created, or when queued
    again after an approval (`queued_at`)."""
    return Q(queued_at__lt=moment) | Q(queued_at__isnull=True, created_at__lt=moment)


def _turn_requeue(*, turn_id: int, condition: Q) -> bool:
    if not Turn.objects.filter(condition, pk=turn_id).update(requeued_at=timezone.now()):
        return False
    try:
        dispatch.send(turn_id)
    except Exception as exc:
        # Broker still away: try again next round rather than count this.
        logger.warning("turn %s: could not enqueue again: %s", turn_id, exc)
        Turn.objects.filter(pk=turn_id, status=TurnStatus.QUEUED).update(requeued_at=None)
        return False
    return True


def _turn_fail_abandoned(*, turn_id: int, condition: Q, code: str, message) -> bool:
    """Fail one turn if `condition` still holds (lifecycle.fail_abandoned),
    its message in the turn's language."""
    turn = Turn.objects.select_related("conversation").filter(pk=turn_id).first()
    if turn is None:
        return False
    with translation.override(lifecycle.turn_language(turn)):
        text = str(message)
    return lifecycle.fail_abandoned(turn, condition=condition, code=code, message=text)


def turns_requeue_queued() -> int:
    """The broker restarted and may have lost its messages: every queued turn
    is enqueued once more now (not after OWLAI_TURN_QUEUE_SECONDS). A turn
    whose first message survived runs once all the same: the worker's claim
    is a conditional UPDATE, and the second message finds it claimed. Its
    queue clock starts again (`requeued_at`), so it is failed only if this
    message too goes unclaimed for OWLAI_TURN_QUEUE_SECONDS."""
    sent = 0
    queued = Q(status=TurnStatus.QUEUED)
    for turn_id in Turn.objects.filter(queued).values_list("pk", flat=True):
        if _turn_requeue(turn_id=turn_id, condition=queued):
            sent += 1
    if sent:
        logger.warning("broker restarted: %d queued turn(s) enqueued again", sent)
    return sent
