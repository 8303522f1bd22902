"""seed_demo adds a scheduled demo playbook over the demo database and runs
it once, so a newcomer finds a run history; seeding again adds nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from playbooks.models import Playbook, PlaybookRun, PlaybookSchedule, RunStatus

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_seed_demo_adds_a_scheduled_playbook_with_a_run(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    call_command("seed_demo", stdout=StringIO())
    playbook = Playbook.objects.get(owner__username="staff")
    schedule = PlaybookSchedule.objects.get(playbook=playbook)
    assert schedule.kind == "cron" and schedule.periodic_task is not None
    run = PlaybookRun.objects.get(playbook=playbook)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.node_runs.count() == 2
    call_command("seed_demo", stdout=StringIO())
    assert Playbook.objects.count() == 1 and PlaybookRun.objects.count() == 1
