"""Playbook schedules (django-celery-beat periodic tasks): cron and
interval in a time zone with the next run shown; a due time runs once however
often (or late) beat sends it; a scheduled run acts as the owner with the
owner's roles of the moment it runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from audit.models import AuditEvent, ToolCallAudit
from governance.models import DbGrant
from playbooks.models import PlaybookRun, PlaybookSchedule, RunStatus, Trigger
from playbooks.schedules import next_run, schedule_delete, schedule_fire, schedule_set
from playbooks.services import PlaybookError, playbook_create
from playbooks.tasks import scheduled_run

pytestmark = [pytest.mark.usefixtures("english"), pytest.mark.django_db(transaction=True)]

NODE = {"key": "names", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "$sql"}}


@pytest.fixture
def playbook(personas, install_models):
    return playbook_create(
        owner=personas.staff,
        name="Nightly names",
        model=install_models,
        parameters=[{"name": "sql", "kind": "text"}],
        nodes=[NODE],
        actor=personas.staff,
    )


def cron(playbook, actor, expression="0 7 * * 1-5", tz="Asia/Seoul"):
    return schedule_set(
        playbook=playbook,
        kind="cron",
        cron=expression,
        tz=tz,
        parameters={"sql": "SELECT name FROM customers"},
        actor=actor,
    )


def test_a_cron_schedule_is_a_periodic_task_in_its_time_zone(playbook, personas):
    schedule = cron(playbook, personas.staff)
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert task.task == "playbooks.scheduled_run" and task.crontab.hour == "7"
    assert str(task.crontab.timezone) == "Asia/Seoul"
    upcoming = next_run(schedule)
    assert upcoming is not None and upcoming > timezone.now()
    assert upcoming.hour == 7 and upcoming.minute == 0 and upcoming.weekday() < 5
    assert str(upcoming.tzinfo) == "Asia/Seoul"
    assert AuditEvent.objects.filter(kind="playbook_schedule_set", resource_id=str(schedule.pk)).exists()


def test_schedules_are_checked_and_only_the_owner_sets_them(playbook, personas):
    with pytest.raises(PlaybookError, match="five fields"):
        cron(playbook, personas.staff, expression="every day")
    with pytest.raises(PlaybookError, match="not valid"):
        cron(playbook, personas.staff, expression="99 7 * * *")
    with pytest.raises(PlaybookError, match="time zone"):
        cron(playbook, personas.staff, tz="Mars/Olympus")
    with pytest.raises(PlaybookError, match="owner"):
        cron(playbook, personas.outsider)
    with pytest.raises(PlaybookError, match="required"):
        schedule_set(playbook=playbook, kind="interval", every_minutes=5, parameters={}, actor=personas.staff)
    assert not PlaybookSchedule.objects.exists() and not PeriodicTask.objects.filter(task="playbooks.scheduled_run")


def test_an_interval_schedule_and_its_removal(playbook, personas):
    schedule = schedule_set(
        playbook=playbook, kind="interval", every_minutes=15, parameters={"sql": "SELECT 1"}, actor=personas.staff
    )
    task = PeriodicTask.objects.get(pk=schedule.periodic_task_id)
    assert task.interval.every == 15 and task.crontab is None
    assert next_run(schedule) <= timezone.now() + timedelta(minutes=15, seconds=1)
    schedule_delete(schedule=schedule, actor=personas.staff)
    assert not PeriodicTask.objects.filter(pk=task.pk).exists()


def test_a_due_time_runs_once_however_often_beat_sends_it(playbook, personas):
    schedule = cron(playbook, personas.staff, expression="* * * * *")
    scheduled_run.delay(schedule.pk)  # the task beat sends
    scheduled_run.delay(schedule.pk)  # sent again (a restarted or second beat, a late redelivery)
    runs = list(PlaybookRun.objects.filter(schedule=schedule))
    assert len(runs) == 1 and runs[0].trigger == Trigger.SCHEDULE and runs[0].actor_id == personas.staff.pk
    assert runs[0].status == RunStatus.COMPLETED
    # After an outage beat sends the missed schedule once: one run, not one per missed time.
    PlaybookSchedule.objects.filter(pk=schedule.pk).update(last_fired_at=timezone.now() - timedelta(hours=6))
    assert schedule_fire(schedule_id=schedule.pk) is not None
    assert schedule_fire(schedule_id=schedule.pk) is None
    assert PlaybookRun.objects.filter(schedule=schedule).count() == 2


def test_a_scheduled_run_uses_the_owners_roles_when_it_runs(playbook, personas):
    schedule = cron(playbook, personas.staff, expression="* * * * *")
    first = schedule_fire(schedule_id=schedule.pk)
    assert PlaybookRun.objects.get(pk=first.pk).status == RunStatus.COMPLETED
    DbGrant.objects.filter(role=personas.role, connection=personas.sales).delete()  # revoked meanwhile
    PlaybookSchedule.objects.filter(pk=schedule.pk).update(last_fired_at=timezone.now() - timedelta(minutes=2))
    second = PlaybookRun.objects.get(pk=schedule_fire(schedule_id=schedule.pk).pk)
    assert second.status == RunStatus.FAILED
    rows = ToolCallAudit.objects.filter(origin_ref=second.reference)
    assert rows.exists() and {(r.outcome, r.actor_id, r.origin) for r in rows} == {
        ("denied", personas.staff.pk, "playbook")
    }


def test_an_owner_no_longer_active_is_not_run_as(playbook, personas):
    schedule = cron(playbook, personas.staff, expression="* * * * *")
    personas.staff.is_active = False
    personas.staff.save()
    assert schedule_fire(schedule_id=schedule.pk) is None
    assert not PlaybookRun.objects.exists()
    refused = AuditEvent.objects.get(kind="playbook_run_refused")
    assert refused.owner_id == personas.staff.pk and refused.details["schedule_id"] == schedule.pk
