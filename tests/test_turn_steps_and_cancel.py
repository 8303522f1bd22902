"""What the chat page shows of a turn, from the database: tool steps (stored
with their turn's events, returned by the messages API and the `state`
frame), Stop (`turn_cancel`: a persisted flag the worker reads before each
model and tool call), titles and renaming. In-process, with the scripted
model server and the real executor."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import ToolCallAudit
from chat.agent import CANCELLED, TurnCancelled, run_agent_loop
from chat.context import TurnContext
from chat.executor import ToolResult
from chat.llm import AssistantReply, ToolCall
from chat.models import Message, Turn, TurnEvent, TurnStatus
from chat.services import ConversationRenameRefused, conversation_create, conversation_rename, title_from_message
from chat.turns.cancel import TurnCancelRefused, turn_cancel
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from chat.turns.timeline import conversation_state, conversation_timeline
from tests import test_turn
from tests.support.fake_llm import FakeLLMServer, Reply, text, tool_call

scripted_models = test_turn.scripted_models  # the same providers as tests/test_turn.py

pytestmark = pytest.mark.django_db

SQL = "SELECT name, phone FROM customers ORDER BY id"


@pytest.fixture
def fake():
    with FakeLLMServer() as server:
        yield server


# --- steps ----------------------------------------------------------------------------


def test_a_tool_step_is_stored_with_what_the_page_shows_and_comes_back(personas, scripted_models, fake, english):
    fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": SQL}),
        tool_call("run_sql", {"connection": "sales", "sql": "DELETE FROM customers"}, call_id="call_2"),
        text("끝"),
    ]
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="연락처", model=None)
    turn_run(turn_id=turn.pk)

    started = TurnEvent.objects.filter(turn=turn, type="tool.started").order_by("seq")[0].payload
    assert started == {"call_id": "call_1", "tool": "run_sql", "resource": "sales", "sql": SQL}
    items = conversation_timeline(conversation=conversation)
    assert [i["role"] for i in items] == ["user", "step", "step", "assistant"]
    ok, refused = items[1], items[2]
    assert (ok["sql"], ok["outcome"], ok["row_count"], ok["finished"]) == (SQL, "success", 3, True)
    assert isinstance(ok["duration_ms"], int) and "reason" not in ok
    # The result the model read, masked as the model read it.
    assert "[전화번호-" in ok["result"] and "010-1234-5678" not in ok["result"]
    assert (refused["sql"], refused["outcome"]) == ("DELETE FROM customers", "denied")
    # In the person's words, one language (the model read "refused: not a
    # read-only query: write statement: DELETE").
    assert refused["reason"] == "not a read-only query: writing is not allowed (DELETE)"
    assert items[3]["content"] == "끝" and items[3]["model"] == "inhouse-model"

    client = Client()
    client.force_login(personas.staff)
    api = client.get(reverse("chat:conversation-messages", args=[conversation.pk])).json()
    assert api == items
    # The state frame leaves the latest turn's answer to its replayed events.
    state = conversation_state(conversation=conversation)
    assert [m["role"] for m in state["messages"]] == ["user"]
    assert [e["type"] for e in state["turn"]["events"]].count("tool.finished") == 2


def test_steps_of_a_turn_that_failed_midway_still_show(personas, scripted_models, fake):
    """A failed turn stores no messages, but its tool call ran: the step
    shows from its events, then the failure."""
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": SQL}), text("x")]
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="a", model=None)
    turn_run(turn_id=turn.pk)
    Message.objects.filter(turn=turn).exclude(role="user").delete()
    Turn.objects.filter(pk=turn.pk).update(status=TurnStatus.FAILED, error="worker lost")
    fake.script = [text("두 번째")]
    second = turn_start(conversation=conversation, user=personas.staff, text="b", model=None)
    turn_run(turn_id=second.pk)
    items = conversation_timeline(conversation=conversation)
    assert [(i["role"], i["turn_id"]) for i in items] == [
        ("user", turn.pk),
        ("step", turn.pk),
        ("status", turn.pk),
        ("user", second.pk),
        ("assistant", second.pk),
    ]
    assert items[2]["status"] == "failed" and items[2]["content"] == "worker lost"


# --- cancel ------------------------------------------------------------------------------


def test_cancelling_a_queued_turn_ends_it_at_once_and_no_worker_runs_it(personas, scripted_models, fake):
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="a", model=None)
    assert turn_cancel(conversation=conversation, actor=personas.staff) == "cancelled"
    turn.refresh_from_db()
    assert turn.status == TurnStatus.CANCELLED and turn.finished_at is not None
    assert [(e.type, e.payload) for e in TurnEvent.objects.filter(turn=turn)] == [
        ("turn.finished", {"status": "cancelled"})
    ]
    turn_run(turn_id=turn.pk)  # the task arrives later: nothing happens
    assert fake.requests == []
    with pytest.raises(TurnCancelRefused):
        turn_cancel(conversation=conversation, actor=personas.staff)
    items = conversation_timeline(conversation=conversation)
    assert [i["role"] for i in items] == ["user", "status"] and items[1]["status"] == "cancelled"


@pytest.mark.django_db(transaction=True)  # the model server's thread writes the flag
def test_stop_pressed_while_the_model_answers_skips_the_tool_call(personas, scripted_models, fake, settings):
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="a", model=None)

    def press_stop_then_ask_for_sql(body):
        # The owner presses Stop while the model is answering.
        Turn.objects.filter(pk=turn.pk).update(cancel_requested_at=timezone.now())
        return Reply(
            content="조회해 보겠습니다.", tool_calls=[("call_1", "run_sql", {"connection": "sales", "sql": SQL})]
        )

    fake.script = [press_stop_then_ask_for_sql, text("never")]
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.CANCELLED
    assert len(fake.requests) == 1  # no second model call
    assert ToolCallAudit.objects.count() == 0  # the tool never ran
    events = [e.type for e in TurnEvent.objects.filter(turn=turn).order_by("seq")]
    assert events[-1] == "turn.finished" and "tool.started" not in events
    assert TurnEvent.objects.get(turn=turn, type="turn.finished").payload == {"status": "cancelled"}
    # What streamed before the stop stays, shown after a reload.
    items = conversation_timeline(conversation=conversation)
    assert [i["role"] for i in items] == ["user", "assistant", "status"]
    assert items[1]["content"] == "조회해 보겠습니다."


def test_the_loop_stops_before_its_next_tool_call_keeping_what_ran(personas):
    """Stop between two tool calls: the first ran (and was audited by the
    executor), the second never runs, the answer so far is returned."""
    calls: list[str] = []
    flag = {"stop": False}

    class Client_:
        def complete(self, *, messages, tools, on_delta):
            return AssistantReply(
                content="",
                tool_calls=[
                    ToolCall(id="a", name="run_sql", arguments="{}"),
                    ToolCall(id="b", name="run_sql", arguments="{}"),
                ],
            )

    def execute(ctx, *, name, arguments):
        calls.append(name)
        flag["stop"] = True  # pressed while the first call ran
        return ToolResult(content="{}", outcome="success", row_count=0)

    ctx = TurnContext(
        user_id=personas.staff.pk, username="staff", tier="private", model_name="m", provider_name="p",
        conversation_id=None, turn_id=1,
    )  # fmt: skip
    with pytest.raises(TurnCancelled) as stopped:
        run_agent_loop(
            ctx=ctx,
            client=Client_(),
            messages=[{"role": "user", "content": "x"}],
            tools=[],
            execute=execute,
            emit=lambda *a: None,
            max_steps=3,
            interruption=lambda: CANCELLED if flag["stop"] else None,
        )
    assert calls == ["run_sql"]
    assert [m["role"] for m in stopped.value.new_messages] == ["assistant", "tool"]


def test_only_the_owner_can_stop_and_only_an_active_turn(personas, scripted_models):
    conversation = conversation_create(owner=personas.staff)
    with pytest.raises(TurnCancelRefused):
        turn_cancel(conversation=conversation, actor=personas.staff)
    turn_start(conversation=conversation, user=personas.staff, text="a", model=None)
    with pytest.raises(TurnCancelRefused):
        turn_cancel(conversation=conversation, actor=personas.outsider)


# --- titles and renaming ----------------------------------------------------------------------


def test_titles_come_from_the_first_line_of_the_first_message():
    assert title_from_message("  \n  고객   현황을\n알려줘") == "고객 현황을"
    long = "매출 " * 40
    title = title_from_message(long)
    assert title.endswith("…") and len(title) <= 61 and not title[:-1].endswith(" ")


def test_rename_is_for_the_owner_with_a_usable_title(personas):
    conversation = conversation_create(owner=personas.staff, title="old")
    assert conversation_rename(conversation=conversation, title="  새   이름 ", actor=personas.staff).title == "새 이름"
    for bad in ("   ", "x" * 201):
        with pytest.raises(ConversationRenameRefused):
            conversation_rename(conversation=conversation, title=bad, actor=personas.staff)
    with pytest.raises(ConversationRenameRefused):
        conversation_rename(conversation=conversation, title="mine", actor=personas.outsider)
    conversation.refresh_from_db()
    assert conversation.title == "새 이름"

    client = Client()
    client.force_login(personas.outsider)
    url = reverse("chat:conversation-detail", args=[conversation.pk])
    assert client.patch(url, {"title": "x"}, content_type="application/json").status_code == 404
    client.force_login(personas.staff)
    response = client.patch(url, {"title": "API 이름"}, content_type="application/json")
    assert response.status_code == 200 and response.json()["title"] == "API 이름"
    assert client.patch(url, {"title": ""}, content_type="application/json").status_code == 400
