"""Pre-approvals of a playbook's connector tools, in-process (the people MCP
server on loopback, the real executor and approval gate): a pre-approved
call runs without waiting; after the tool's definition changes, or the
pre-approval expires or is revoked, the next run waits for its person
(holding no worker) and is told so; the decision resumes it; grant, revoke
and expiry are audit events without arguments."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.language import user_language_set
from audit.models import AuditEvent
from chat.approvals import tool_approval_decide, tool_approvals_expire
from chat.models import ApprovalStatus, ToolApproval, Turn, TurnStatus
from chat.turns.runner import turn_run
from governance.models import ConnectorTool, LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from playbooks.approvals import pre_approval_grant, pre_approval_revoke, pre_approvals_expire
from playbooks.models import NodeRun, PlaybookRun, RunStatus
from playbooks.runs import playbook_run_start
from playbooks.services import PlaybookError, playbook_create
from tests.support.connector_world import ALL_MODELS, PHONE, add_connector, recording_people_server, two_tier_config
from tests.support.fake_llm import FakeLLMServer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    pytest.mark.usefixtures("english"),
]

BODY = f"Weekly report; call {PHONE}"


@pytest.fixture(scope="module")
def people_http(tmp_path_factory):
    with recording_people_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


@pytest.fixture
def world(settings, people_http, django_user_model, monkeypatch):
    people_http.record.unlink(missing_ok=True)
    with FakeLLMServer() as fake:
        settings.OWLAI_INSTALL = parse_install_config(two_tier_config(fake.base_url))
        install_config_sync(config=settings.OWLAI_INSTALL)
        model = LlmModel.objects.get(name="cloud-model")
        feature_default_set(feature="chat", model=model)
        owner = django_user_model.objects.create_user("pb-owner", "owner@example.com", "pw-owner-123")
        user_language_set(user=owner, language="en")
        admin = django_user_model.objects.create_superuser("pb-admin", "a@example.com", "pw-admin-123")
        role = Role.objects.create(name="mail-role")
        role.users.add(owner)
        connector = add_connector(
            "mailer", url=people_http.url, roles=[role], exposure=ALL_MODELS, policy="require_approval"
        )
        playbook = playbook_create(
            owner=owner,
            name="Weekly mail",
            model=model,
            parameters=[{"name": "body", "kind": "text"}],
            nodes=[{"key": "mail", "kind": "tool", "tool": "mailer__echo", "arguments": {"text": "$body"}}],
            actor=owner,
        )
        handed: list[int] = []
        monkeypatch.setattr("chat.turns.dispatch.resume_soon", handed.append)

        class W:
            pass

        w = W()
        w.owner, w.admin, w.playbook, w.fake, w.handed = owner, admin, playbook, fake, handed
        w.tool = ConnectorTool.objects.get(connector=connector, name="echo")
        w.record = people_http.record
        yield w


def received(world) -> list[str]:
    if not world.record.exists():
        return []
    return [json.loads(line)["text"] for line in world.record.read_text(encoding="utf-8").splitlines()]


def start(world) -> PlaybookRun:
    run = playbook_run_start(playbook=world.playbook, actor=world.owner, parameters={"body": BODY})
    return PlaybookRun.objects.get(pk=run.pk)


def grant(world, *, actor=None, days=7):
    return pre_approval_grant(
        playbook=world.playbook,
        connector_tool=world.tool,
        expires_at=timezone.now() + timedelta(days=days),
        actor=actor or world.owner,
    )


def events_of(prefix: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind__startswith=prefix).order_by("id"))


def assert_no_arguments(events) -> None:
    for event in events:
        text = json.dumps([event.details, event.filters], ensure_ascii=False)
        assert "Weekly report" not in text and PHONE not in text and "arguments" not in text


def test_a_pre_approved_tool_runs_without_waiting(world):
    from playbooks.schedules import schedule_fire, schedule_set

    grant(world)
    schedule = schedule_set(
        playbook=world.playbook, kind="cron", cron="* * * * *", parameters={"body": BODY}, actor=world.owner
    )
    run = PlaybookRun.objects.get(pk=schedule_fire(schedule_id=schedule.pk).pk)  # a scheduled run
    assert run.status == RunStatus.COMPLETED, run.error
    assert not ToolApproval.objects.exists()
    assert received(world) and PHONE not in received(world)[0]  # the parameter's phone stayed a token
    auto = AuditEvent.objects.get(kind="approval_auto_approved")
    assert auto.details["standing_approval"] and auto.owner_id == world.owner.pk
    assert_no_arguments(events_of("playbook_pre_approval") + [auto])
    from django.test import Client

    client = Client()
    client.force_login(world.owner)
    page = client.get(f"/playbooks/{world.playbook.pk}/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Pre-approved tools" in page or "사전 승인한 도구" in page
    assert "echo" in page
    assert world.fake.requests == []  # a tool node asks no model


def test_without_a_pre_approval_the_run_waits_and_the_decision_resumes_it(world):
    run = start(world)
    assert run.status == RunStatus.WAITING_APPROVAL
    turn = Turn.objects.get(pk=NodeRun.objects.get(run=run).turn_id)
    assert turn.status == TurnStatus.WAITING_APPROVAL and turn.loop_state is not None  # no worker held
    assert run.notifications.filter(kind="waiting_approval", user=world.owner).exists()
    from django.core import mail

    assert [m.to for m in mail.outbox] == [["owner@example.com"]] and BODY not in mail.outbox[0].body
    from django.test import Client

    client = Client()
    client.force_login(world.owner)
    notices = client.get("/api/playbook-notices/").json()
    assert notices["unread"] == 1 and notices["notices"][0]["kind"] == "waiting_approval"
    approval = ToolApproval.objects.get(turn=turn, status=ApprovalStatus.PENDING)
    assert approval.user_id == world.owner.pk
    tool_approval_decide(approval_id=approval.pk, decision="approve", actor=world.owner)
    assert world.handed == [turn.pk]
    turn_run(turn_id=turn.pk)  # the new task the decision queued
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED and len(received(world)) == 1
    assert world.fake.requests == []  # resumed as a run of its given call: still no model call


def test_an_unanswered_wait_expires_and_fails_the_run(world):
    run = start(world)
    turn = Turn.objects.get(pk=NodeRun.objects.get(run=run).turn_id)
    tool_approvals_expire(now=timezone.now() + timedelta(days=1))
    turn_run(turn_id=turn.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "did not answer" in run.error
    assert received(world) == []


def test_a_changed_definition_voids_the_pre_approval(world):
    grant(world)
    ConnectorTool.objects.filter(pk=world.tool.pk).update(definition_hash="0" * 64)  # an accepted change
    run = start(world)
    assert run.status == RunStatus.WAITING_APPROVAL


def test_expired_and_revoked_pre_approvals_ask_again_and_are_recorded(world):
    pre = grant(world)
    PlaybookRun.objects.all().delete()
    type(pre).objects.filter(pk=pre.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert pre_approvals_expire() == 1 and pre_approvals_expire() == 0  # one event, once
    assert start(world).status == RunStatus.WAITING_APPROVAL
    PlaybookRun.objects.all().delete()

    pre = grant(world, actor=world.admin)  # an admin may grant
    with pytest.raises(PlaybookError):
        pre_approval_revoke(pre_approval=pre, actor=None)
    pre_approval_revoke(pre_approval=pre, actor=world.owner)
    assert start(world).status == RunStatus.WAITING_APPROVAL
    kinds = [e.kind for e in events_of("playbook_pre_approval")]
    assert kinds == [
        "playbook_pre_approval_granted",
        "playbook_pre_approval_expired",
        "playbook_pre_approval_granted",
        "playbook_pre_approval_revoked",
    ]
    assert_no_arguments(events_of("playbook_pre_approval"))


def test_only_the_owner_or_an_admin_pre_approves(world, django_user_model):
    other = django_user_model.objects.create_user("pb-other", password="pw-other-123")
    with pytest.raises(PlaybookError):
        grant(world, actor=other)
    assert not events_of("playbook_pre_approval")


# --- The run follows the decision at once ------------------------------------------------
#
# Without the run core telling the playbook when its step's turn stops
# waiting, the run stayed `waiting_approval` (in the database and on its live
# page) until the step ended. The decision's task is held here (world.handed):
# what these tests see is the decision alone, not the step's end.


def waiting_run(world) -> tuple[PlaybookRun, Turn, ToolApproval]:
    run = start(world)
    assert run.status == RunStatus.WAITING_APPROVAL
    turn = Turn.objects.get(pk=NodeRun.objects.get(run=run).turn_id)
    return run, turn, ToolApproval.objects.get(turn=turn, status=ApprovalStatus.PENDING)


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_decision_moves_the_run_out_of_waiting_at_once(world, decision):
    run, turn, approval = waiting_run(world)
    tool_approval_decide(approval_id=approval.pk, decision=decision, actor=world.owner)
    assert world.handed == [turn.pk]  # the step's turn has not run again yet
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert NodeRun.objects.get(run=run).status == RunStatus.RUNNING
    turn_run(turn_id=turn.pk)
    run.refresh_from_db()
    # Approved, the call ran; denied, the tool step failed with the person's reason.
    assert run.status == (RunStatus.COMPLETED if decision == "approve" else RunStatus.FAILED), run.error
    assert run.notifications.filter(kind="waiting_approval").count() == 1  # told once, when it began waiting


def test_an_expiry_moves_the_run_out_of_waiting_at_once(world):
    run, turn, _approval = waiting_run(world)
    assert tool_approvals_expire(now=timezone.now() + timedelta(days=1)) == 1
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and world.handed == [turn.pk]


def test_a_stop_of_the_waiting_step_ends_the_run(world):
    from chat.models import Conversation
    from chat.turns.cancel import turn_cancel

    run, turn, approval = waiting_run(world)
    conversation = Conversation.objects.get(pk=run.conversation_id)
    assert turn_cancel(conversation=conversation, actor=world.owner) == "cancelled"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.DENIED and world.handed == []


def test_a_late_wait_signal_changes_nothing(world):
    """The turn as stored decides, not the order signals arrive in: a wait's
    signal that comes after the decision, one for a turn that is not the
    run's current step, or one after the run ended leaves the run as it is."""
    from chat.turns.lifecycle import run_wait_changed
    from playbooks.engine import wait_changed

    run, turn, approval = waiting_run(world)
    tool_approval_decide(approval_id=approval.pk, decision="approve", actor=world.owner)
    late = {"turn_id": turn.pk, "origin": "playbook", "origin_ref": run.reference, "waiting": True}
    run_wait_changed.send(sender=Turn, **late)  # the wait's own signal, after the decision
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    Turn.objects.filter(pk=turn.pk).update(status=TurnStatus.WAITING_APPROVAL)
    wait_changed(run.pk, turn.pk + 1000)  # not the run's step
    assert PlaybookRun.objects.get(pk=run.pk).status == RunStatus.RUNNING
    # A resumed step that waits again (its next call): no drive loop is
    # there to see it, the signal marks the run and its person is told again.
    wait_changed(run.pk, turn.pk)
    assert PlaybookRun.objects.get(pk=run.pk).status == RunStatus.WAITING_APPROVAL
    assert run.notifications.filter(kind="waiting_approval").count() == 2
    PlaybookRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED)
    wait_changed(run.pk, turn.pk)
    assert PlaybookRun.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def run_changed_after(world, run: PlaybookRun, act) -> tuple[dict, dict]:
    """The run page's socket: the state it is sent on connect, and the first
    `run.changed` after `act` (the step's relayed turn events come too)."""
    from asgiref.sync import async_to_sync
    from channels.db import database_sync_to_async

    from tests.test_playbook_live import communicator, session_cookie

    cookie = session_cookie(world.owner)

    async def scenario():
        comm = communicator(run.pk, cookie=cookie)
        assert (await comm.connect())[0]
        first = json.loads(await comm.receive_from(timeout=5))
        await database_sync_to_async(act)()
        while True:
            frame = json.loads(await comm.receive_from(timeout=5))
            if frame["type"] == "run.changed":
                await comm.disconnect()
                return first, frame

    return async_to_sync(scenario)()


def test_the_run_page_hears_of_the_decision(world):
    run, _turn, approval = waiting_run(world)
    first, changed = run_changed_after(
        world, run, lambda: tool_approval_decide(approval_id=approval.pk, decision="approve", actor=world.owner)
    )
    assert first == {"type": "run.changed", "run_id": run.pk, "status": "waiting_approval", "node": 0}
    assert changed == {"type": "run.changed", "run_id": run.pk, "status": "running", "node": 0}


def test_the_run_page_hears_of_the_expiry(world):
    run, _turn, _approval = waiting_run(world)
    _first, changed = run_changed_after(
        world, run, lambda: tool_approvals_expire(now=timezone.now() + timedelta(days=1))
    )
    assert changed == {"type": "run.changed", "run_id": run.pk, "status": "running", "node": 0}
