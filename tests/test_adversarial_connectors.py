"""Adversarial tests of the connector tools and their approvals (issue 11).

The model is untrusted, and so are an MCP server's tool descriptions and
results. Each test is one attack, against real SDK servers on loopback (HTTP)
or as stdio subprocesses, through the real executor and turn runner.

Part 1 (FINDINGS): attacks that succeed on the code as reviewed; each test
fails until the hole is closed. Part 2 (HELD): attacks that were tried and
held; they document the guarantee and must keep passing.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import ToolCallAudit
from chat.approvals import ApprovalError, tool_approval_decide
from chat.executor import ToolSession, tool_definitions
from chat.executor.tools.connectors import connector_state
from chat.models import AlwaysAllow, ApprovalStatus, ToolApproval, TurnStatus
from chat.services import conversation_create
from governance.connectors.client import ConnectorConfigError
from governance.connectors.services import connector_target
from governance.models import Connector, ConnectorTool, LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from governance.visibility import TOOL_SEARCH, TOOL_UNAVAILABLE, visible_resources
from owlai.install_config import parse_install_config
from tests.support.connector_world import (
    ALL_MODELS,
    EMAIL,
    PHONE,
    RRN,
    World,
    add_connector,
    audit_dump,
    recording_people_server,
    set_policy,
    two_tier_config,
)
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.mcp_servers import ROOT, stdio_command_toml
from tests.test_approvals import ask, decide, kinds, received

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(240), pytest.mark.usefixtures("english")]


# The hostile server's numeric identifiers (tests/support/mcp_server_hostile.py).
RRN_NUMBER = "9001012345678"
PHONE_NUMBER = "1098765432"
NAMED_SECRET = "OWLAI_CONNECTOR_HOSTILE_TOKEN"
UNNAMED_SECRET = "OWLAI_CONNECTOR_NOT_NAMED_TOKEN"


def hostile_command_toml(name: str = "hostile", env: tuple[str, ...] = ()) -> str:
    args = ["-m", "tests.support.mcp_server_hostile"]
    return (
        "\n[[connector_commands]]\n"
        f"name = {json.dumps(name)}\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps(args)}\n"
        f"cwd = {json.dumps(str(ROOT))}\n"
        f"env = {json.dumps(list(env))}\n"
    )


@pytest.fixture(scope="module")
def people_http(tmp_path_factory):
    with recording_people_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


@pytest.fixture
def world(settings, django_user_model, people_http, monkeypatch):
    monkeypatch.setenv(NAMED_SECRET, "named-secret-value")
    monkeypatch.setenv(UNNAMED_SECRET, "unnamed-secret-value")
    settings.OWLAI_INSTALL = parse_install_config(
        two_tier_config() + stdio_command_toml("people", "people") + hostile_command_toml(env=(NAMED_SECRET,))
    )
    install_config_sync(config=settings.OWLAI_INSTALL)
    people_http.record.unlink(missing_ok=True)
    user = django_user_model.objects.create_user("red-staff", password="pw-red-123")
    role = Role.objects.create(name="red-role")
    role.users.add(user)
    connectors = {
        "crm": add_connector("crm", url=people_http.url, roles=[role], summary="고객 CRM (internal)"),
        "desk": add_connector("desk", command="people", roles=[role], exposure=ALL_MODELS),
        "hostile": add_connector("hostile", command="hostile", roles=[role], exposure=ALL_MODELS),
    }
    return World(user, conversation_create(owner=user), connectors, people_http.record)


# --- approvals world (the whole turn: scripted model, turn runner, decisions) --------------


@pytest.fixture
def fake():
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def resumed(monkeypatch):
    handed: list[int] = []
    monkeypatch.setattr("chat.turns.dispatch.resume_soon", handed.append)
    return handed


@pytest.fixture
def mail(settings, fake, people_http, django_user_model):
    people_http.record.unlink(missing_ok=True)
    settings.OWLAI_INSTALL = parse_install_config(two_tier_config(fake.base_url))
    install_config_sync(config=settings.OWLAI_INSTALL)
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
    user = django_user_model.objects.create_user("red-mail", password="pw-mail-123")
    role = Role.objects.create(name="red-mail-role")
    role.users.add(user)
    connector = add_connector(
        "mailer", url=people_http.url, roles=[role], exposure=ALL_MODELS, policy="require_approval"
    )

    class W:
        pass

    w = W()
    w.user, w.fake, w.record, w.connector, w.role = user, fake, people_http.record, connector, role
    w.conversation = conversation_create(owner=user)
    return w


MAIL = "mailer__echo"


# =====================================================================================
# Part 1 — FINDINGS: these fail on the reviewed code.
# =====================================================================================


def test_finding_numeric_personal_values_in_structured_content_are_masked(world):
    # Attack: a server returns a resident registration number and a phone number as JSON
    # *numbers* in structured content; the shaper only masks strings, so they reach the model.
    payload, outcome = world.call("hostile__numeric_record", {"name": "김민지"})
    assert outcome == "success", payload
    text_seen = json.dumps(payload, ensure_ascii=False)
    assert RRN_NUMBER not in text_seen, text_seen
    assert PHONE_NUMBER not in text_seen, text_seen


def test_finding_argument_names_written_by_the_model_never_reach_the_audit_row(world):
    # Attack: the model hides content (here a confidential deal name) in an argument *name*;
    # the schema check's refusal "unknown argument <name>" is written into ToolCallAudit.reason.
    tool = ConnectorTool.objects.get(connector=world.connectors["desk"], name="echo")
    tool.input_schema = {**tool.input_schema, "additionalProperties": False}
    tool.save(update_fields=["input_schema"])
    secret = "인수대상-오리온전자-매각가-1200억"
    payload, outcome = world.call("desk__echo", {"text": "hi", secret: 1})
    assert outcome == "denied", payload
    assert secret not in audit_dump()


def test_finding_a_one_time_approval_is_bound_to_the_definition_it_was_given_for(
    mail, resumed, django_capture_on_commit_callbacks
):
    # Attack: the user approves a call while the tool's pinned definition is D1; before the
    # turn resumes, the server's changed definition D2 is accepted (review) and the resumed
    # call runs under D2 on the strength of an approval given for D1 ("always allow" is
    # pinned to the definition; a one-time approval is not).
    tool = ConnectorTool.objects.get(connector=mail.connector, name="echo")
    real_hash = tool.definition_hash
    ConnectorTool.objects.filter(pk=tool.pk).update(definition_hash="d1" + "0" * 62)
    mail.fake.script = [tool_call(MAIL, {"text": "send the quarterly numbers"}, call_id="c1"), text("done")]
    turn = ask(mail)
    assert turn.status == TurnStatus.WAITING_APPROVAL
    approval = ToolApproval.objects.get(turn=turn)
    assert approval.definition_hash.startswith("d1")
    with django_capture_on_commit_callbacks(execute=True):
        tool_approval_decide(approval_id=approval.pk, decision="approve", actor=mail.user)
    # The admin accepts the server's new definition (what the review service stores).
    ConnectorTool.objects.filter(pk=tool.pk).update(definition_hash=real_hash)
    from chat.turns.runner import turn_run

    turn_run(turn_id=turn.pk)
    assert received(mail) == [], "a call approved for one definition ran under another"


def test_finding_the_arguments_shown_for_approval_cannot_hide_text_with_format_characters(
    mail, resumed, django_capture_on_commit_callbacks
):
    # Attack: the model writes a bidi override (U+202E) into an argument so the approval card
    # shows "pay to: liam@corp" reversed/reordered while something else is sent; the
    # approved-as-shown arguments keep control and format characters (tool descriptions get
    # them stripped by untrusted_text, the arguments a person approves do not).
    sneaky = "invoice for \u202etnuocca-eporue\u202c approved \u200b\u2066hidden\u2069"
    mail.fake.script = [tool_call(MAIL, {"text": sneaky}, call_id="c1"), text("done")]
    turn = ask(mail)
    assert turn.status == TurnStatus.WAITING_APPROVAL
    from chat.models import TurnEvent

    shown = TurnEvent.objects.get(turn=turn, type="approval.requested").payload["arguments"]
    import unicodedata

    hidden = [ch for ch in json.dumps(shown, ensure_ascii=False) if unicodedata.category(ch) in ("Cf", "Cc")]
    assert not hidden, [hex(ord(ch)) for ch in hidden]


# =====================================================================================
# Part 2 — HELD: attacks that were tried and failed.
# =====================================================================================

# --- a public-tier turn learns nothing about an internal-only connector --------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"name": "김민지"},  # a well-formed call
        {},  # missing required argument
        {"name": 5},  # wrong type
        "{not json",  # not JSON
        "[1]",  # not an object
        {"text": "x" * 5000},  # longer than the connector argument limit
    ],
)
def test_held_public_refusals_of_hidden_and_nonexistent_tools_are_identical(world, arguments):
    # Attack: probe an internal-only tool's existence by comparing refusal wording with a
    # tool that does not exist, under every argument shape the checks react to.
    hidden, o1 = world.call("crm__find_customer", arguments, tier="public")
    missing, o2 = world.call("zzz__find_customer", arguments, tier="public")
    bogus_tool, o3 = world.call("desk__no_such_tool", arguments, tier="public")
    assert hidden == missing == bogus_tool and o1 == o2 == o3 == "denied"
    assert "crm" not in json.dumps(hidden, ensure_ascii=False)
    assert world.received() == []


def test_held_tool_search_finds_nothing_of_an_internal_only_connector(world, settings):
    # Attack: search for the internal-only connector's name, tool names and description words.
    settings.OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD = 1
    with ToolSession(ctx=world.context("public")) as ctx:
        turn = connector_state(ctx)
        for query in ("crm", "crm__find_customer", "고객 CRM internal", "customer_card crm://"):
            found, outcome = world.call(TOOL_SEARCH, {"query": query}, ctx=ctx)
            assert outcome == "success"
            assert all(not t["name"].startswith("crm__") for t in found["tools"]), found
            assert "crm" not in json.dumps([t["name"] for t in found["tools"]])
        assert not {name for name in turn.loaded if name.startswith("crm__")}
        # Even if a loaded name were planted in the turn, the offer re-decides it.
        turn.loaded.add("crm__find_customer")
        offered = tool_definitions(ctx, visible_resources(user_id=world.user.pk, tier="public"))
        assert "crm__" not in json.dumps(offered, ensure_ascii=False)


def test_held_public_definitions_and_prompt_name_no_internal_connector(world):
    ctx = world.context("public")
    offered = json.dumps(tool_definitions(ctx, visible_resources(user_id=world.user.pk, tier="public")))
    assert "crm" not in offered and "hostile__" in offered


# --- spelling tricks do not reach another tool -----------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["CRM__echo", "crm__ECHO", "crm__echo ", " crm__echo", "crm___echo", "ｃｒｍ__echo", "crm__ech\u200bo"],
)
def test_held_other_spellings_of_a_tool_name_are_unknown(world, name):
    # Attack: call an approval-gated tool through a case/unicode/whitespace variant of its name.
    set_policy(world.connectors["crm"], "echo", "require_approval")
    payload, outcome = world.call(name, {"text": "hello"})
    assert outcome == "denied" and payload["error"] == f"refused: {TOOL_UNAVAILABLE}"
    assert world.received() == []


def test_held_a_nul_in_a_tool_name_refuses_alike_whether_the_tool_exists(world):
    # Attack: a NUL byte makes the decision query crash; the refusal then reads "could not be
    # checked" instead of "no tool of that name" -- but alike for a hidden and a missing tool.
    hidden, o1 = world.call("crm__echo\x00", {"text": "hello"}, tier="public")
    missing, o2 = world.call("zzz__echo\x00", {"text": "hello"}, tier="public")
    assert hidden == missing and o1 == o2 == "denied" and "crm" not in json.dumps(hidden)
    assert world.received() == []


def test_held_a_blocked_tool_cannot_be_called_or_found(world, settings):
    set_policy(world.connectors["desk"], "echo", "block")
    payload, outcome = world.call("desk__echo", {"text": "hello"})
    assert outcome == "denied" and payload["error"] == f"refused: {TOOL_UNAVAILABLE}"
    settings.OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD = 1
    with ToolSession(ctx=world.context()) as session:
        found, _ = world.call(TOOL_SEARCH, {"query": "echo return the text"}, ctx=session)
        assert "desk__echo" not in [t["name"] for t in found["tools"]]


# --- personal data in results is masked ---------------------------------------------------------


def test_held_nested_keys_links_and_resource_uris_are_masked(world):
    payload, outcome = world.call("hostile__nested", {"name": "김민지"})
    assert outcome == "success", payload
    seen = json.dumps(payload, ensure_ascii=False)
    for value in (PHONE, EMAIL, RRN, "9876-5432", "minji.kim"):
        assert value not in seen, (value, seen)


def test_held_a_raised_tool_error_is_masked_for_the_model_and_absent_from_audit(world):
    payload, outcome = world.call("hostile__raising", {"name": "김민지"})
    assert outcome == "failed", payload
    seen = json.dumps(payload, ensure_ascii=False)
    assert PHONE not in seen and EMAIL not in seen
    dumped = audit_dump()
    assert PHONE not in dumped and EMAIL not in dumped and "김민지" not in dumped


# --- arguments and results never in audit fields --------------------------------------------


def test_held_values_in_arguments_and_results_stay_out_of_audit(world):
    world.call("desk__find_customer", {"name": "비밀고객-홍길동"})
    world.call("desk__echo", {"text": "비밀본문-합병계약"})
    world.call("desk__echo", {"text": 5})  # a type refusal
    dumped = audit_dump()
    for value in ("비밀고객-홍길동", "비밀본문-합병계약", PHONE, EMAIL, RRN):
        assert value not in dumped, value


# --- tokens stay tokens -----------------------------------------------------------------------


def test_held_tokens_nested_in_arguments_are_not_reidentified(world):
    from chat.vault import DbVault

    token = DbVault(world.conversation.pk).token_for("phone", PHONE)
    payload, outcome = world.call("crm__echo", {"text": f"[{token}] ({token}){token}"})
    assert outcome == "success"
    assert world.received() == [f"[{token}] ({token}){token}"]


# --- approvals ------------------------------------------------------------------------------


def test_held_another_user_or_conversation_cannot_decide_and_expiry_refuses(
    mail, resumed, django_capture_on_commit_callbacks, django_user_model
):
    mail.fake.script = [tool_call(MAIL, {"text": "hello"}, call_id="c1"), text("done")]
    turn = ask(mail)
    approval = ToolApproval.objects.get(turn=turn)
    intruder = django_user_model.objects.create_user("red-intruder", password="pw-x-123")
    mail.role.users.add(intruder)
    with pytest.raises(ApprovalError):
        tool_approval_decide(approval_id=approval.pk, decision="approve", actor=intruder)
    # The owner's socket of another conversation (approval.decide replayed there).
    other = conversation_create(owner=mail.user)
    with pytest.raises(ApprovalError):
        tool_approval_decide(approval_id=approval.pk, decision="approve", actor=mail.user, conversation_id=other.pk)
    # After expiry.
    ToolApproval.objects.filter(pk=approval.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ApprovalError):
        tool_approval_decide(approval_id=approval.pk, decision="approve", actor=mail.user)
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.EXPIRED
    from chat.turns.runner import turn_run

    turn_run(turn_id=turn.pk)
    assert received(mail) == []


def test_held_always_allow_of_another_user_or_tool_does_not_apply(mail, resumed, django_user_model):
    other_user = django_user_model.objects.create_user("red-other", password="pw-o-123")
    echo = ConnectorTool.objects.get(connector=mail.connector, name="echo")
    note = ConnectorTool.objects.get(connector=mail.connector, name="customer_note")
    AlwaysAllow.objects.create(user=other_user, connector_tool=echo, definition_hash=echo.definition_hash)
    AlwaysAllow.objects.create(user=mail.user, connector_tool=note, definition_hash=note.definition_hash)
    # And one of this user for this tool, but for another definition.
    AlwaysAllow.objects.create(user=mail.user, connector_tool=echo, definition_hash="e" * 64)
    mail.fake.script = [tool_call(MAIL, {"text": "hello"}, call_id="c1"), text("done")]
    turn = ask(mail)
    assert turn.status == TurnStatus.WAITING_APPROVAL and received(mail) == []


def test_held_a_tool_blocked_while_waiting_does_not_run_after_approval(
    mail, resumed, django_capture_on_commit_callbacks
):
    mail.fake.script = [tool_call(MAIL, {"text": "hello"}, call_id="c1"), text("done")]
    turn = ask(mail)
    set_policy(mail.connector, "echo", "block")
    turn = decide(mail, turn, "approve", resumed, django_capture_on_commit_callbacks)
    assert received(mail) == [] and "tool.finished" in kinds(turn)
    (row,) = ToolCallAudit.objects.filter(tool=MAIL)
    assert row.outcome == "denied"


def test_held_reordered_arguments_are_the_same_call_for_the_auto_block(mail, settings):
    from chat.approvals import arguments_digest

    assert arguments_digest(MAIL, {"a": 1, "b": 2}) == arguments_digest(MAIL, {"b": 2, "a": 1})
    assert arguments_digest(MAIL, {"a": 1}) != arguments_digest("mailer__customer_note", {"a": 1})


def test_held_approval_events_carry_no_arguments(mail, resumed, django_capture_on_commit_callbacks):
    secret = f"기밀메일본문 {PHONE}"
    mail.fake.script = [tool_call(MAIL, {"text": secret}, call_id="c1"), text("done")]
    decide(mail, ask(mail), "always_allow", resumed, django_capture_on_commit_callbacks)
    mail.fake.script = [tool_call(MAIL, {"text": secret + " 2"}, call_id="c2"), text("done")]
    ask(mail, "again")
    dumped = audit_dump()
    assert "기밀메일본문" not in dumped and PHONE not in dumped
    digests = ToolApproval.objects.values_list("arguments_digest", flat=True)
    assert not [d for d in digests if d in dumped]


# --- stdio commands and secrets -----------------------------------------------------------------


def test_held_a_stdio_server_gets_only_the_named_secret(world):
    payload, outcome = world.call("hostile__env_names", {})
    assert outcome == "success", payload
    names = set(payload["content"][0]["json"])  # a JSON text arrives parsed
    assert NAMED_SECRET in names
    for secret in (UNNAMED_SECRET, "SECRET_KEY", "DATABASE_URL", "REDIS_URL", "OWLAI_TEST_MCP_RECORD"):
        assert secret not in names, secret


def test_held_a_command_outside_the_allowlist_never_runs(world):
    connector = world.connectors["hostile"]
    for command in (sys.executable, f"{sys.executable} -m tests.support.mcp_server_hostile", "people ", "PEOPLE"):
        Connector.objects.filter(pk=connector.pk).update(command=command)
        connector.refresh_from_db()
        with pytest.raises(ConnectorConfigError):
            connector_target(connector=connector)
        payload, outcome = world.call("hostile__env_names", {})
        assert outcome == "failed" and "misconfigured" in payload["error"]
        assert "tests.support" not in payload["error"] and sys.executable not in payload["error"]


def test_held_secret_headers_outside_the_connector_prefix_are_refused_at_call_time(world):
    # Set behind the admin's back (a direct update): still refused when the call is prepared.
    connector = world.connectors["crm"]
    for env_name in ("SECRET_KEY", "DATABASE_URL"):
        Connector.objects.filter(pk=connector.pk).update(secret_headers={"X-Token": env_name})
        connector.refresh_from_db()
        with pytest.raises(ConnectorConfigError):
            connector_target(connector=connector)
        payload, outcome = world.call("crm__echo", {"text": "hello"})
        assert outcome == "failed" and env_name not in payload["error"]
    assert world.received() == []


# --- the HTTP approval and always-allowed endpoints --------------------------------------------


def test_held_http_decide_needs_csrf_and_the_owner(mail, resumed, django_user_model):
    from django.test import Client
    from django.urls import reverse

    mail.fake.script = [tool_call(MAIL, {"text": "hello"}, call_id="c1"), text("done")]
    turn = ask(mail)
    approval = ToolApproval.objects.get(turn=turn)
    url = reverse("chat:approval-decide", args=[approval.pk])
    # A cross-site form post riding the owner's session.
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(mail.user)
    response = owner.post(url, {"decision": "approve"}, content_type="application/json")
    assert response.status_code == 403
    # Another signed-in user.
    intruder = django_user_model.objects.create_user("red-http-intruder", password="pw-i-123")
    other = Client()
    other.force_login(intruder)
    assert other.post(url, {"decision": "approve"}, content_type="application/json").status_code == 409
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING and received(mail) == []


def test_held_another_users_always_allow_cannot_be_listed_or_revoked(mail, django_user_model):
    from django.test import Client
    from django.urls import reverse

    echo = ConnectorTool.objects.get(connector=mail.connector, name="echo")
    grant = AlwaysAllow.objects.create(user=mail.user, connector_tool=echo, definition_hash=echo.definition_hash)
    intruder = django_user_model.objects.create_user("red-grant-intruder", password="pw-g-123")
    client = Client()
    client.force_login(intruder)
    assert client.get(reverse("chat:always-allowed")).json() == []
    assert client.delete(reverse("chat:always-allowed-revoke", args=[grant.pk])).status_code == 404
    assert client.post(reverse("chat:always-allowed-page-revoke", args=[grant.pk])).status_code == 404
    grant.refresh_from_db()
    assert grant.revoked_at is None
