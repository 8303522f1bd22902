"""Schedules: a playbook runs by itself, as its owner, on a cron expression
or an interval in a time zone. The timing is django-celery-beat's (its
periodic task, its crontab parser); beat sends `playbooks.scheduled_run`.

A beat outage, a restarted beat or two beats must not run one due time
twice: `schedule_fire` locks the schedule and starts a run only when the
schedule (celery's own is_due) says a due time passed since the last run it
started. What runs is also bounded by the playbook's one-active-run rule.
"""

from __future__ import annotations

import json
import logging
import zoneinfo
from datetime import timedelta

from celery.schedules import crontab
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from audit.events import audit_event_write
from audit.models import ResourceKind
from playbooks import events, spec
from playbooks.models import Playbook, PlaybookSchedule, ScheduleKind, Trigger
from playbooks.services import PlaybookError

logger = logging.getLogger(__name__)

TASK = "playbooks.scheduled_run"
# An interval's due time may arrive a little early against the time the last
# run was started (the start itself took time): this much is forgiven.
_INTERVAL_SLACK = timedelta(seconds=30)


def _cron_fields(expression: str) -> dict[str, str]:
    parts = expression.split()
    if len(parts) != 5:
        raise PlaybookError(_("A cron expression has five fields: minute hour day month weekday."))
    fields = dict(zip(("minute", "hour", "day_of_month", "month_of_year", "day_of_week"), parts, strict=True))
    try:
        crontab(**fields)  # celery's parser: refuses what it cannot schedule
    except (ValueError, TypeError):
        raise PlaybookError(_("This cron expression is not valid.")) from None
    return fields


def _zone(name: str) -> zoneinfo.ZoneInfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise PlaybookError(_("Unknown time zone.")) from None


@transaction.atomic
def schedule_set(
    *,
    playbook: Playbook,
    kind: str,
    cron: str = "",
    every_minutes: int | None = None,
    tz: str = "Asia/Seoul",
    parameters=None,
    enabled: bool = True,
    schedule: PlaybookSchedule | None = None,
    actor,
    request=None,
) -> PlaybookSchedule:
    """Create or change a schedule (only the playbook's owner: its runs act
    as the owner). Its parameters are checked now and again at each run."""
    playbook = Playbook.objects.select_for_update().select_related("owner").get(pk=playbook.pk)
    if actor is None or actor.pk != playbook.owner_id:
        raise PlaybookError(_("Only the playbook's owner can change it."))
    zone = _zone(tz)
    try:
        spec.parameter_values(playbook.parameters, parameters or {})
    except spec.SpecError as exc:
        raise PlaybookError(str(exc)) from None
    if kind == ScheduleKind.CRON:
        timing = {"crontab": CrontabSchedule.objects.get_or_create(**_cron_fields(cron), timezone=zone)[0]}
        every_minutes = None
    elif kind == ScheduleKind.INTERVAL:
        if not every_minutes or every_minutes < 1:
            raise PlaybookError(_("An interval is at least one minute."))
        timing = {
            "interval": IntervalSchedule.objects.get_or_create(every=every_minutes, period=IntervalSchedule.MINUTES)[0]
        }
        cron = ""
    else:
        raise PlaybookError(_("Pick a cron expression or an interval."))
    if schedule is None:
        schedule = PlaybookSchedule(playbook=playbook)
    elif schedule.playbook_id != playbook.pk:
        raise PlaybookError(_("No such schedule."))
    schedule.kind, schedule.cron, schedule.every_minutes = kind, cron, every_minutes
    schedule.timezone, schedule.parameters, schedule.enabled = tz, parameters or {}, enabled
    schedule.save()
    task = schedule.periodic_task or PeriodicTask(name=f"playbook-schedule-{schedule.pk}", task=TASK)
    task.crontab, task.interval = timing.get("crontab"), timing.get("interval")
    task.args = json.dumps([schedule.pk])
    task.enabled = enabled
    task.save()
    if schedule.periodic_task_id != task.pk:
        schedule.periodic_task = task
        schedule.save(update_fields=["periodic_task"])
    _event(events.SCHEDULE_SET, schedule, actor, request)
    return schedule


@transaction.atomic
def schedule_delete(*, schedule: PlaybookSchedule, actor, request=None) -> None:
    schedule = PlaybookSchedule.objects.select_related("playbook__owner").get(pk=schedule.pk)
    if actor is None or actor.pk != schedule.playbook.owner_id:
        raise PlaybookError(_("Only the playbook's owner can change it."))
    _event(events.SCHEDULE_DELETED, schedule, actor, request)
    if schedule.periodic_task_id:
        schedule.periodic_task.delete()
    schedule.delete()


def _event(kind: str, schedule: PlaybookSchedule, actor, request=None) -> None:
    playbook = schedule.playbook
    audit_event_write(
        kind=kind,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.PLAYBOOK_SCHEDULE,
        resource_id=schedule.pk,
        owner_id=playbook.owner_id,
        owner_username=playbook.owner.get_username(),
        details={
            "playbook_id": playbook.pk,
            "playbook": playbook.name,
            "kind": schedule.kind,
            "cron": schedule.cron,
            "every_minutes": schedule.every_minutes,
            "timezone": schedule.timezone,
            "enabled": schedule.enabled,
        },
    )


def next_run(schedule: PlaybookSchedule):
    """When beat will next start it (aware, in the schedule's time zone), or None."""
    task = schedule.periodic_task
    if task is None or not schedule.enabled:
        return None
    now = timezone.now()
    zone = _zone(schedule.timezone)
    try:
        # In the schedule's zone: celery's crontab counts days and hours in
        # the zone of the time it is given.
        remaining = task.schedule.remaining_estimate((task.last_run_at or now).astimezone(zone))
    except Exception:
        logger.exception("schedule %s: next run unknown", schedule.pk)
        return None
    upcoming = now + max(remaining, timedelta(0))
    # Celery measured from its own "now", a moment after ours: to the nearest second.
    upcoming = upcoming.replace(microsecond=0) + timedelta(seconds=1 if upcoming.microsecond >= 500_000 else 0)
    return upcoming.astimezone(zone)


def _due(schedule: PlaybookSchedule, task: PeriodicTask) -> bool:
    last = schedule.last_fired_at
    if last is None:
        return True
    if schedule.kind == ScheduleKind.INTERVAL:
        last = last - _INTERVAL_SLACK
    return bool(task.schedule.is_due(last).is_due)


def schedule_fire(*, schedule_id: int):
    """Beat says the schedule is due: start one run as the owner, unless a
    run for this due time was already started (a late or repeated send)."""
    from playbooks.runs import playbook_run_start

    with transaction.atomic():
        schedule = (
            PlaybookSchedule.objects.select_for_update(of=("self",))
            .select_related("playbook__owner", "periodic_task")
            .filter(pk=schedule_id)
            .first()
        )
        if schedule is None or not schedule.enabled or schedule.periodic_task is None:
            return None
        if not _due(schedule, schedule.periodic_task):
            logger.info("schedule %s: this due time already ran; not again", schedule_id)
            return None
        schedule.last_fired_at = timezone.now()
        schedule.save(update_fields=["last_fired_at"])
        playbook = schedule.playbook
        try:
            return playbook_run_start(
                playbook=playbook,
                actor=playbook.owner,
                parameters=schedule.parameters,
                trigger=Trigger.SCHEDULE,
                schedule=schedule,
            )
        except PlaybookError as exc:
            # Not started (the owner is no longer active, a run is still
            # going, a parameter no longer fits): on the record, not silent.
            audit_event_write(
                kind=events.RUN_REFUSED,
                actor=None,
                resource_kind=ResourceKind.PLAYBOOK,
                resource_id=playbook.pk,
                owner_id=playbook.owner_id,
                owner_username=playbook.owner.get_username(),
                details={"playbook": playbook.name, "schedule_id": schedule.pk, "reason": str(exc)},
            )
            return None
