"""Celery tasks of playbooks: take ids, call one function."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

logger = logging.getLogger(__name__)


@shared_task(name="playbooks.advance_run", acks_late=True, ignore_result=True)
def advance_run(run_id: int) -> None:
    """Run the run's next nodes in this worker until it ends or waits."""
    from playbooks.engine import drive

    drive(run_id)


@shared_task(name="playbooks.scheduled_run", ignore_result=True)
def scheduled_run(schedule_id: int) -> None:
    """Sent by beat (django-celery-beat) when a schedule is due."""
    from playbooks.schedules import schedule_fire

    schedule_fire(schedule_id=schedule_id)


@shared_task(name="playbooks.sweep", ignore_result=True)
def sweep() -> None:
    """Pre-approvals past their expiry get their event; a run whose node
    ended while its hand-over was lost goes on."""
    from chat.models import ACTIVE_TURN_STATUSES, Turn
    from playbooks.approvals import pre_approvals_expire
    from playbooks.models import NodeRun, PlaybookRun, RunStatus
    from playbooks.runs import advance_soon

    pre_approvals_expire()
    quiet = timezone.now() - timedelta(seconds=settings.OWLAI_PLAYBOOK_SWEEP_SECONDS)
    for run in PlaybookRun.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING], created_at__lte=quiet)[
        :200
    ]:
        node = NodeRun.objects.filter(run=run, index=run.current_node).first()
        if node is None or not Turn.objects.filter(pk=node.turn_id, status__in=ACTIVE_TURN_STATUSES).exists():
            advance_soon(run.pk)
