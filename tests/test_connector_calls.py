"""Connector tool calls through the executor, against real SDK servers on
loopback (streamable HTTP) and as stdio subprocesses: the visibility
re-check (hidden, unknown, blocked, not allowed and changed all read "no
such tool", one denied row each, never naming an internal-only connector),
the policy, argument checks, one session per connector per turn, results
shaped like any other (personal data masked in text, structured content and
embedded resources), tokens kept as tokens in arguments, timeouts and crashes
as failed rows, one audit row per call without arguments or results."""

from __future__ import annotations

import json

import pytest
from django.utils import translation

from chat.executor import STAGES, ToolSession, tool_definitions
from chat.executor.tools.connectors import arguments_problem, connector_state
from chat.prompt import system_prompt
from chat.services import conversation_create
from governance.models import ConnectorTool, Role
from governance.services import install_config_sync
from governance.visibility import TOOL_SEARCH, TOOL_UNAVAILABLE, visible_resources
from owlai.install_config import parse_install_config
from tests.support.connector_world import (
    ALL_MODELS,
    EMAIL,
    PERSONAL,
    PHONE,
    RRN,
    World,
    add_connector,
    audit_dump,
    recording_people_server,
    set_policy,
    two_tier_config,
)
from tests.support.mcp_servers import http_server, stdio_command_toml

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(180), pytest.mark.usefixtures("english")]

CRM_SUMMARY = "고객 CRM: 연락처와 상담 기록 (internal)"


@pytest.fixture(scope="module")
def people_http(tmp_path_factory):
    with recording_people_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


@pytest.fixture(scope="module")
def hang_http():
    with http_server("hang") as server:
        yield server


@pytest.fixture
def world(settings, django_user_model, people_http, hang_http):
    settings.OWLAI_INSTALL = parse_install_config(
        two_tier_config() + stdio_command_toml("people", "people") + stdio_command_toml("crash", "crash")
    )
    install_config_sync(config=settings.OWLAI_INSTALL)
    people_http.record.unlink(missing_ok=True)  # what this test's calls send, only
    user = django_user_model.objects.create_user("conn-staff", password="pw-staff-123")
    role = Role.objects.create(name="conn-role")
    role.users.add(user)
    connectors = {
        # Internal-only (the default with a private provider), over HTTP.
        "crm": add_connector("crm", url=people_http.url, roles=[role], summary=CRM_SUMMARY),
        # Open to all models, as a stdio subprocess.
        "desk": add_connector("desk", command="people", roles=[role], exposure=ALL_MODELS),
        "slow": add_connector("slow", url=hang_http.url, roles=[role], exposure=ALL_MODELS, timeout=1),
        "boom": add_connector("boom", command="crash", roles=[role], exposure=ALL_MODELS),
        # Open, but no role of the user allows it.
        "other": add_connector("other", url=people_http.url, exposure=ALL_MODELS),
    }
    return World(user, conversation_create(owner=user), connectors, people_http.record)


def no_arguments_in_audit(*values: str) -> None:
    dumped = audit_dump()
    for value in values:
        assert value not in dumped, value


@pytest.mark.parametrize("name", ["crm__find_customer", "desk__find_customer"])
def test_a_call_passes_every_stage_and_personal_data_is_masked(world, name):
    seen: list = []
    payload, outcome = world.call(name, {"name": "김민지"}, ctx=ToolSession(ctx=world.context(), trace=seen))
    assert outcome == "success", payload
    assert [stage for tool, stage in seen if tool == name] == list(STAGES)
    text = json.dumps(payload, ensure_ascii=False)
    assert not [value for value in PERSONAL if value in text], text
    assert payload["structured"]["phone"].startswith("[전화번호-")
    assert payload["structured"]["email"].startswith("[이메일-")
    assert payload["connector"] == name.split("__")[0]
    (row,) = world.rows(name)
    assert (row.outcome, row.call_outcome) == ("started", "success")
    assert row.resource_kind == "connector" and row.resource_name == name.split("__")[0]
    assert row.resource_id == world.connectors[name.split("__")[0]].pk
    assert row.actor_id == world.user.pk and row.origin == "chat"
    assert row.conversation_id == world.conversation.pk and row.turn_id and row.duration_ms > 0
    assert row.sql_text == "" and row.tables == []
    no_arguments_in_audit("김민지", PHONE, EMAIL)


def test_text_and_embedded_resources_are_shaped_too(world):
    note, outcome = world.call("crm__customer_note", {"name": "김민지"})
    assert outcome == "success"
    card, _ = world.call("crm__customer_card", {"name": "김민지"})
    for payload in (note, card):
        text = json.dumps(payload, ensure_ascii=False)
        assert PHONE not in text and EMAIL not in text
    # The same value is the same token across calls of the conversation.
    token = card["content"][0]["text"].split()[-1]
    assert token.startswith("[전화번호-") and token in note["content"][0]["text"]
    assert card["content"][0]["type"] == "resource" and card["content"][0]["uri"].startswith("crm://")


def test_an_error_result_is_a_failed_outcome_whose_text_is_masked(world):
    payload, outcome = world.call("crm__failing_lookup", {"name": "김민지"})
    assert outcome == "failed"
    text = json.dumps(payload, ensure_ascii=False)
    assert "[전화번호-" in text and PHONE not in text
    (row,) = world.rows("crm__failing_lookup")
    assert row.call_outcome == "failed" and row.call_reason == "the connector's tool reported an error"


REFUSALS = [
    # (tier, tool, why the audit row says it was refused)
    ("public", "crm__find_customer", "connector hidden from this tier"),
    ("private", "crm__no_such_tool", "unknown tool"),
    ("private", "nothing__here", "unknown tool"),
    ("private", "other__find_customer", "connector not allowed for the user's roles"),
    ("private", "desk__echo", "tool blocked by policy"),
    ("private", "desk__customer_note", "tool definition changed, awaiting review"),
]


def test_hidden_unknown_not_allowed_blocked_and_changed_read_the_same(world, people_http):
    set_policy(world.connectors["desk"], "echo", "block")
    ConnectorTool.objects.filter(connector=world.connectors["desk"], name="customer_note").update(
        state="changed", pending_hash="f" * 64
    )
    seen_by_model = set()
    for tier, name, reason in REFUSALS:
        seen: list = []
        session = ToolSession(ctx=world.context(tier), trace=seen)
        payload, outcome = world.call(name, {"name": "김민지", "text": "hello"}, ctx=session)
        assert outcome == "denied"
        assert [stage for _, stage in seen] == [STAGES[0]]  # refused at the visibility stage: nothing ran
        seen_by_model.add(payload["error"])
        (row,) = world.rows(name)
        assert row.outcome == "denied" and row.reason == reason and row.resource_id is None
    assert seen_by_model == {f"refused: {TOOL_UNAVAILABLE}"}
    # A public turn's refusal names neither the connector nor its tool.
    assert "crm" not in seen_by_model.pop()
    assert world.received() == []


def test_the_policy_blocks_or_asks(world):
    set_policy(world.connectors["desk"], "customer_note", "require_approval")
    from chat.context import TurnContext

    # A call that needs approval, outside a stored turn: nobody can be asked.
    ctx = TurnContext(
        user_id=world.user.pk, username="x", tier="private", model_name="m", provider_name="p",
        conversation_id=None, turn_id=None,
    )  # fmt: skip
    from chat.approvals import ConnectorApprovalGate

    # The chat gate itself refuses (no turn to wait), as does a session without a gate.
    session = ToolSession(ctx=ctx, approvals=ConnectorApprovalGate())
    payload, outcome = world.call("desk__customer_note", {"name": "김민지"}, ctx=session)
    assert outcome == "denied" and "approval" in payload["error"]
    payload, outcome = world.call("desk__customer_note", {"name": "김민지"}, ctx=ctx)
    assert outcome == "denied" and "approval" in payload["error"]


def test_arguments_must_have_the_schemas_shape_and_size(world, settings):
    cases = [
        ({}, "missing required argument text"),
        ({"text": 5}, "argument text must be of type string"),
        ("[1, 2]", "arguments must be a JSON object"),
        ("{not json", "arguments are not valid JSON"),
    ]
    for arguments, reason in cases:
        payload, outcome = world.call("crm__echo", arguments)
        assert outcome == "denied" and reason in payload["error"], payload
    settings.OWLAI_CONNECTOR_ARGUMENT_MAX_CHARS = 50
    payload, outcome = world.call("crm__echo", {"text": "x" * 60})
    assert outcome == "denied" and "longer than 50" in payload["error"]
    assert [r.outcome for r in world.rows("crm__echo")] == ["denied"] * 5
    assert world.received() == []  # nothing reached the server


def test_the_basic_shape_check():
    schema = {
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "cc": {"type": "array", "items": {"type": "string"}},
            "meta": {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False},
        },
        "required": ["to"],
        "additionalProperties": False,
    }
    assert arguments_problem({"to": "a", "cc": ["b"], "meta": {"n": 1}}, schema) is None
    bad = [{"cc": []}, {"to": 1}, {"to": "a", "bcc": "x"}, {"to": "a", "cc": [1]}, {"to": "a", "meta": {"n": True}}]
    assert [arguments_problem(args, schema).for_audit() for args in bad] == [
        "missing required argument to",
        "argument to must be of type string",
        "unknown argument (not recorded)",  # the name is the model's own text
        "argument cc[0] must be of type string",
        "argument meta.n must be of type integer",
    ]
    with translation.override("en"):
        assert arguments_problem(bad[2], schema).for_model() == "unknown argument bcc"


def test_tokens_in_arguments_stay_tokens(world):
    from chat.vault import DbVault

    token = DbVault(world.conversation.pk).token_for("phone", PHONE)
    payload, outcome = world.call("crm__echo", {"text": f"call {token} please"})
    assert outcome == "success"
    assert world.received() == [f"call {token} please"]  # the server got the token, never the phone
    assert payload["content"][0]["text"] == f"call {token} please"


def test_a_hanging_call_fails_with_a_clear_message(world):
    payload, outcome = world.call("slow__hang", {})
    assert outcome == "failed"
    assert payload["error"] == "the connector call failed: timed out after 1 s waiting for the connector's answer"
    (row,) = world.rows("slow__hang")
    assert row.call_outcome == "failed" and "timed out" in row.call_reason


def test_a_crash_mid_call_fails_and_the_next_call_gets_a_new_session(world):
    with ToolSession(ctx=world.context()) as session:
        payload, outcome = world.call("boom__crash", {}, ctx=session)
        assert outcome == "failed" and "stopped or closed the connection" in payload["error"]
        assert world.call("boom__quick", {}, ctx=session)[1] == "success"
    assert [r.call_outcome for r in world.rows()] == ["failed", "success"]


def test_one_session_per_connector_is_reused_by_the_turns_calls_and_closed_at_its_end(world):
    with ToolSession(ctx=world.context()) as session:
        pids = {world.call("desk__whoami", {}, ctx=session)[0]["content"][0]["text"] for _ in range(3)}
        world.call("crm__echo", {"text": "hello"}, ctx=session)
        turn = connector_state(session)
        sessions = turn.sessions()
        assert len(pids) == 1 and len(sessions._open) == 2  # desk (stdio) and crm (HTTP): one each
    assert sessions._open == {} and turn._sessions is None
    with ToolSession(ctx=world.context()) as session:
        # The next turn starts its own stdio server process.
        assert world.call("desk__whoami", {}, ctx=session)[0]["content"][0]["text"] not in pids


def test_a_changed_definition_on_the_server_sends_nothing(world):
    ConnectorTool.objects.filter(connector=world.connectors["crm"], name="echo").update(definition_hash="0" * 64)
    payload, outcome = world.call("crm__echo", {"text": "hello"})
    assert outcome == "failed" and "review" in payload["error"]
    assert world.received() == []


def test_the_turn_is_offered_what_it_may_see_and_the_prompt_lists_connectors(world):
    private = tool_definitions(world.context("private"), visible_resources(user_id=world.user.pk, tier="private"))
    public = tool_definitions(world.context("public"), visible_resources(user_id=world.user.pk, tier="public"))
    names = {d["function"]["name"] for d in private}
    assert {"crm__find_customer", "desk__find_customer", "slow__quick"} <= names
    assert not {n for n in names if n.startswith("other__")}
    public_text = json.dumps(public, ensure_ascii=False)
    assert "crm" not in public_text and "desk__find_customer" in public_text
    prompt = system_prompt(visible_resources(user_id=world.user.pk, tier="private"))
    assert CRM_SUMMARY in prompt and "- desk:" in prompt
    public_prompt = system_prompt(visible_resources(user_id=world.user.pk, tier="public"))
    assert CRM_SUMMARY not in public_prompt and "crm" not in public_prompt
    assert "other" in public_prompt  # open, not allowed: named as existing but not permitted


def test_past_the_threshold_the_search_tool_loads_what_it_finds(world, settings):
    settings.OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD = 1
    with ToolSession(ctx=world.context("public")) as ctx:
        turn = connector_state(ctx)
        offered = tool_definitions(ctx, visible_resources(user_id=world.user.pk, tier="public"))
        assert [d["function"]["name"] for d in offered] == [TOOL_SEARCH]
        found, outcome = world.call(TOOL_SEARCH, {"query": "customer contact"}, ctx=ctx)
        assert outcome == "success"
        names = [t["name"] for t in found["tools"]]
        assert names and all(n.startswith("desk__") for n in names)  # never the internal-only crm
        assert turn.loaded == set(names)
        offered = tool_definitions(ctx, visible_resources(user_id=world.user.pk, tier="public"))
        assert {d["function"]["name"] for d in offered} == {TOOL_SEARCH, *names}
        assert world.call(names[0], {"name": "김민지"}, ctx=ctx)[1] == "success"
    settings.OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD = 100
    payload, outcome = world.call(TOOL_SEARCH, {"query": "customer"})
    assert outcome == "denied" and payload["error"] == f"refused: {TOOL_UNAVAILABLE}"  # not offered


def test_refusals_reach_the_model_in_the_turns_language(world):
    with translation.override("ko"):
        payload, outcome = world.call("nothing__here", {})
        assert outcome == "denied" and TOOL_UNAVAILABLE not in payload["error"]
    assert world.rows("nothing__here")[0].reason == "unknown tool"
    no_arguments_in_audit(RRN)
