"""A deploy's SIGTERM with real processes (daphne, Celery workers with the
threads pool, Redis, PostgreSQL; every process stopped by its PID): turns
running on the stopped worker are handed to another worker at their next
safe point and finish there, no tool call run twice; a turn stuck in one
model call longer than the grace period fails visibly, with its reason,
before the grace period is over (chat.turns.handover)."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from audit.models import ToolCallAudit
from chat.models import Turn, TurnEvent, TurnStatus
from owlai.ops.models import ProcessHeartbeat
from tests.support.fake_llm import FakeLLMServer, Reply, text, tool_call
from tests.support.fault_helpers import in_turn_language, wait_exit
from tests.support.stack import Stack, process_env, scripted_provider
from tests.test_e2e_chat import staff_with_grant
from tests.test_reliability import SQL, clients_for
from tests.test_reliability_beat import FAST, wait_for

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

STEPS = 4  # tool calls per long turn, each after a slow model call
GRACE = 20.0


class LongModel:
    """Each turn: STEPS model calls asking for one query each, then the
    answer. The model call after `hold_at` queries waits until `released`
    is set (a slow model, mid-answer when the worker is told to stop)."""

    def __init__(self, delay: float = 0.0, hold_at: int | None = None) -> None:
        self.delay = delay
        self.hold_at = hold_at
        self.released = threading.Event()
        self.holding = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        time.sleep(self.delay)
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        done = sum(1 for m in messages[last_user:] if m["role"] == "tool")
        if done == self.hold_at and not self.released.is_set():
            with self.lock:
                self.holding += 1
            self.released.wait(60)
        if done >= STEPS:
            return text("고객은 모두 3명입니다.")
        return tool_call("run_sql", {"connection": "sales", "sql": SQL}, call_id=f"call_{done}")


@pytest.fixture
def bare_stack(tmp_path, require_postgres_app_db, require_redis, pg_customer_db):
    """Redis and web; each test starts its workers (threads pool)."""
    fake = FakeLLMServer().__enter__()
    config_path = scripted_provider(tmp_path, fake.base_url)
    stack = Stack(tmp_path, process_env(config_path, OWLAI_TEST_TARGET_DSN=pg_customer_db.dsn, **FAST))
    stack.fake = fake
    try:
        stack.start_redis()
        stack.start_web()
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()
        fake.__exit__(None, None, None)


def _long_turns(stack, model) -> None:
    stack.fake.script = [model] * 1000


def _json_lines(log) -> list[dict]:
    lines = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    return lines


def _terminate(stack, name: str) -> None:
    stack.procs[name].send_signal(signal.SIGTERM)  # by PID, as systemd or docker stop does


def test_sigterm_hands_running_turns_to_another_worker(bare_stack, django_user_model):
    stack = bare_stack
    model = LongModel(hold_at=2)
    _long_turns(stack, model)
    stack.env["OWLAI_WORKER_SHUTDOWN_GRACE_SECONDS"] = str(GRACE)
    stack.env["OWLAI_LOG_FORMAT"] = "json"  # the worker's lines name their run (owlai.logs)
    stack.start_worker(2, pool="threads", name="worker")
    wait_for(lambda: ProcessHeartbeat.objects.filter(kind="worker").exists(), 30, "worker heartbeat")

    staff = staff_with_grant(django_user_model)
    clients = clients_for(stack, staff, 2)
    results: list[list[dict]] = [[], []]

    def ask(n: int) -> None:
        results[n] = clients[n].ask(f"고객이 몇 명이야? ({n})", timeout=90)

    askers = [threading.Thread(target=ask, args=(n,)) for n in range(2)]
    for asker in askers:
        asker.start()
    # Both turns mid-flight: each has run two queries and waits for its model.
    wait_for(lambda: model.holding == 2, 30, "both turns inside their third model call")
    assert Turn.objects.filter(status=TurnStatus.RUNNING).count() == 2
    stack.start_worker(2, pool="threads", name="worker-b")
    wait_for(lambda: ProcessHeartbeat.objects.filter(kind="worker").count() == 2, 30, "second worker heartbeat")

    old = stack.procs["worker"]
    _terminate(stack, "worker")
    wait_for(lambda: "stopping: 2 running turn(s) hand over" in old.log.read_text(), 10, "the worker is stopping")
    model.released.set()  # the model answers: the turns reach their next safe point
    exit_code = wait_exit(old, GRACE)
    assert exit_code == 0, f"the worker did not stop within the grace period:\n{old.log.read_text()[-3000:]}"
    stack.procs.pop("worker")
    for asker in askers:
        asker.join(90)
    try:
        for events in results:
            assert events and events[-1]["type"] == "turn.finished" and events[-1]["status"] == "completed", events[-3:]
            started = [e["call_id"] for e in events if e["type"] == "tool.started"]
            finished = [e["call_id"] for e in events if e["type"] == "tool.finished"]
            # Every step once, none run again by the worker that continued.
            assert started == finished == [f"call_{n}" for n in range(STEPS)]
            assert [e["type"] for e in events].count("turn.accepted") == 1
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert ToolCallAudit.objects.count() == 2 * STEPS
        handed = [line for line in _json_lines(old.log) if "handed over (worker stopping)" in line["message"]]
        assert sorted(line["run_id"] for line in handed) == sorted(str(events[-1]["turn_id"]) for events in results)
        # The second worker took both turns up where they stopped.
        assert stack.procs["worker-b"].log.read_text().count("Task chat.run_turn[") >= 2
        assert not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists()
        assert Turn.objects.filter(loop_state__isnull=False).count() == 0
        # The conversations go on.
        stack.fake.script = [LongModel()] * 100
        again = clients[0].ask("다시 물어볼게", timeout=40)
        assert again[-1]["status"] == "completed"
    finally:
        for client in clients:
            client.close()


def test_a_turn_inside_one_long_model_call_fails_visibly_before_the_grace_period_ends(bare_stack, django_user_model):
    stack = bare_stack
    grace = 6.0
    _long_turns(stack, LongModel())
    stack.fake.delay = 60  # one model call far longer than the grace period
    stack.env["OWLAI_WORKER_SHUTDOWN_GRACE_SECONDS"] = str(grace)
    stack.start_worker(1, pool="threads", name="worker")
    wait_for(lambda: ProcessHeartbeat.objects.filter(kind="worker").exists(), 30, "worker heartbeat")

    staff = staff_with_grant(django_user_model)
    (client,) = clients_for(stack, staff, 1)
    result: list[dict] = []
    asker = threading.Thread(target=lambda: result.extend(client.ask("고객이 몇 명이야?", timeout=60)))
    asker.start()
    wait_for(lambda: stack.fake.requests and Turn.objects.filter(status=TurnStatus.RUNNING).exists(), 30, "waiting")

    _terminate(stack, "worker")
    stopped = time.monotonic()
    asker.join(grace + 10)
    took = time.monotonic() - stopped
    try:
        assert result, "the client saw no end of its turn"
        error, finished = result[-2], result[-1]
        assert (finished["type"], finished["status"]) == ("turn.finished", "failed")
        assert error["type"] == "error" and error["code"] == "worker_stopped"
        assert error["message"] == in_turn_language(
            finished["turn_id"],
            "The worker running this turn was stopped (a restart or a deploy) before the turn could be handed "
            "to another worker. Please send your message again.",
        )
        assert took < grace  # before the supervisor's SIGKILL
        turn = Turn.objects.get(pk=finished["turn_id"])
        assert turn.status == TurnStatus.FAILED
        assert TurnEvent.objects.filter(turn=turn, type="turn.finished").count() == 1

        # The supervisor's SIGKILL at the end of the grace period; a new worker.
        stack.kill("worker")
        stack.fake.delay = 0
        stack.start_worker(1, pool="threads", name="worker-b")
        again = client.ask("다시 물어볼게", timeout=60)
        assert again[-1]["status"] == "completed", again[-3:]
        assert TurnEvent.objects.filter(turn=turn, type="turn.finished").count() == 1  # the old thread wrote nothing
    finally:
        client.close()
