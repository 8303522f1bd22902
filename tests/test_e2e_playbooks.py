"""Playbooks end to end on the production stack: daphne, a Celery worker,
beat (reading its schedule from the database) and Redis, PostgreSQL, the
recording model server and the people MCP server on loopback HTTP.

A playbook saved from a public-tier conversation, run by beat on its cron
schedule, calls SQL and a connector tool; no model request body holds an
internal-only resource name or a planted personal value; its audit rows
carry the run's origin and reference; its run detail shows masked outputs.
Then the owner's grant is revoked and the next scheduled run's calls are
refused and recorded as denied for the owner."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import ToolCallAudit
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from governance.models import DbConnection, DbGrant, LlmModel, Role
from governance.services import db_connection_set_stored_dsn, feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from playbooks.models import NodeRun, PlaybookRun, PlaybookSchedule, RunStatus
from playbooks.schedules import schedule_set
from playbooks.services import playbook_from_turn, playbook_update
from tests.support.connector_world import ALL_MODELS, PERSONAL, add_connector, two_tier_config
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.mcp_servers import http_server
from tests.support.stack import Stack, process_env

pytestmark = [
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(420),
]

CRM_SUMMARY = "인사·고객 CRM (내부 전용)"
HR_SUMMARY = "급여 원장 (내부 전용)"
INTERNAL = ["crm__", "crm:", CRM_SUMMARY, "payroll", HR_SUMMARY]
PLANTED = ["010-1234-5678", "010-2222-3333", "010-4444-5555", *PERSONAL]


def wait_for_run(schedule, count: int, timeout: float = 150) -> PlaybookRun:
    """The schedule's `count`-th run, once it ended (beat fires on the minute)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = list(PlaybookRun.objects.filter(schedule=schedule).order_by("id"))
        if len(runs) >= count and runs[count - 1].status not in ("queued", "running", "waiting_approval"):
            return runs[count - 1]
        time.sleep(1)
    raise AssertionError(f"run {count} of schedule {schedule.pk} did not end within {timeout}s")


def test_scheduled_public_playbook_on_the_production_stack(
    tmp_path, require_postgres_app_db, require_redis, sample_sqlite_db, settings, django_user_model
):
    with http_server("people") as people, FakeLLMServer() as fake:
        config = two_tier_config(fake.base_url)
        config_path = tmp_path / "owlai.toml"
        config_path.write_text(config)
        settings.OWLAI_INSTALL = parse_install_config(config)
        install_config_sync(config=settings.OWLAI_INSTALL)
        feature_default_set(feature="chat", model=LlmModel.objects.get(name="cloud-model"))
        owner = django_user_model.objects.create_user("pb-e2e", "e2e@example.com", "pw-e2e-123")
        role = Role.objects.create(name="pb-e2e-role")
        role.users.add(owner)
        sales = DbConnection.objects.create(name="sales", engine="sqlite", business_summary="매출", exposure=ALL_MODELS)
        db_connection_set_stored_dsn(connection=sales, dsn=sample_sqlite_db)
        payroll = DbConnection.objects.create(name="payroll", engine="sqlite", business_summary=HR_SUMMARY)
        db_connection_set_stored_dsn(connection=payroll, dsn=sample_sqlite_db)
        for connection in (sales, payroll):
            DbGrant.objects.create(role=role, connection=connection, whole_database=True)
        add_connector("crm", url=people.url, roles=[role], summary=CRM_SUMMARY)
        add_connector("desk", url=people.url, roles=[role], exposure=ALL_MODELS)

        # The conversation it is saved from ran on the public tier.
        fake.script = [text("Hello.")]
        conversation = conversation_create(owner=owner)
        turn = turn_start(conversation=conversation, user=owner, text="Weekly check", model="cloud/cloud-model")
        turn_run(turn_id=turn.pk)
        playbook = playbook_from_turn(turn=turn, actor=owner, name="Weekly check")
        playbook = playbook_update(
            playbook=playbook,
            actor=owner,
            nodes=[
                {
                    "key": "phones",
                    "kind": "tool",
                    "tool": "run_sql",
                    "arguments": {"connection": "sales", "sql": "SELECT name, phone FROM customers ORDER BY id"},
                },
                {"key": "summary", "kind": "agent", "prompt": "Check these customers: $phones"},
            ],
        )
        fake.requests.clear()
        fake.script = [tool_call("desk__find_customer", {"name": "김민준"}), text("Checked.")]
        schedule = schedule_set(playbook=playbook, kind="cron", cron="* * * * *", tz="Asia/Seoul", actor=owner)

        stack = Stack(tmp_path, process_env(config_path, OWLAI_PLAYBOOK_SWEEP_SECONDS="5"))
        with stack.running():
            first = wait_for_run(schedule, 1)
            assert first.status == RunStatus.COMPLETED, (first.error, stack.logs())
            assert first.trigger == "schedule" and first.actor_id == owner.pk

            bodies = [json.dumps(body, ensure_ascii=False) for body in fake.requests]
            assert len(bodies) == 2 and "desk__find_customer" in bodies[0]
            for body in bodies:
                assert [s for s in INTERNAL if s in body] == []
                assert [s for s in PLANTED if s in body] == []
            rows = list(ToolCallAudit.objects.filter(origin_ref=first.reference))
            assert {r.tool for r in rows} >= {"run_sql", "desk__find_customer"}
            assert {(r.origin, r.actor_id) for r in rows} == {("playbook", owner.pk)}
            assert "[" in NodeRun.objects.get(run=first, index=0).output

            admin = django_user_model.objects.create_superuser("pb-e2e-root", "r@example.com", "pw-root-123")
            client = Client()
            client.force_login(admin)
            page = client.get(reverse("admin:playbooks_playbookrun_change", args=[first.pk])).content.decode()
            assert [s for s in PLANTED if s in page] == [] and "phones" in page

            # Between two scheduled runs the owner loses the grant.
            DbGrant.objects.filter(role=role, connection=sales).delete()
            fake.script = [text("unused")] * 5
            second = wait_for_run(schedule, 2)
            assert second.status == RunStatus.FAILED
            denied = list(ToolCallAudit.objects.filter(origin_ref=second.reference))
            assert denied and {(r.outcome, r.actor_id) for r in denied} == {("denied", owner.pk)}
            # One run per due time, however beat delivered it.
            fired = PlaybookSchedule.objects.get(pk=schedule.pk).last_fired_at
            assert fired is not None and PlaybookRun.objects.filter(schedule=schedule).count() <= 3
