"""Model-call faults against the real OpenAI-compatible client and the
scripted loopback server: deadlines, strict stream endings, retries, caps and
the history budget. Deadlines are short here; assertions check that a call
ends (with generous upper bounds), never precise timings."""

from __future__ import annotations

import json
import socket
import time
import tracemalloc
import uuid

import pytest

from audit.models import ToolCallAudit
from chat.agent import fit_history, history_budget, run_agent_loop, trimmed_note
from chat.context import TurnContext
from chat.executor import ToolResult, execute_tool_call
from chat.llm import (
    ModelConnectionError,
    ModelError,
    ModelLimitError,
    ModelLimits,
    ModelStatusError,
    ModelStreamError,
    ModelTimeoutError,
    OpenAICompatibleClient,
)
from chat.models import Turn
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from governance.models import LlmModel
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import InstallConfigError, parse_install_config
from tests.support import fake_llm
from tests.support.fake_llm import FakeLLMServer, text, tool_call


@pytest.fixture(autouse=True)
def english():
    """The assertions read the English messages (the default language is Korean)."""
    from django.utils import translation

    with translation.override("en"):
        yield


# Roomy deadlines for the tests that are not about deadlines: a loaded CI
# machine can take longer than half a second to serve the first byte, and a
# fault test must then still see its own fault, not a timeout.
FAST = ModelLimits(
    connect_seconds=2.0,
    first_byte_seconds=5.0,
    idle_seconds=5.0,
    total_seconds=10.0,
    max_retries=2,
    retry_base_seconds=0.01,
    retry_after_max_seconds=1.0,
    answer_max_chars=200_000,
    tool_argument_max_chars=100_000,
)
# The deadline tests' own tight limits.
TIGHT = {"first_byte_seconds": 0.5, "idle_seconds": 0.5, "total_seconds": 4.0}
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake():
    with FakeLLMServer() as server:
        yield server


class Call:
    """One `complete` call: its reply or error, the deltas seen, how long it took."""

    def __init__(self, server: FakeLLMServer, limits: ModelLimits = FAST, **limit_changes) -> None:
        if limit_changes:
            limits = ModelLimits(**{**limits.__dict__, **limit_changes})
        client = OpenAICompatibleClient(base_url=server.base_url, api_key="", model="m", limits=limits)
        self.deltas: list[str] = []
        self.reply = self.error = None
        started = time.monotonic()
        try:
            self.reply = client.complete(messages=USER, tools=[], on_delta=self.deltas.append)
        except ModelError as exc:
            self.error = exc
        self.seconds = time.monotonic() - started


def fails(server, error_type, *, within: float, **limits) -> Call:
    call = Call(server, **limits)
    assert isinstance(call.error, error_type), (call.error, call.reply)
    assert call.seconds < within, call.seconds
    assert str(call.error)  # a readable message
    return call


# --- A healthy stream --------------------------------------------------------


def test_a_complete_stream_is_an_answer(fake):
    fake.script = [text("hello there, world")]
    call = Call(fake)
    assert call.error is None
    assert call.reply.content == "hello there, world"
    assert "".join(call.deltas) == "hello there, world"


# --- Streams without a proper finish fail ------------------------------------


@pytest.mark.parametrize(
    "fault, words",
    [
        (fake_llm.html(), "text/html"),
        (fake_llm.malformed(), "malformed"),
        (fake_llm.cut(), "cut off"),
        (fake_llm.no_done(), "cut off"),
        (fake_llm.no_finish(), "cut off"),
    ],
    ids=["html-200", "malformed-json", "cut", "no-done", "no-finish-reason"],
)
def test_a_stream_without_a_proper_finish_fails_and_is_not_retried(fake, fault, words):
    fake.script = [fault, text("must not be asked for")]
    call = fails(fake, ModelStreamError, within=5)
    assert words in str(call.error)
    assert len(fake.requests) == 1


def test_text_already_streamed_is_not_retried_when_the_stream_is_cut(fake):
    fake.script = [fake_llm.cut("the user saw this"), text("second try")]
    call = fails(fake, ModelStreamError, within=5)
    assert "".join(call.deltas) == "the user saw this"
    assert len(fake.requests) == 1


# --- Deadlines ---------------------------------------------------------------


def test_silence_before_the_headers_ends_at_the_first_byte_deadline(fake):
    fake.script = [fake_llm.silence(30), text("too late")]
    call = fails(fake, ModelTimeoutError, within=3 * 0.5 + 2, **TIGHT)
    assert "did not start answering" in str(call.error)
    assert len(fake.requests) == 1  # a slow model is not asked twice


def test_silence_after_the_headers_ends_at_the_first_byte_deadline(fake):
    fake.script = [fake_llm.silence(30, headers=True)]
    call = fails(fake, ModelTimeoutError, within=3 * 0.5 + 2, **TIGHT)
    assert "did not start answering" in str(call.error)


def test_a_stall_mid_answer_ends_at_the_idle_deadline(fake):
    fake.script = [fake_llm.stall("first words", 30)]
    call = fails(fake, ModelTimeoutError, within=3 * 0.5 + 2, idle_seconds=0.5, first_byte_seconds=10, total_seconds=20)
    assert "stopped sending" in str(call.error)
    assert "".join(call.deltas) == "first words"


def test_keep_alive_comments_do_not_count_as_progress(fake):
    fake.script = [fake_llm.drip(30, content="first words")]
    call = fails(fake, ModelTimeoutError, within=3 * 0.5 + 2, idle_seconds=0.5, first_byte_seconds=10, total_seconds=20)
    assert "stopped sending" in str(call.error)


def test_keep_alive_comments_before_the_first_token_end_at_the_first_byte_deadline(fake):
    fake.script = [fake_llm.drip(30)]
    call = fails(fake, ModelTimeoutError, within=3 * 0.5 + 2, first_byte_seconds=0.5, total_seconds=20)
    assert "did not start answering" in str(call.error)


def test_the_total_deadline_holds_while_bytes_drip(fake):
    fake.script = [fake_llm.drip(30, content="x")]
    call = fails(fake, ModelTimeoutError, within=3 * 1.0 + 2, first_byte_seconds=20, idle_seconds=20, total_seconds=1)
    assert "took longer than 1 seconds" in str(call.error)


def test_connection_refused_is_a_connection_error(fake):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAICompatibleClient(base_url=f"http://127.0.0.1:{port}/v1", api_key="", model="m", limits=FAST)
    started = time.monotonic()
    with pytest.raises(ModelConnectionError):
        client.complete(messages=USER, tools=[], on_delta=lambda _t: None)
    assert time.monotonic() - started < 5


# --- Retries -----------------------------------------------------------------


@pytest.mark.parametrize("code", [500, 502, 503, 429])
def test_server_errors_and_rate_limits_are_retried(fake, code):
    fake.script = [fake_llm.status(code), text("second time lucky")]
    call = Call(fake)
    assert call.error is None
    assert call.reply.content == "second time lucky"
    assert len(fake.requests) == 2


def test_retries_stop_after_the_configured_number(fake):
    fake.script = [fake_llm.status(503)] * 5
    call = fails(fake, ModelStatusError, within=5)
    assert "503" in str(call.error)
    assert len(fake.requests) == FAST.max_retries + 1


@pytest.mark.parametrize("code", [400, 401, 404, 422])
def test_client_errors_are_not_retried(fake, code):
    fake.script = [fake_llm.status(code), text("must not be asked for")]
    call = fails(fake, ModelStatusError, within=5)
    assert str(code) in str(call.error)
    assert len(fake.requests) == 1


def test_a_short_retry_after_is_honoured(fake):
    fake.script = [fake_llm.status(429, retry_after="0.3"), text("ok")]
    call = Call(fake)
    assert call.reply.content == "ok"
    assert len(fake.requests) == 2
    assert call.seconds >= 0.3


def test_a_long_retry_after_is_not_waited_for(fake):
    fake.script = [fake_llm.status(429, retry_after="3600"), text("ok")]
    call = fails(fake, ModelStatusError, within=5)
    assert "rate limiting" in str(call.error)
    assert len(fake.requests) == 1


def test_no_retry_past_the_total_deadline(fake):
    fake.script = [fake_llm.status(500), text("ok")]
    fails(fake, ModelStatusError, within=5, retry_base_seconds=30, total_seconds=2)
    assert len(fake.requests) == 1


# --- Caps and memory ---------------------------------------------------------


def peak_bytes(action) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_answer_is_stopped_at_the_cap_with_bounded_memory(fake):
    size = 10_000_000
    fake.script = [fake_llm.huge_text(size)]
    calls: list[Call] = []
    peak = peak_bytes(lambda: calls.append(Call(fake)))
    call = calls[0]
    assert isinstance(call.error, ModelLimitError)
    assert "200000" in str(call.error)
    assert sum(map(len, call.deltas)) <= FAST.answer_max_chars
    assert peak < size / 2, peak  # the answer was never held whole
    assert fake.wait_sent()[0] < size  # the client stopped reading


def test_one_huge_line_is_stopped_with_bounded_memory(fake):
    size = 10_000_000
    fake.script = [fake_llm.huge_line(size)]
    calls: list[Call] = []
    peak = peak_bytes(lambda: calls.append(Call(fake)))
    assert isinstance(calls[0].error, ModelLimitError)
    assert "too large" in str(calls[0].error)
    assert peak < 3 * FAST.max_line_bytes < size / 2, peak  # one capped line buffer, not the line
    assert fake.wait_sent()[0] < size


def test_a_huge_tool_argument_stops_reading_at_the_cap(fake):
    size = 8_000_000
    fake.script = [fake_llm.huge_tool_argument(size)]
    calls: list[Call] = []
    peak = peak_bytes(lambda: calls.append(Call(fake)))
    call = calls[0]
    assert call.error is None
    [tool] = call.reply.tool_calls
    assert tool.name == "run_sql"
    assert len(tool.arguments) == FAST.tool_argument_max_chars + 1
    assert peak < size / 4, peak
    assert fake.wait_sent()[0] < size


# --- The oversize argument in the executor and a whole turn ------------------


def ctx_for(user, *, provider="p", model="m") -> TurnContext:
    return TurnContext(
        user_id=user.pk,
        username=user.username,
        tier="private",
        model_name=model,
        provider_name=provider,
        conversation_id=uuid.uuid4(),
        turn_id=7,
    )


@pytest.fixture
def no_parsing(monkeypatch):
    def parse(*args, **kwargs):
        raise AssertionError("an oversize argument reached the parser")

    monkeypatch.setattr("chat.executor.pipeline.parse_arguments", parse)
    monkeypatch.setattr("chat.executor.registry.Registry.find", parse)


@pytest.mark.django_db
def test_the_executor_refuses_an_oversize_argument_unparsed_with_one_denied_row(personas, settings, no_parsing):
    settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS = 1000
    result = execute_tool_call(ctx_for(personas.staff), name="run_sql", arguments="{" + "x" * 1000)
    assert result.outcome == "denied"
    assert "longer than 1000 characters" in json.loads(result.content)["error"]
    row = ToolCallAudit.objects.get()
    assert (row.outcome, row.tool) == ("denied", "run_sql")
    assert "longer than 1000" in row.reason


@pytest.fixture
def scripted_model(db, fake, settings):
    settings.OWLAI_MODEL_FIRST_BYTE_SECONDS = 2.0
    settings.OWLAI_MODEL_IDLE_SECONDS = 2.0
    settings.OWLAI_MODEL_TOTAL_SECONDS = 10.0
    settings.OWLAI_MODEL_RETRY_BASE_SECONDS = 0.01
    config = parse_install_config(
        f'[[providers]]\nname = "onprem"\nkind = "openai"\ntier = "private"\n'
        f'base_url = "{fake.base_url}"\nmodels = ["inhouse-model"]\n'
    )
    install_config_sync(config=config)
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))


@pytest.fixture
def events(monkeypatch):
    """The frames the turn published (each already stored: chat.events)."""
    captured: list[dict] = []
    monkeypatch.setattr("chat.events.publish_all", lambda group, frames: captured.extend(frames))
    return captured


def run_turn(user, text_) -> Turn:
    turn = turn_start(conversation=conversation_create(owner=user), user=user, text=text_, model=None)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def test_an_oversize_tool_argument_in_a_turn_is_refused_once_and_the_model_told(
    personas, scripted_model, fake, events, no_parsing
):
    fake.script = [fake_llm.huge_tool_argument(8_000_000), text("I will ask for less.")]
    turn = run_turn(personas.staff, "everything please")
    assert turn.status == "completed", turn.error
    row = ToolCallAudit.objects.get()
    assert (row.outcome, row.tool, row.turn_id) == ("denied", "run_sql", turn.pk)
    second = fake.requests[1]["messages"]
    assert "refused: arguments longer than 100000 characters" in second[-1]["content"]
    # The oversize argument is neither re-sent nor stored whole.
    assert len(json.dumps(second)) < 10_000
    assert fake.wait_sent()[0] < 8_000_000


@pytest.mark.parametrize(
    "fault, words",
    [(fake_llm.cut(), "cut off"), (fake_llm.html(), "text/html"), (fake_llm.silence(30), "did not start")],
    ids=["cut", "html", "silence"],
)
def test_a_broken_stream_fails_the_turn_with_a_clear_message(personas, scripted_model, fake, events, fault, words):
    fake.script = [fault]
    turn = run_turn(personas.staff, "hello")
    assert turn.status == "failed"
    assert words in turn.error
    kinds = [e["type"] for e in events]
    assert "message.completed" not in kinds
    assert kinds[-2:] == ["error", "turn.finished"]


# --- History budget ----------------------------------------------------------


def old_turn(n: int, result_chars: int) -> list[dict]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "run_sql", "arguments": "{}"}}
    return [
        {"role": "user", "content": f"question {n}"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": "r" * result_chars},
        {"role": "assistant", "content": f"answer {n}"},
    ]


def conversation(turns: int, result_chars: int) -> list[dict]:
    history = [m for n in range(turns) for m in old_turn(n, result_chars)]
    return [
        {"role": "system", "content": "S" * 500},
        *history,
        {"role": "system", "content": "mention note"},
        {"role": "user", "content": "the question now"},
    ]


def test_within_budget_nothing_changes():
    messages = conversation(2, 100)
    assert fit_history(messages, budget=10_000, current=len(messages) - 1) is messages


def test_oldest_tool_results_are_trimmed_first():
    messages = conversation(3, 5_000)
    sent = fit_history(messages, budget=12_000, current=len(messages) - 1)
    tools = [m["content"] for m in sent if m["role"] == "tool"]
    assert tools == [trimmed_note(5_000), "r" * 5_000, "r" * 5_000]
    assert len(sent) == len(messages)
    assert messages[3]["content"] == "r" * 5_000  # the stored history is untouched


def test_then_the_oldest_turns_are_dropped_but_system_and_the_question_stay():
    messages = conversation(30, 5_000)
    sent = fit_history(messages, budget=1_500, current=len(messages) - 1)
    assert sent[0] == messages[0]
    assert sent[-2:] == messages[-2:]
    users = [m["content"] for m in sent if m["role"] == "user"]
    assert users[-1] == "the question now"
    assert "question 0" not in users and users[:-1] == [f"question {n}" for n in range(30 - len(users) + 1, 30)]
    assert sum(len(m.get("content") or "") for m in sent) <= 1_500
    # Every remaining tool result still follows its call.
    ids = [c["id"] for m in sent for c in m.get("tool_calls") or []]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ids


class StubExecute:
    def __init__(self, chars: int) -> None:
        self.chars = chars

    def __call__(self, ctx, *, name, arguments) -> ToolResult:
        return ToolResult(content="t" * self.chars, outcome="success", row_count=1)


def test_the_budget_applies_before_every_call_of_a_long_tool_loop(fake):
    fake.script = [tool_call("run_sql", {"sql": f"select {n}"}, call_id=f"loop{n}") for n in range(4)]
    fake.script.append(text("done"))
    ctx = TurnContext(
        user_id=1, username="u", tier="private", model_name="m", provider_name="p", conversation_id=None, turn_id=1
    )
    client = OpenAICompatibleClient(base_url=fake.base_url, api_key="", model="m", limits=FAST)
    messages = [{"role": "system", "content": "system"}, {"role": "user", "content": "go"}]
    result = run_agent_loop(
        ctx=ctx,
        client=client,
        messages=messages,
        tools=[],
        execute=StubExecute(4_000),
        emit=lambda *_: None,
        max_steps=8,
        history_chars=9_000,
    )
    assert result.final_text == "done"
    last = fake.requests[-1]["messages"]
    tools = [m["content"] for m in last if m["role"] == "tool"]
    assert tools[:2] == [trimmed_note(4_000)] * 2
    assert tools[-1] == "t" * 4_000  # what the model is about to read is kept
    assert last[:2] == messages
    # The turn's own record keeps every result whole.
    assert all(m["content"] == "t" * 4_000 for m in result.new_messages if m["role"] == "tool")


def test_a_model_budget_comes_from_the_install_config(settings):
    settings.OWLAI_HISTORY_CHARS = 50_000
    settings.OWLAI_INSTALL = parse_install_config(
        '[[providers]]\nname = "p"\nkind = "openai"\ntier = "private"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'models = [{ name = "small", history_chars = 8000 }, "big"]\n'
    )
    ctx = TurnContext(
        user_id=1, username="u", tier="private", model_name="small", provider_name="p", conversation_id=None, turn_id=1
    )
    assert history_budget(ctx) == 8_000
    assert history_budget(TurnContext(**{**ctx.__dict__, "model_name": "big"})) == 50_000
    assert history_budget(TurnContext(**{**ctx.__dict__, "provider_name": "gone"})) == 50_000


@pytest.mark.parametrize("value", ["0", "-5", '"lots"', "true", "1.5"])
def test_a_bad_history_budget_stops_the_config(value):
    with pytest.raises(InstallConfigError, match="history_chars"):
        parse_install_config(
            '[[providers]]\nname = "p"\nkind = "offline-demo"\ntier = "private"\n'
            f'models = [{{ name = "m", history_chars = {value} }}]\n'
        )


def test_the_watchdog_is_woken_only_when_a_deadline_moves_earlier(monkeypatch):
    """Each chunk restarts the idle clock; the watchdog thread needs waking
    only when that moves its deadline earlier (the first chunk, with idle
    shorter than first byte), not once per chunk."""
    import threading

    from chat.llm import _Watchdog

    notified: list = []

    class Counting(type(threading.Condition())):
        def notify(self, n=1):
            notified.append(self)
            super().notify(n)

    monkeypatch.setattr("chat.llm.threading.Condition", Counting)
    limits = ModelLimits(**{**FAST.__dict__, "first_byte_seconds": 5.0, "idle_seconds": 2.0, "total_seconds": 10.0})
    watchdog = _Watchdog(limits, time.monotonic() + limits.total_seconds)
    try:
        for _ in range(100):
            watchdog.progress()
        assert [cond for cond in notified if cond is watchdog._cond] == [watchdog._cond]
    finally:
        watchdog.stop()
    watchdog._thread.join(5)
    assert not watchdog._thread.is_alive() and watchdog.expired is None
