"""Every registered tool passes every stage of the executor's pipeline, in
order; a refused call stops before anything runs and leaves one denied row;
whatever a tool's run returns is shaped before the model sees it. The test
walks the registry, the connector tool source included (its tools against
the real people MCP server on loopback): a new tool without an example here
fails it."""

from __future__ import annotations

import json

import pytest

from audit.models import ToolCallAudit
from chat.context import TurnContext
from chat.executor import REGISTRY, STAGES, Output, Stage
from chat.executor.policy import ApprovalSuspends, Decision
from chat.executor.reasons import Reason
from chat.executor.registry import IncompleteTool, Registry
from chat.executor.tools.connectors import ConnectorCall
from tests.support.connector_world import ALL_MODELS, add_connector
from tests.support.mcp_servers import http_server
from tests.support.tool_world import tool_world

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

PHONE = "010-7777-8888"
SECRET_URL = "https://user:hunter2@files.example.com/report.pdf"


def search_offered(world, arguments, *, offered: bool = True):
    """The tool search is offered (and callable) past the threshold only."""
    world.settings.OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD = 0 if offered else 1000
    return arguments


# One tool stands for every tool of the connector source (ConnectorCall):
# `desk` is a connector the staff role allows, `secret` one it does not.
CONNECTOR_EXAMPLE = "desk__customer_note"

# For each tool: (an allowed call, a call its own checks refuse, a call whose
# target does not exist or may not be seen), as functions of the world. A
# function may return (another tool name, arguments): a connector tool's
# name is its target.
EXAMPLES = {
    "run_sql": (
        lambda w: {"connection": "sales", "sql": "SELECT city, count(*) FROM customers GROUP BY city"},
        lambda w: {"connection": "sales", "sql": "DELETE FROM customers"},
        lambda w: {"connection": "hr_secret", "sql": "SELECT 1"},
    ),
    "search_documents": (
        lambda w: {"collection": "manuals", "query": "환불"},
        lambda w: {"collection": "manuals", "query": "   "},
        lambda w: {"collection": "no_such_collection", "query": "환불"},
    ),
    "read_spill": (
        lambda w: {"file": w.spill()["spilled"]["file"], "offset": 1, "limit": 2},
        lambda w: {"file": w.spill()["spilled"]["file"], "offset": -1},
        lambda w: {"file": "../../../etc/passwd"},
    ),
    CONNECTOR_EXAMPLE: (
        lambda w: {"name": "김민지"},
        lambda w: {"name": 5},
        lambda w: ("secret__customer_note", {"name": "김민지"}),
    ),
    "search_connector_tools": (
        lambda w: search_offered(w, {"query": "customer"}),
        lambda w: search_offered(w, {"query": "   "}),
        lambda w: search_offered(w, {"query": "customer"}, offered=False),
    ),
}
TOOLS = sorted(EXAMPLES)
# What the audit row says of the hidden example (default: the tool's words).
HIDDEN_AUDIT_REASON = {CONNECTOR_EXAMPLE: "connector not allowed for the user's roles"}


@pytest.fixture(scope="module")
def people_http():
    with http_server("people") as server:
        yield server


@pytest.fixture
def world(personas, settings, tmp_path, people_http):
    w = tool_world(personas, settings, tmp_path)
    add_connector("desk", url=people_http.url, roles=[personas.role], exposure=ALL_MODELS)
    add_connector("secret", url=people_http.url, exposure=ALL_MODELS)
    return w


_ANY_TURN = TurnContext(
    user_id=0, username="", tier="private", model_name="m", provider_name="p", conversation_id=None, turn_id=None
)


def tool(name):
    found = REGISTRY.find(_ANY_TURN, name)
    assert found is not None, name
    return found


def patch(monkeypatch, name, part, value):
    """Replace a part of a tool. A source hands out a new object per call
    (connector tools): their class is patched, methods as plain functions."""
    found = tool(name)
    if isinstance(found, ConnectorCall):
        monkeypatch.setattr(ConnectorCall, part, staticmethod(value) if callable(value) else value)
    else:
        monkeypatch.setattr(found, part, value)


def example(world, name, index):
    """(the tool name to call, its arguments) of one example."""
    made = EXAMPLES[name][index](world)
    return made if isinstance(made, tuple) else (name, made)


def stages_of(seen, name) -> list[Stage]:
    return [stage for tool_name, stage in seen if tool_name == name]


def rows_of(world, name) -> list[ToolCallAudit]:
    return list(ToolCallAudit.objects.filter(conversation_id=world.conversation.pk, tool=name).order_by("id"))


def test_every_registered_tool_has_examples_here(world):
    assert [t.name for t in REGISTRY.tools()] == ["run_sql", "search_documents", "read_spill"]
    every = REGISTRY.tools(world.context())
    connector_tools = {t.name for t in every if isinstance(t, ConnectorCall)}
    assert CONNECTOR_EXAMPLE in connector_tools and "desk__find_customer" in connector_tools
    assert not [name for name in connector_tools if name.startswith("secret__")]  # not allowed: not handed out
    assert {t.name for t in every if not isinstance(t, ConnectorCall)} | {CONNECTOR_EXAMPLE} == set(EXAMPLES)


@pytest.mark.parametrize("name", TOOLS)
def test_an_allowed_call_passes_every_stage_in_order(world, name):
    name, arguments = example(world, name, 0)
    seen: list = []
    payload, outcome = world.call(name, arguments, trace=seen)
    assert outcome == "success", payload
    assert stages_of(seen, name) == list(STAGES)
    row = rows_of(world, name)[-1]
    # The attempt was recorded before it ran; the outcome is a second record.
    assert (row.outcome, row.call_outcome) == ("started", "success")
    assert row.resource_kind == tool(name).resource_kind


@pytest.mark.parametrize("name", TOOLS)
def test_a_call_refused_by_its_checks_stops_before_the_attempt(world, name, monkeypatch):
    name, arguments = example(world, name, 1)
    ran = []
    patch(monkeypatch, name, "run", lambda call: ran.append(call))
    seen: list = []
    payload, outcome = world.call(name, arguments, trace=seen)
    assert outcome == "denied" and payload["error"].startswith("refused:")
    assert stages_of(seen, name) == [Stage.VISIBILITY, Stage.POLICY, Stage.CHECKS]
    assert ran == []
    assert [r.outcome for r in rows_of(world, name)][-1] == "denied"


@pytest.mark.parametrize("name", TOOLS)
def test_a_hidden_or_missing_target_is_refused_at_visibility(world, name, monkeypatch):
    called, arguments = example(world, name, 2)
    patch(monkeypatch, name, "run", lambda call: pytest.fail("ran"))
    seen: list = []
    payload, outcome = world.call(called, arguments, trace=seen)
    assert outcome == "denied"
    assert stages_of(seen, called) == [Stage.VISIBILITY]
    assert payload["error"] == f"refused: {tool(name).unavailable.for_model()}"
    (row,) = rows_of(world, called)
    assert row.outcome == "denied" and row.resource_id is None
    assert row.reason == HIDDEN_AUDIT_REASON.get(name, tool(name).unavailable.msgid)


# Tools whose target is reached through a grant (read_spill reads back the
# run's own masked spill, which its grant-checked call already produced).
GRANTED_TOOLS = [name for name in TOOLS if name != "read_spill"]


@pytest.mark.parametrize("name", GRANTED_TOOLS)
def test_a_person_deactivated_mid_run_gets_nothing_from_the_next_call(world, name, monkeypatch):
    """The grants are re-read before every call and count only for an
    active account: a run in flight (a chat turn, a playbook step) of a
    person deactivated meanwhile is refused from its next call on."""
    called, arguments = example(world, name, 0)
    payload, outcome = world.call(called, arguments)
    assert outcome == "success", payload
    type(world.personas.staff).objects.filter(pk=world.personas.staff.pk).update(is_active=False)
    patch(monkeypatch, name, "run", lambda call: pytest.fail("ran"))
    seen: list = []
    payload, outcome = world.call(called, arguments, trace=seen)
    assert outcome == "denied", payload
    assert stages_of(seen, called) == [Stage.VISIBILITY]


class _Deny:
    def decide(self, call):
        return Decision.deny(Reason("blocked by the install's tool policy"))


class _NeedsApproval:
    def decide(self, call):
        return Decision.needs_approval()


@pytest.mark.parametrize("name", TOOLS)
def test_the_policy_stage_refuses_before_the_checks(world, name, monkeypatch):
    name, arguments = example(world, name, 0)
    patch(monkeypatch, name, "policy", _Deny())
    patch(monkeypatch, name, "check", lambda call: pytest.fail("checked"))
    seen: list = []
    payload, outcome = world.call(name, arguments, trace=seen)
    assert outcome == "denied" and "blocked by the install's tool policy" in payload["error"]
    assert stages_of(seen, name) == [Stage.VISIBILITY, Stage.POLICY]
    assert rows_of(world, name)[-1].reason == "blocked by the install's tool policy"


@pytest.mark.parametrize("name", TOOLS)
def test_needs_approval_without_a_gate_is_denied_and_a_gate_may_suspend(world, name, monkeypatch):
    name, arguments = example(world, name, 0)
    before = len(rows_of(world, name))
    patch(monkeypatch, name, "policy", _NeedsApproval())
    # No gate in the session: nobody can be asked (the runner gives a chat run its gate).
    payload, outcome = world.call(name, arguments)
    assert outcome == "denied" and "approval" in payload["error"]

    class Suspend:
        def request(self, call, decision):
            raise ApprovalSuspends(call.tool.name)

    with pytest.raises(ApprovalSuspends):
        world.call(name, arguments, approvals=Suspend())
    # Denied once (a row); suspended: nothing ran and nothing was recorded yet.
    assert [r.outcome for r in rows_of(world, name)[before:]] == ["denied"]

    class Approve:
        def request(self, call, decision):
            return Decision.allow()

    assert world.call(name, arguments, approvals=Approve())[1] == "success"


@pytest.mark.parametrize("name", TOOLS)
def test_an_approval_is_asked_after_the_checks_and_before_the_attempt(world, name, monkeypatch):
    """The declared order is the order that runs: the argument checks, then
    the approval stage, then the attempt row (nothing reaches the target
    unapproved, and nobody is asked about a call its checks refuse)."""
    name, arguments = example(world, name, 0)
    patch(monkeypatch, name, "policy", _NeedsApproval())
    asked = []

    class Approve:
        def request(self, call, decision):
            asked.append(call.tool.name)
            call.session.enter(call.tool.name, "gate asked")
            return Decision.allow()

    seen: list = []
    assert world.call(name, arguments, approvals=Approve(), trace=seen)[1] == "success"
    assert STAGES.index(Stage.CHECKS) < STAGES.index(Stage.APPROVAL) < STAGES.index(Stage.ATTEMPT)
    order = stages_of(seen, name)
    assert order == [*STAGES[: STAGES.index(Stage.ATTEMPT)], "gate asked", *STAGES[STAGES.index(Stage.ATTEMPT) :]]
    assert order.index(Stage.CHECKS) < order.index("gate asked") < order.index(Stage.ATTEMPT)

    refused_name, refused_arguments = example(world, name, 1)
    seen = []
    payload, outcome = world.call(refused_name, refused_arguments, approvals=Approve(), trace=seen)
    assert outcome == "denied" and asked == [name]  # refused by its checks: never put to the gate
    assert stages_of(seen, refused_name) == [Stage.VISIBILITY, Stage.POLICY, Stage.CHECKS]


@pytest.mark.parametrize("name", TOOLS)
def test_a_crash_in_a_check_refuses(world, name, monkeypatch):
    name, arguments = example(world, name, 0)

    def crash(call):
        raise RuntimeError("bug")

    patch(monkeypatch, name, "check", crash)
    payload, outcome = world.call(name, arguments)
    assert outcome == "denied"
    assert rows_of(world, name)[-1].reason == "internal error during checks"


@pytest.mark.parametrize("name", TOOLS)
def test_no_attempt_row_means_nothing_runs(world, name, monkeypatch):
    from audit.services import AuditWriteError

    name, arguments = example(world, name, 0)
    patch(monkeypatch, name, "run", lambda call: pytest.fail("ran without its attempt row"))

    def refuse(row):
        raise RuntimeError("audit table locked")

    monkeypatch.setattr("audit.services._insert", refuse)
    seen: list = []
    with pytest.raises(AuditWriteError):
        world.call(name, arguments, trace=seen)
    assert stages_of(seen, name)[-1] is Stage.ATTEMPT


@pytest.mark.parametrize("name", TOOLS)
def test_a_crash_while_running_is_a_failed_outcome(world, name, monkeypatch):
    name, arguments = example(world, name, 0)

    def crash(call):
        raise RuntimeError(f"boom {PHONE}")

    patch(monkeypatch, name, "run", crash)
    payload, outcome = world.call(name, arguments)
    assert outcome == "failed" and PHONE not in json.dumps(payload)
    row = rows_of(world, name)[-1]
    assert row.call_outcome == "failed" and PHONE not in row.call_reason


@pytest.mark.parametrize("name", TOOLS)
def test_whatever_a_tool_returns_is_shaped(world, name, monkeypatch):
    """A tool cannot hand the model anything unshaped: its output goes
    through binary markers, URL references, known values and detectors."""
    name, arguments = example(world, name, 0)
    real_run = tool(name).run

    def leaky(call):
        output = real_run(call)
        output.payload["extra"] = {f"memo {PHONE}": [b"\x00\x01", f"see {SECRET_URL}"]}
        return output

    patch(monkeypatch, name, "run", leaky)
    payload, outcome = world.call(name, arguments)
    assert outcome == "success"
    text = json.dumps(payload, ensure_ascii=False)
    assert PHONE not in text and "hunter2" not in text
    (key, values), *_ = payload["extra"].items()
    assert key.startswith("memo [전화번호-") and values[0] == "<binary 2 bytes>"
    assert values[1].startswith("see [URL-")


@pytest.mark.parametrize("name", TOOLS)
def test_facts_are_numbers_or_flags_only(world, name, monkeypatch):
    name, arguments = example(world, name, 0)
    real_run = tool(name).run

    def smuggling(call):
        output = real_run(call)
        output.facts["note"] = PHONE
        return output

    patch(monkeypatch, name, "run", smuggling)
    # Refused by the shaping stage: the result is withheld (never shown with
    # the smuggled value) and the audit outcome says nobody received it.
    payload, outcome = world.call(name, arguments)
    assert outcome == "failed" and PHONE not in json.dumps(payload, ensure_ascii=False)
    assert ToolCallAudit.objects.order_by("-id").first().final.reason == "shaping error: TypeError"


def test_an_incomplete_tool_cannot_be_registered():
    class NoRun:
        name = "half_built"
        resource_kind = "x"
        target_argument = None
        result_key = "x"
        unavailable = failed = Reason("x")
        policy = _Deny()

        def definition(self, offer):
            return None

        def audit_statement(self, args):
            return ""

        def resolve(self, ctx, name):
            return None

        def check(self, call):
            pass

        def prepare(self, call):
            pass

        def lineage(self, call, output):
            return None

    with pytest.raises(IncompleteTool, match="run"):
        Registry().register(NoRun())
    with pytest.raises(ValueError, match="already registered"):
        REGISTRY.register(tool("run_sql"))


class _Echo:
    """A tool handed out by a source (as connectors will be): the same stages."""

    name = "echo_note"
    resource_kind = "connector"
    target_argument = None
    result_key = "connector"
    unavailable = Reason("no such connector")
    failed = Reason("echo failed")
    run_state = None

    def __init__(self, policy):
        self.policy = policy

    def definition(self, offer):
        return {"type": "function", "function": {"name": self.name, "parameters": {"type": "object"}}}

    def audit_statement(self, args):
        return ""  # connector arguments are never recorded

    def summary(self, args):
        return {}

    def resolve(self, ctx, name):
        from chat.executor import Target

        return Target(name="notes", pk=None, resource=None)

    def check(self, call):
        pass

    def prepare(self, call):
        pass

    def run(self, call):
        return Output(payload={"text": f"call {call.args.get('who')} at {PHONE}"}, row_count=1)

    def lineage(self, call, output):
        return None


class _Source:
    def __init__(self, tool):
        self.tool = tool

    def find(self, ctx, name):
        return self.tool if name == self.tool.name else None

    def definitions(self, offer):
        return [self.tool.definition(offer)]

    def tools(self, ctx):
        return [self.tool]


@pytest.fixture
def echo_source():
    from chat.executor.policy import ALWAYS_ALLOW

    source = REGISTRY.add_source(_Source(_Echo(ALWAYS_ALLOW)))
    yield source
    REGISTRY._sources.remove(source)


def test_a_tool_from_a_source_passes_the_same_stages(world, echo_source):
    assert "echo_note" in [t.name for t in REGISTRY.tools(world.context())]
    seen: list = []
    payload, outcome = world.call("echo_note", {"who": "민준"}, trace=seen)
    assert outcome == "success" and stages_of(seen, "echo_note") == list(STAGES)
    assert PHONE not in payload["text"] and payload["connector"] == "notes"
    (row,) = rows_of(world, "echo_note")
    assert row.call_outcome == "success" and row.sql_text == "" and "민준" not in json.dumps(row.reason)


def test_an_incomplete_tool_from_a_source_is_an_unknown_tool(world):
    from chat.executor.policy import ALWAYS_ALLOW

    class Broken(_Echo):
        run = None  # the source hands out a tool without a run

    source = REGISTRY.add_source(_Source(Broken(ALWAYS_ALLOW)))
    try:
        payload, outcome = world.call("echo_note", {})
    finally:
        REGISTRY._sources.remove(source)
    assert outcome == "denied" and "unknown tool" in payload["error"]


@pytest.mark.parametrize("name", TOOLS)
def test_the_model_reads_the_turns_language_the_audit_reads_english(world, name):
    """The worker runs a turn in its user's language: refusals reach the
    model (and through it the user) in that language, while the audit row
    keeps the English words, the same whoever made the call."""
    from django.utils import translation

    called, arguments = example(world, name, 2)
    with translation.override("ko"):
        payload, outcome = world.call(called, arguments)
    assert outcome == "denied"
    unavailable = tool(name).unavailable
    with translation.override("ko"):
        assert payload["error"] == f"거부됨: {unavailable.for_model()}"
        assert unavailable.for_model() != unavailable.msgid  # really translated
    assert rows_of(world, called)[-1].reason == HIDDEN_AUDIT_REASON.get(name, unavailable.msgid)
