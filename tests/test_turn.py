"""A governed turn in-process: the real OpenAI-compatible client against the
scripted local server, the real executor and audit, the agent loop."""

from __future__ import annotations

import json

import pytest

from audit.models import ToolCallAudit
from chat.models import Turn
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from governance.models import LlmModel
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.support.fake_llm import FakeLLMServer, text, tool_call

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]


@pytest.fixture
def fake():
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def scripted_models(db, fake):
    config = parse_install_config(
        f"""
[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "{fake.base_url}"
models = ["inhouse-model"]

[[providers]]
name = "cloud"
kind = "openai"
tier = "public"
base_url = "{fake.base_url}"
api_key_env = "OWLAI_TEST_CLOUD_KEY"
models = ["cloud-model"]
"""
    )
    install_config_sync(config=config)
    private = LlmModel.objects.get(name="inhouse-model")
    feature_default_set(feature="chat", model=private)
    return {"private": private, "public": LlmModel.objects.get(name="cloud-model")}


@pytest.fixture
def events(monkeypatch):
    """The frames the turn published (each already stored: chat.events)."""
    captured: list[dict] = []
    monkeypatch.setattr("chat.events.publish_all", lambda group, frames: captured.extend(frames))
    return captured


def start_and_run(conversation, user, text_, model=None) -> Turn:
    turn = turn_start(conversation=conversation, user=user, text=text_, model=model)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def types(events):
    return [e["type"] for e in events]


def test_question_runs_sql_and_the_second_request_carries_the_result(personas, scripted_models, fake, events):
    fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": "SELECT count(*) AS n FROM customers"}),
        text("고객은 3명입니다."),
    ]
    conversation = conversation_create(owner=personas.staff)
    turn = start_and_run(conversation, personas.staff, "고객이 몇 명이야?")

    assert turn.status == "completed", turn.error
    assert types(events) == [
        "turn.accepted",
        "tool.started",
        "tool.finished",
        *["message.delta"] * 2,
        "message.completed",
        "turn.finished",
    ]
    finished = next(e for e in events if e["type"] == "tool.finished")
    assert (finished["outcome"], finished["row_count"]) == ("success", 1)
    assert "".join(e["text"] for e in events if e["type"] == "message.delta") == "고객은 3명입니다."
    assert ToolCallAudit.objects.count() == 1
    row = ToolCallAudit.objects.get()
    assert (row.call_outcome, row.turn_id, row.conversation_id) == ("success", turn.pk, conversation.pk)

    assert len(fake.requests) == 2
    first, second = fake.requests
    assert first["tools"][0]["function"]["name"] == "run_sql"
    assert first["tools"][0]["function"]["parameters"]["properties"]["connection"]["enum"] == ["partial", "sales"]
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1
    assert json.loads(tool_messages[0]["content"])["rows"] == [[3]]
    # On a private turn an ungranted connection is named only as "no permission"
    # (so the model can say so); it is never a tool target and never summarised.
    assert "hr_secret" in first["messages"][0]["content"].split("no permission")[1]
    assert "HR: salaries" not in fake.all_request_text()


def test_denied_call_reaches_the_model_as_a_refusal(personas, scripted_models, fake, events):
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": "DELETE FROM customers"}), text("못 합니다.")]
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "고객 다 지워")
    assert turn.status == "completed"
    tool_message = next(m for m in fake.requests[1]["messages"] if m["role"] == "tool")
    assert json.loads(tool_message["content"])["error"].startswith("refused: not a read-only query")
    assert ToolCallAudit.objects.get().outcome == "denied"
    assert next(e for e in events if e["type"] == "tool.finished")["outcome"] == "denied"


def test_audit_failure_withholds_the_result_from_the_model(
    personas, scripted_models, fake, events, audit_inserts_refused
):
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": "SELECT name FROM customers"}), text("x")]
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "고객 이름")
    assert turn.status == "failed"
    assert len(fake.requests) == 1  # the model never got a second call with the result
    assert "김민준" not in fake.all_request_text()
    assert types(events)[-2:] == ["error", "turn.finished"]
    assert "audit" in events[-2]["message"].lower() or "감사" in events[-2]["message"]


@pytest.mark.parametrize("requested", ["no-such-model", "999999"])
def test_unresolvable_model_rejects_without_any_model_call(personas, scripted_models, fake, events, requested):
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "안녕", model=requested)
    assert turn.status == "rejected"
    assert fake.requests == []
    assert types(events) == ["turn.rejected", "turn.finished"]


def test_disabled_default_model_rejects_without_model_call(personas, scripted_models, fake, events):
    from governance.services import model_set_enabled

    model_set_enabled(model=scripted_models["private"], enabled=False)
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "안녕")
    assert turn.status == "rejected" and fake.requests == []


def test_conversation_keeps_its_tier(personas, scripted_models, fake, events):
    fake.script = [text("첫 답")]
    conversation = conversation_create(owner=personas.staff)
    first = start_and_run(conversation, personas.staff, "첫 질문", model=str(scripted_models["private"].pk))
    assert first.status == "completed"
    conversation.refresh_from_db()
    assert conversation.tier == "private"
    second = start_and_run(conversation, personas.staff, "둘째", model=str(scripted_models["public"].pk))
    assert second.status == "rejected"
    assert len(fake.requests) == 1
    rejected = next(e for e in events if e["type"] == "turn.rejected")
    assert "새 대화" in rejected["reason"] or "new conversation" in rejected["reason"]


def test_later_turns_send_earlier_tool_results_and_answers(personas, scripted_models, fake, events):
    fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": "SELECT count(*) FROM orders"}),
        text("주문 3건"),
        text("네"),
    ]
    conversation = conversation_create(owner=personas.staff)
    start_and_run(conversation, personas.staff, "주문 몇 건?")
    start_and_run(conversation, personas.staff, "확실해?")
    roles = [m["role"] for m in fake.requests[2]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_step_limit_stops_the_loop(personas, scripted_models, fake, events, settings):
    settings.OWLAI_AGENT_MAX_STEPS = 2
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": "SELECT 1"}, call_id=f"c{i}") for i in range(5)]
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "반복")
    assert turn.status == "completed"
    assert len(fake.requests) == 2
    assert ToolCallAudit.objects.count() == 2


def test_only_one_active_turn_per_conversation(personas, scripted_models):
    from chat.turns.start import TurnRefused

    conversation = conversation_create(owner=personas.staff)
    turn_start(conversation=conversation, user=personas.staff, text="하나", model=None)
    with pytest.raises(TurnRefused):
        turn_start(conversation=conversation, user=personas.staff, text="둘", model=None)


def test_model_provider_down_fails_the_turn_cleanly(personas, db, events):
    config = parse_install_config(
        '[[providers]]\nname = "down"\nkind = "openai"\ntier = "private"\n'
        'base_url = "http://127.0.0.1:9/v1"\nmodels = ["m"]\n'
    )
    install_config_sync(config=config)
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="m"))
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "안녕")
    assert turn.status == "failed"
    assert types(events)[-2:] == ["error", "turn.finished"]


def test_abandoned_turn_does_not_block_the_conversation_forever(personas, scripted_models, settings):
    from datetime import timedelta

    from django.utils import timezone

    conversation = conversation_create(owner=personas.staff)
    stuck = turn_start(conversation=conversation, user=personas.staff, text="하나", model=None)
    Turn.objects.filter(pk=stuck.pk).update(
        status="running", created_at=timezone.now() - timedelta(seconds=settings.OWLAI_TURN_TIMEOUT_SECONDS + 500)
    )
    turn_start(conversation=conversation, user=personas.staff, text="둘", model=None)
    stuck.refresh_from_db()
    assert stuck.status == "failed"
