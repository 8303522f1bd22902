"""A stopping worker's turn, in-process (chat.turns.handover): handed over
between model calls (nothing pending) and before a tool call (the call not
yet announced), stored queued with its state, and continued by the next
run where it stopped: every tool call runs once, every step is shown once."""

from __future__ import annotations

import pytest

from audit.models import ToolCallAudit
from chat.models import Turn, TurnStatus
from chat.services import conversation_create
from chat.turns import handover
from chat.turns.runner import turn_inputs, turn_run
from chat.turns.start import turn_start
from tests.support.fake_llm import text, tool_call
from tests.test_turn import events, fake, scripted_models, types  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

SQL = "SELECT count(*) AS n FROM customers"


@pytest.fixture
def stopping(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr("chat.turns.dispatch.send", sent.append)
    yield sent
    handover.reset()


def _stop_during(reply):
    """A scripted step that tells the worker to stop while the model answers."""

    def serve(body):
        handover.begin(grace_seconds=3600)
        return reply

    return serve


def _stopping_after(inputs):
    """The worker is told to stop while the turn's inputs are built (once)."""
    told = []

    def build(**kwargs):
        built = inputs(**kwargs)
        if not told:
            told.append(True)
            handover.begin(grace_seconds=3600)
        return built

    return build


@pytest.mark.parametrize(
    "stop_while", ["model call before a tool call", "model call after a tool call", "before any model call"]
)
def test_a_handed_over_turn_continues_where_it_stopped(
    personas,
    scripted_models,  # noqa: F811
    fake,  # noqa: F811
    events,  # noqa: F811
    stopping,
    stop_while,
    django_capture_on_commit_callbacks,
    monkeypatch,
):
    first = tool_call("run_sql", {"connection": "sales", "sql": SQL}, call_id="call_a")
    second = tool_call("run_sql", {"connection": "sales", "sql": SQL}, call_id="call_b")
    if stop_while == "model call before a tool call":
        fake.script = [_stop_during(first), second, text("3명입니다.")]
    elif stop_while == "before any model call":
        fake.script = [first, second, text("3명입니다.")]
        monkeypatch.setattr("chat.turns.runner.turn_inputs", _stopping_after(turn_inputs))
    else:
        fake.script = [first, _stop_during(second), text("3명입니다.")]
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="고객 수?", model=None)

    with django_capture_on_commit_callbacks(execute=True):
        turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.QUEUED and turn.loop_state is not None
    assert stopping == [turn.pk]  # passed on to the broker for another worker
    ran_here = ToolCallAudit.objects.count()
    assert ran_here == (1 if stop_while == "model call after a tool call" else 0)
    # A message this worker takes meanwhile goes back unclaimed.
    turn_run(turn_id=turn.pk)
    assert Turn.objects.get(pk=turn.pk).status == TurnStatus.QUEUED and stopping == [turn.pk, turn.pk]

    handover.reset()  # another worker
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.COMPLETED, turn.error
    assert turn.loop_state is None
    assert ToolCallAudit.objects.count() == 2  # each call once
    assert [e["call_id"] for e in events if e["type"] == "tool.started"] == ["call_a", "call_b"]
    assert [e["call_id"] for e in events if e["type"] == "tool.finished"] == ["call_a", "call_b"]
    assert types(events).count("turn.accepted") == 1 and types(events)[-1] == "turn.finished"
    assert len(fake.requests) == 3  # no model call repeated
    assert turn.run_ms is not None and turn.run_ms >= turn.model_ms  # both parts of the run measured


def test_the_deadline_fails_what_still_runs_here(personas, scripted_models, monkeypatch):  # noqa: F811
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="고객 수?", model=None)
    Turn.objects.filter(pk=turn.pk).update(status=TurnStatus.RUNNING)
    monkeypatch.setattr("chat.turns.heartbeat.running_here", lambda: [turn.pk])
    monkeypatch.setattr("chat.turns.handover.connection.close", lambda: None)  # the test's own connection
    assert handover.fail_still_running() == 1
    turn.refresh_from_db()
    assert turn.status == TurnStatus.FAILED and "stopped" in turn.error
    assert handover.fail_still_running() == 0  # a finished turn is not failed again
