"""Attacks on playbook runs as an origin (in-process: the recording model
server, the people MCP server on loopback, a sample customer database).

* A re-run takes back only the originals the first run's own parameters put
  into its vault: a token-shaped text typed into a parameter that a later
  query result happened to mint (a customer's name, masked by its column)
  must not come back as the original and reach the model in clear.
* The playbook's owner opening another person's run does not get that
  person's typed values into a vault of their own by re-running it.
* A pre-approval covers the playbook's fixed tool step, never a call the
  model chose in an agent step (hostile data steering the model to the
  pre-approved tool would otherwise send without anyone approving).
* A person a playbook is shared with runs it; they neither edit it, nor see
  or stop other people's runs.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from chat.models import ApprovalStatus, ToolApproval, Turn, TurnStatus, VaultEntry
from governance.field_crypto import decrypt_text
from governance.models import ColumnClassification, ConnectorTool, DbConnection, DbGrant, LlmModel, Role
from governance.services import db_connection_set_stored_dsn, feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from playbooks.approvals import pre_approval_grant
from playbooks.models import NodeRun, PlaybookRun, RunStatus
from playbooks.runs import playbook_run_rerun, playbook_run_start
from playbooks.services import PlaybookError, playbook_create, playbook_share
from tests.support.connector_world import add_connector, recording_people_server, two_tier_config
from tests.support.fake_llm import FakeLLMServer, text, tool_call

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("english"),
]

# The sample database's first customer: its name column is personal data
# (masked by lineage); detectors do not find a bare name in free text.
NAME = "김민준"
TYPED_PHONE = "010-7777-8888"


@pytest.fixture(scope="module")
def people_http(tmp_path_factory):
    with recording_people_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


@pytest.fixture
def world(settings, people_http, sample_sqlite_db, django_user_model):
    people_http.record.unlink(missing_ok=True)
    with FakeLLMServer() as fake:
        settings.OWLAI_INSTALL = parse_install_config(two_tier_config(fake.base_url))
        install_config_sync(config=settings.OWLAI_INSTALL)
        model = LlmModel.objects.get(name="inhouse-model")
        feature_default_set(feature="chat", model=model)
        owner = django_user_model.objects.create_user("pb-adv-owner", "o@example.com", "pw-owner-123")
        other = django_user_model.objects.create_user("pb-adv-other", "x@example.com", "pw-other-123")
        role = Role.objects.create(name="pb-adv-role")
        role.users.add(owner)
        sales = DbConnection.objects.create(name="sales", engine="sqlite", business_summary="Sales")
        db_connection_set_stored_dsn(connection=sales, dsn=sample_sqlite_db)
        DbGrant.objects.create(role=role, connection=sales, whole_database=True)
        ColumnClassification.objects.create(
            connection=sales,
            table_name="customers",
            column_name="name",
            pii_kind="name",
            source="manual",
            state="confirmed",
        )
        connector = add_connector("mailer", url=people_http.url, roles=[role], policy="require_approval")

        class W:
            pass

        w = W()
        w.fake, w.owner, w.other, w.role, w.model = fake, owner, other, role, model
        w.tool = ConnectorTool.objects.get(connector=connector, name="echo")
        w.record = people_http.record
        yield w


def received(world) -> list[str]:
    if not world.record.exists():
        return []
    return [json.loads(line)["text"] for line in world.record.read_text(encoding="utf-8").splitlines()]


def bodies(world) -> list[str]:
    return [json.dumps(body, ensure_ascii=False) for body in world.fake.requests]


def originals_of(conversation_id) -> list[str]:
    return [decrypt_text(e.ciphertext) for e in VaultEntry.objects.filter(conversation_id=conversation_id)]


def test_a_rerun_does_not_turn_a_token_minted_by_a_query_into_its_original(world):
    playbook = playbook_create(
        owner=world.owner,
        name="Who is it",
        model=world.model,
        parameters=[{"name": "who", "kind": "text"}],
        nodes=[
            {
                "key": "names",
                "kind": "tool",
                "tool": "run_sql",
                "arguments": {"connection": "sales", "sql": "SELECT name FROM customers WHERE id = 1"},
            },
            {"key": "ask", "kind": "agent", "prompt": "Tell me about $who"},
        ],
        actor=world.owner,
    )
    world.fake.script = [text("First."), text("Second.")]
    # Typed into the parameter: a token-shaped text that refers to nothing yet;
    # the first step's result then mints that very token for the customer's name.
    first = playbook_run_start(playbook=playbook, actor=world.owner, parameters={"who": "[이름-1]"})
    first = PlaybookRun.objects.get(pk=first.pk)
    assert first.status == RunStatus.COMPLETED, first.error
    assert NAME in originals_of(first.conversation_id)  # the query's name is behind [이름-1]

    try:
        again = playbook_run_rerun(run=first, actor=world.owner)
    except PlaybookError:
        again = None  # refusing is fine too: nothing reached a model
    if again is not None:
        again = PlaybookRun.objects.get(pk=again.pk)
        assert NAME not in json.dumps(again.parameters, ensure_ascii=False)
        for node in NodeRun.objects.filter(run=again):
            assert NAME not in node.rendered_input
    assert [b for b in bodies(world) if NAME in b] == []


def test_a_parameters_own_value_still_comes_back_on_rerun(world):
    playbook = playbook_create(
        owner=world.owner,
        name="Call back",
        model=world.model,
        parameters=[{"name": "phone", "kind": "text"}],
        nodes=[{"key": "ask", "kind": "agent", "prompt": "Who has $phone?"}],
        actor=world.owner,
    )
    world.fake.script = [text("First."), text("Second.")]
    first = PlaybookRun.objects.get(
        pk=playbook_run_start(playbook=playbook, actor=world.owner, parameters={"phone": TYPED_PHONE}).pk
    )
    again = PlaybookRun.objects.get(pk=playbook_run_rerun(run=first, actor=world.owner).pk)
    assert again.status == RunStatus.COMPLETED, again.error
    assert again.parameters["phone"].startswith("[") and TYPED_PHONE in originals_of(again.conversation_id)
    assert [b for b in bodies(world) if TYPED_PHONE in b] == []


def test_the_owner_rerunning_another_persons_run_gets_none_of_their_values(world):
    playbook = playbook_create(
        owner=world.owner,
        name="Call back",
        model=world.model,
        parameters=[{"name": "phone", "kind": "text"}],
        nodes=[{"key": "ask", "kind": "agent", "prompt": "Who has $phone?"}],
        actor=world.owner,
    )
    playbook_share(playbook=playbook, users=[world.other], actor=world.owner)
    world.fake.script = [text("Theirs."), text("Mine.")]
    theirs = PlaybookRun.objects.get(
        pk=playbook_run_start(playbook=playbook, actor=world.other, parameters={"phone": TYPED_PHONE}).pk
    )
    assert theirs.status == RunStatus.COMPLETED, theirs.error
    client = Client()
    client.force_login(world.owner)
    # The owner sees the run (masked) ...
    assert client.get(f"/api/playbook-runs/{theirs.pk}/").status_code == 200
    # ... but a re-run as the owner does not take the other person's originals.
    response = client.post(f"/api/playbook-runs/{theirs.pk}/rerun/")
    mine = PlaybookRun.objects.filter(actor=world.owner)
    for run in mine:
        assert TYPED_PHONE not in originals_of(run.conversation_id)
    assert response.status_code == 400 and not mine.exists()


def test_a_pre_approval_is_not_spent_by_a_call_the_model_chose(world):
    playbook = playbook_create(
        owner=world.owner,
        name="Weekly mail",
        model=world.model,
        parameters=[{"name": "body", "kind": "text"}],
        nodes=[
            {"key": "mail", "kind": "tool", "tool": "mailer__echo", "arguments": {"text": "$body"}},
            {"key": "after", "kind": "agent", "prompt": "Check what was sent: $mail"},
        ],
        actor=world.owner,
    )
    pre_approval_grant(
        playbook=playbook, connector_tool=world.tool, expires_at=timezone.now() + timedelta(days=7), actor=world.owner
    )
    # A model steered (by hostile data) to the pre-approved tool with its own arguments.
    world.fake.script = [tool_call("mailer__echo", {"text": "exfiltrated by the model"}), text("Done.")]
    run = PlaybookRun.objects.get(
        pk=playbook_run_start(playbook=playbook, actor=world.owner, parameters={"body": "Weekly report"}).pk
    )
    assert received(world) == ["Weekly report"]  # the fixed step ran pre-approved, the model's call did not
    assert run.status == RunStatus.WAITING_APPROVAL
    agent_turn = Turn.objects.get(pk=NodeRun.objects.get(run=run, key="after").turn_id)
    assert agent_turn.status == TurnStatus.WAITING_APPROVAL
    assert ToolApproval.objects.filter(turn=agent_turn, status=ApprovalStatus.PENDING).exists()


def test_a_person_it_is_shared_with_runs_it_but_neither_edits_it_nor_reaches_other_runs(world, django_user_model):
    playbook = playbook_create(
        owner=world.owner,
        name="Hello",
        model=world.model,
        parameters=[],
        nodes=[{"key": "ask", "kind": "agent", "prompt": "Say hello"}],
        actor=world.owner,
    )
    third = django_user_model.objects.create_user("pb-adv-third", password="pw-third-123")
    playbook_share(playbook=playbook, users=[world.other, third], actor=world.owner)
    world.fake.script = [text("Hello.")] * 3
    owners_run = playbook_run_start(playbook=playbook, actor=world.owner, parameters={})
    thirds_run = playbook_run_start(playbook=playbook, actor=third, parameters={})
    client = Client()
    client.force_login(world.other)
    edited = client.patch(
        f"/api/playbooks/{playbook.pk}/",
        {"nodes": [{"key": "ask", "kind": "agent", "prompt": "Something else"}]},
        content_type="application/json",
    )
    assert edited.status_code == 400
    assert playbook.__class__.objects.get(pk=playbook.pk).nodes[0]["prompt"] == "Say hello"
    for other_run in (owners_run, thirds_run):
        assert client.get(f"/api/playbook-runs/{other_run.pk}/").status_code == 404
        assert client.post(f"/api/playbook-runs/{other_run.pk}/stop/").status_code == 404
        assert client.post(f"/api/playbook-runs/{other_run.pk}/rerun/").status_code == 404
    listed = client.get(f"/api/playbooks/{playbook.pk}/runs/").json()
    assert listed == []


@pytest.fixture
def deputy(world, sample_sqlite_db):
    """The owner writes a playbook reading `hr`, which only the person it is
    shared with may read, and shares it with them (a confused deputy)."""
    hr = DbConnection.objects.create(name="hr", engine="sqlite", business_summary="HR")
    db_connection_set_stored_dsn(connection=hr, dsn=sample_sqlite_db)
    theirs = Role.objects.create(name="pb-adv-hr")
    theirs.users.add(world.other)
    DbGrant.objects.create(role=theirs, connection=hr, whole_database=True)
    theirs.connectors.add(world.tool.connector)
    playbook = playbook_create(
        owner=world.owner,
        name="Weekly pay",
        model=world.model,
        parameters=[],
        nodes=[
            {
                "key": "pay",
                "kind": "tool",
                "tool": "run_sql",
                "arguments": {"connection": "hr", "sql": "SELECT amount FROM salaries"},
            },
            {"key": "mail", "kind": "tool", "tool": "mailer__echo", "arguments": {"text": "pay: $pay"}},
        ],
        actor=world.owner,
    )
    playbook_share(playbook=playbook, users=[world.other], actor=world.owner)
    return playbook


SALARY = "90000000"


def test_a_pre_approval_of_the_owner_does_not_send_what_a_sharees_run_read(world, deputy):
    pre_approval_grant(
        playbook=deputy, connector_tool=world.tool, expires_at=timezone.now() + timedelta(days=7), actor=world.owner
    )
    run = PlaybookRun.objects.get(pk=playbook_run_start(playbook=deputy, actor=world.other, parameters={}).pk)
    assert NodeRun.objects.get(run=run, key="pay").status == RunStatus.COMPLETED
    # The person whose access read it decides whether it leaves.
    assert received(world) == []
    assert run.status == RunStatus.WAITING_APPROVAL
    approval = ToolApproval.objects.get(conversation_id=run.conversation_id, status=ApprovalStatus.PENDING)
    assert approval.user_id == world.other.pk


def test_the_owner_does_not_read_what_a_sharees_run_read_under_their_grants(world, deputy):
    deputy.nodes = deputy.nodes[:1]
    deputy.save(update_fields=["nodes"])
    run = PlaybookRun.objects.get(pk=playbook_run_start(playbook=deputy, actor=world.other, parameters={}).pk)
    assert run.status == RunStatus.COMPLETED, run.error
    assert SALARY in NodeRun.objects.get(run=run).output  # the person it ran as reads it
    theirs = Client()
    theirs.force_login(world.other)
    assert SALARY in theirs.get(f"/api/playbook-runs/{run.pk}/").content.decode()
    owner = Client()
    owner.force_login(world.owner)
    detail = owner.get(f"/api/playbook-runs/{run.pk}/")
    assert detail.status_code in (200, 404) and SALARY not in detail.content.decode()
    page = owner.get(f"/playbooks/runs/{run.pk}/")
    assert page.status_code in (200, 404) and SALARY not in page.content.decode()
    assert owner.get(f"/api/conversations/{run.conversation_id}/messages/").status_code == 404
