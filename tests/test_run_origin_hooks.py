"""The run core's generic hooks for origins: a run of given tool calls
(no model call, the whole executor), `run_ended` once per ended run after
commit with the run's origin, and a second run continuing an origin's own
conversation (of the same owner only)."""

from __future__ import annotations

import json

import pytest

from audit.models import ToolCallAudit
from chat.models import Message, MessageRole, Turn, TurnStatus
from chat.turns import origins
from chat.turns.lifecycle import run_ended
from chat.turns.runner import turn_run
from chat.turns.start import TurnRefused, calls_run_start, run_start

pytestmark = [pytest.mark.usefixtures("english"), pytest.mark.django_db(transaction=True)]

CALL = {
    "id": "given-1",
    "name": "run_sql",
    "arguments": json.dumps({"connection": "sales", "sql": "SELECT phone FROM customers"}),
}


def test_a_run_of_given_calls_uses_the_executor_and_no_model(personas, install_models):
    ended: list[tuple] = []

    def listen(sender, **kw):
        ended.append((kw["turn_id"], kw["origin"], kw["origin_ref"], kw["status"]))

    run_ended.connect(listen)
    try:
        turn = calls_run_start(
            origin=origins.SCRIPT, user=personas.staff, calls=[CALL], model=install_models, title="t", origin_ref="r-1"
        )
        turn_run(turn_id=turn.pk)
    finally:
        run_ended.disconnect(listen)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.COMPLETED and turn.loop_state is None
    assert ended == [(turn.pk, "script", "r-1", "completed")]
    rows = list(ToolCallAudit.objects.filter(turn_id=turn.pk))
    assert rows and {(r.origin, r.origin_ref, r.tool) for r in rows} == {("script", "r-1", "run_sql")}
    result = Message.objects.get(turn=turn, role=MessageRole.TOOL).content
    assert "010-1234-5678" not in result and "[" in result  # shaped and masked as any call
    # The assistant entry naming the call comes first: the history stays paired.
    assert Message.objects.filter(turn=turn, role=MessageRole.ASSISTANT).get().tool_calls[0]["id"] == "given-1"


def test_a_later_run_continues_its_origins_conversation_of_the_same_owner(personas, install_models):
    first = run_start(origin=origins.SCRIPT, user=personas.staff, text="@sales SELECT 1", title="t")
    second = run_start(
        origin=origins.SCRIPT, user=personas.staff, text="@sales SELECT 2", title="t", conversation=first.conversation
    )
    assert second.conversation_id == first.conversation_id
    with pytest.raises(TurnRefused):
        run_start(origin=origins.SCRIPT, user=personas.outsider, text="x", title="t", conversation=first.conversation)
    assert Turn.objects.count() == 2
