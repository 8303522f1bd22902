"""The explicit tool session (chat.executor.session): one per run, passed
down to the executor; each tool's per-run state opened on first use and
closed with the session; stored in a waiting run's loop state and restored
on resume (the tools it loaded, the approval it waited on); the agent loop
and the runner know no tool family."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from chat.context import TurnContext
from chat.executor import ToolSession
from chat.executor.session import Offer, session_of
from chat.models import ApprovalStatus, ToolApproval, TurnStatus
from governance.visibility import TOOL_SEARCH
from tests import test_approvals as approvals
from tests.support.fake_llm import text, tool_call
from tests.test_approvals import MAIL, ask, decide, received

# The approvals world (a chat user, a connector whose echo needs approval).
fake, people_http, resumed, world = approvals.fake, approvals.people_http, approvals.resumed, approvals.world

ROOT = Path(__file__).resolve().parent.parent
CTX = TurnContext(
    user_id=1, username="u", tier="private", model_name="m", provider_name="p", conversation_id=None, turn_id=1
)


class _State:
    def __init__(self, stored, log):
        self.items = list(stored or [])
        self.log = log

    def as_json(self):
        return self.items or None

    def close(self):
        self.log.append(("closed", self.items[:]))
        if "fail-close" in self.items:
            raise RuntimeError("close failed")


def _kind(key, log):
    class Kind:
        pass

    kind = Kind()
    kind.key = key
    kind.open = lambda stored: (log.append(("opened", key, stored)), _State(stored, log))[1]
    return kind


def test_a_state_is_opened_once_per_session_and_closed_with_it():
    log: list = []
    notes = _kind("notes", log)
    with ToolSession(ctx=CTX) as session:
        first = session.state(notes)
        first.items.append("a")
        assert session.state(notes) is first
        assert log == [("opened", "notes", None)]
    assert log[-1] == ("closed", ["a"])
    # Another session (another run) opens its own.
    with ToolSession(ctx=CTX) as other:
        assert other.state(notes) is not first


def test_a_state_that_fails_to_close_does_not_keep_the_others_open():
    log: list = []
    broken, fine = _kind("broken", log), _kind("fine", log)
    session = ToolSession(ctx=CTX)
    session.state(broken).items.append("fail-close")
    session.state(fine).items.append("x")
    session.close()
    assert [entry for entry in log if entry[0] == "closed"] == [("closed", ["fail-close"]), ("closed", ["x"])]


def test_the_session_round_trips_through_its_stored_json():
    log: list = []
    notes, empty = _kind("notes", log), _kind("empty", log)
    session = ToolSession(ctx=CTX)
    session.state(notes).items.extend(["a", "b"])
    session.state(empty)
    stored = session.as_json(waiting_for="42")
    session.close()
    assert stored == {"states": {"notes": ["a", "b"]}, "approval_id": "42"}
    assert session.as_json() == {"states": {"notes": ["a", "b"]}, "approval_id": None}  # after close too

    gate = object()
    restored = ToolSession.from_json(CTX, stored, approvals=gate)
    assert (restored.resuming, restored.approvals, restored.ctx) == ("42", gate, CTX)
    assert restored.state(notes).items == ["a", "b"]
    assert log[-1] == ("opened", "notes", ["a", "b"])
    # A state the resumed run never opens is still kept when it waits again.
    again = ToolSession.from_json(CTX, stored)
    assert again.as_json(waiting_for="43") == {"states": {"notes": ["a", "b"]}, "approval_id": "43"}


@pytest.mark.parametrize("value", [None, [], "x", {"states": []}, {"states": {}, "approval_id": 7}])
def test_anything_but_a_stored_session_is_refused(value):
    with pytest.raises(ValueError):
        ToolSession.from_json(CTX, value)


def test_a_bare_context_is_a_one_call_session_without_a_gate():
    session = session_of(CTX)
    assert session.ctx is CTX and session.approvals is None and session.resuming is None
    assert session_of(session) is session
    assert Offer(session=session, resources=None).ctx is CTX


def _code_strings(path: Path) -> set[str]:
    """Every string constant in the module's code (docstrings aside) and
    every module it imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }
    found |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    found |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return found


@pytest.mark.parametrize("module", ["chat/agent.py", "chat/turns/runner.py"])
def test_the_loop_and_the_runner_know_no_tool_family(module):
    strings = _code_strings(ROOT / module)
    family = {"sql", "query", "connection", "collection", "run_sql", "search_documents", "read_spill", "loaded"}
    assert not strings & family
    assert not [s for s in strings if "connector" in s or s.startswith("chat.executor.tools")]


def test_a_waiting_run_stores_its_session_and_the_resumed_run_restores_it(
    world, settings, resumed, django_capture_on_commit_callbacks
):
    """The tools the run loaded through the tool search and the approval it
    waits on travel in the stored session: the resumed run applies the
    decision (the call runs once) and is still offered what it loaded."""
    settings.OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD = 1
    world.fake.script = [
        tool_call(TOOL_SEARCH, {"query": "echo return the text"}, call_id="call_search"),
        tool_call(MAIL, {"text": "안녕하세요"}, call_id="call_mail"),
        text("보냈습니다."),
    ]
    turn = ask(world)
    assert turn.status == TurnStatus.WAITING_APPROVAL
    approval = ToolApproval.objects.get(turn=turn, status=ApprovalStatus.PENDING)
    stored = turn.loop_state
    assert stored["session"]["approval_id"] == str(approval.pk)
    assert MAIL in stored["session"]["states"]["connectors"]["loaded"]
    assert "loaded" not in stored and "approval_id" not in stored  # only inside the session
    assert received(world) == []

    turn = decide(world, turn, "approve", resumed, django_capture_on_commit_callbacks)
    assert turn.status == TurnStatus.COMPLETED
    assert received(world) == ["안녕하세요"]
    # The model call after the resumed tool call was offered the loaded tool.
    offered = {tool["function"]["name"] for tool in world.fake.requests[-1]["tools"]}
    assert {TOOL_SEARCH, MAIL} <= offered
