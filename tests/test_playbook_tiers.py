"""A playbook made from a public-tier conversation runs on the public tier:
its scheduled run calls SQL and a connector tool through the one loop and
executor; every model request body (the recording model server) is free of
internal-only resource names and of planted personal values; its audit rows
carry the run's origin and reference; its run detail shows masked outputs.
A tool node naming an internal-only tool is refused when saved and, should
one get there anyway, refused by the executor a second time."""

from __future__ import annotations

import json

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
from playbooks.models import NodeRun, Playbook, PlaybookRun, RunStatus
from playbooks.schedules import schedule_fire, schedule_set
from playbooks.services import PlaybookError, playbook_from_turn, playbook_update
from tests.support.connector_world import ALL_MODELS, EMAIL, PERSONAL, PHONE, add_connector, two_tier_config
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.mcp_servers import http_server

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("english"),
]

CRM_SUMMARY = "인사·고객 CRM (내부 전용)"
HR_SUMMARY = "급여 원장 (내부 전용)"
# What a public-tier run must never carry: internal-only names and summaries.
INTERNAL = ["crm__", "crm:", CRM_SUMMARY, "payroll", HR_SUMMARY]
# Planted personal values: the sample database's phones, the connector's.
PLANTED = ["010-1234-5678", "010-2222-3333", "010-4444-5555", *PERSONAL]


@pytest.fixture(scope="module")
def people():
    with http_server("people") as server:
        yield server


@pytest.fixture
def world(settings, people, sample_sqlite_db, django_user_model):
    with FakeLLMServer() as fake:
        settings.OWLAI_INSTALL = parse_install_config(two_tier_config(fake.base_url))
        install_config_sync(config=settings.OWLAI_INSTALL)
        feature_default_set(feature="chat", model=LlmModel.objects.get(name="cloud-model"))
        owner = django_user_model.objects.create_user("pb-public", "p@example.com", "pw-public-123")
        role = Role.objects.create(name="analysts")
        role.users.add(owner)
        sales = DbConnection.objects.create(name="sales", engine="sqlite", business_summary="매출", exposure=ALL_MODELS)
        db_connection_set_stored_dsn(connection=sales, dsn=sample_sqlite_db)
        payroll = DbConnection.objects.create(name="payroll", engine="sqlite", business_summary=HR_SUMMARY)
        db_connection_set_stored_dsn(connection=payroll, dsn=sample_sqlite_db)
        for connection in (sales, payroll):
            DbGrant.objects.create(role=role, connection=connection, whole_database=True)
        add_connector("crm", url=people.url, roles=[role], summary=CRM_SUMMARY)  # internal-only
        add_connector("desk", url=people.url, roles=[role], exposure=ALL_MODELS)

        class W:
            pass

        w = W()
        w.fake, w.owner, w.role = fake, owner, role
        yield w


def public_playbook(world) -> Playbook:
    """Saved from a turn of a public-tier conversation."""
    world.fake.script = [text("Hello.")]
    conversation = conversation_create(owner=world.owner)
    turn = turn_start(
        conversation=conversation, user=world.owner, text="Weekly customer check", model="cloud/cloud-model"
    )
    turn_run(turn_id=turn.pk)
    playbook = playbook_from_turn(turn=turn, actor=world.owner, name="Weekly check")
    assert playbook.tier == "public" and playbook.model.name == "cloud-model"
    return playbook_update(
        playbook=playbook,
        actor=world.owner,
        parameters=[{"name": "city", "kind": "choice", "choices": ["서울", "부산"]}],
        nodes=[
            {
                "key": "phones",
                "kind": "tool",
                "tool": "run_sql",
                "arguments": {"connection": "sales", "sql": "SELECT name, phone FROM customers WHERE city = '$city'"},
            },
            {"key": "summary", "kind": "agent", "prompt": "Check these customers: $phones"},
        ],
    )


def test_a_scheduled_public_tier_run_sees_nothing_internal_and_no_personal_value(world):
    playbook = public_playbook(world)
    world.fake.requests.clear()
    world.fake.script = [
        tool_call("desk__find_customer", {"name": "김민준"}),
        text("Checked: two customers."),
    ]
    schedule = schedule_set(
        playbook=playbook, kind="cron", cron="0 9 * * 1", parameters={"city": "서울"}, actor=world.owner
    )
    run = PlaybookRun.objects.get(pk=schedule_fire(schedule_id=schedule.pk).pk)
    assert run.status == RunStatus.COMPLETED, run.error
    assert run.actor_id == world.owner.pk and run.trigger == "schedule"

    bodies = [json.dumps(body, ensure_ascii=False) for body in world.fake.requests]
    assert len(bodies) == 2 and all(json.loads(b)["model"] == "cloud-model" for b in bodies)
    assert "desk__find_customer" in bodies[0]  # the run saw its public tools
    for body in bodies:
        assert [s for s in INTERNAL if s in body] == []
        assert [s for s in PLANTED if s in body] == []

    rows = list(ToolCallAudit.objects.filter(origin_ref=run.reference))
    assert {r.tool for r in rows} >= {"run_sql", "desk__find_customer"}
    assert {(r.origin, r.actor_id) for r in rows} == {("playbook", world.owner.pk)}

    nodes = list(NodeRun.objects.filter(run=run))
    assert [n.status for n in nodes] == ["completed", "completed"]
    assert "[" in nodes[0].output and nodes[1].output == "Checked: two customers."
    admin = type(world.owner).objects.create_superuser("pb-root", "r@example.com", "pw-root-123")
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("admin:playbooks_playbookrun_change", args=[run.pk])).content.decode()
    assert [s for s in PLANTED if s in page] == [] and "phones" in page


def test_an_internal_only_tool_is_refused_when_saved_and_again_by_the_executor(world):
    playbook = public_playbook(world)
    crm = {"key": "card", "kind": "tool", "tool": "crm__find_customer", "arguments": {"name": "김민준"}}
    with pytest.raises(PlaybookError, match="no such tool"):
        playbook_update(playbook=playbook, actor=world.owner, parameters=[], nodes=[crm])
    # Got there anyway (saved when the connector was open to every model, say):
    Playbook.objects.filter(pk=playbook.pk).update(parameters=[], nodes=[crm])
    from playbooks.runs import playbook_run_start

    run = PlaybookRun.objects.get(pk=playbook_run_start(playbook=playbook, actor=world.owner).pk)
    assert run.status == RunStatus.FAILED
    rows = list(ToolCallAudit.objects.filter(origin_ref=run.reference))
    assert rows and {r.outcome for r in rows} == {"denied"}
    assert "crm" not in run.error and EMAIL not in run.error and PHONE not in run.error
