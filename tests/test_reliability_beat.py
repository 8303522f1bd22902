"""No single point of failure, with real processes: beat and a worker
killed together, the surviving worker still fails the dead worker's turns
visibly (it runs turn recovery itself, under the sweep's lease); two beats
started by mistake never run a sweep twice in one period. /readyz and
/metrics are read before and after (owlai.health, owlai.metrics)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from audit.models import ToolCallAudit
from chat.models import Turn, TurnEvent, TurnStatus
from chat.services import conversation_create
from owlai.ops.models import ProcessHeartbeat, SweepLease
from tests.support.fake_llm import FakeLLMServer
from tests.support.stack import BIN, Stack, process_env, scripted_provider
from tests.test_e2e_chat import staff_with_grant
from tests.test_reliability import Model, clients_for

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

RECOVERY = "chat.recover_turns"

FAST = {
    # Shortened so everything below happens in seconds, as an operator could.
    "OWLAI_TURN_HEARTBEAT_SECONDS": "1",
    "OWLAI_TURN_STALE_SECONDS": "3",
    "OWLAI_TURN_RECOVERY_SECONDS": "1",
    "OWLAI_TURN_QUEUE_SECONDS": "4",
    "OWLAI_WORKER_HEARTBEAT_SECONDS": "1",
    "OWLAI_BEAT_HEARTBEAT_SECONDS": "1",
}


@pytest.fixture
def bare_stack(tmp_path, require_postgres_app_db, require_redis, pg_customer_db):
    """Redis and web only; each test starts its workers and beats."""
    model = Model()
    fake = FakeLLMServer().__enter__()
    fake.script = [model] * 1000
    config_path = scripted_provider(tmp_path, fake.base_url)
    stack = Stack(tmp_path, process_env(config_path, OWLAI_TEST_TARGET_DSN=pg_customer_db.dsn, **FAST))
    stack.model = model
    try:
        stack.start_redis()
        stack.start_web()
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        for name in [n for n in stack.procs if n.startswith("beat-")]:
            stack.stop(name)
        stack.close()
        fake.__exit__(None, None, None)


def start_second_beat(stack: Stack) -> None:
    stack._start(
        "beat-2",
        [str(BIN / "celery"), "-A", "owlai", "beat", "-l", "info", "-s", str(stack.tmp / "beat-2-schedule")]
        + ["--max-interval", "1"],
    )


def get(stack: Stack, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stack.port}{path}", timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def readyz(stack: Stack) -> tuple[int, dict]:
    status, body = get(stack, "/readyz")
    return status, json.loads(body)


def metric(stack: Stack, name: str, **labels) -> float | None:
    status, body = get(stack, "/metrics")
    assert status == 200
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def test_with_beat_and_a_worker_killed_the_other_worker_fails_the_lost_turns(bare_stack, django_user_model):
    stack = bare_stack
    stack.start_worker(2, name="worker")
    stack.start_beat()
    wait_for(lambda: readyz(stack)[0] == 200, 30, f"ready: {readyz(stack)}")

    staff = staff_with_grant(django_user_model)
    clients = clients_for(stack, staff, 2)
    stack.model.delay = 40  # turns are mid-flight when their worker dies
    results: list[list[dict]] = [[], []]

    def ask(n: int) -> None:
        results[n] = clients[n].ask(f"고객이 몇 명이야? ({n})", timeout=60)

    askers = [threading.Thread(target=ask, args=(n,)) for n in range(2)]
    for asker in askers:
        asker.start()
    wait_for(lambda: Turn.objects.filter(status=TurnStatus.RUNNING).count() == 2, 20, "both turns running")

    # A second worker (supervised elsewhere) is up; then beat and the first worker die.
    stack.start_worker(1, name="worker-b")
    wait_for(lambda: ProcessHeartbeat.objects.filter(kind="worker").count() == 2, 30, "second worker heartbeat")
    runs_before = SweepLease.objects.get(name=RECOVERY).runs
    stack.kill("beat")
    stack.kill("worker")
    killed = time.monotonic()
    for asker in askers:
        asker.join(70)
    took = time.monotonic() - killed

    for events in results:
        assert events, "the client saw no end of its turn"
        assert events[-1] == {**events[-1], "type": "turn.finished", "status": "failed"}
        assert events[-2]["type"] == "error" and events[-2]["code"] == "worker_lost"
    assert took < 60
    # Recovery went on without beat: the surviving worker's timer ran it.
    assert SweepLease.objects.get(name=RECOVERY).runs > runs_before
    assert metric(stack, "owlai_sweep_runs_total", sweep=RECOVERY) > runs_before

    # The operator sees it: beat's heartbeat goes stale, the worker's does not.
    status, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(readyz(stack)), 30, "readyz 503")
    assert body["checks"]["beat"]["ok"] is False and body["checks"]["worker"]["ok"] is True
    assert body["checks"]["database"]["ok"] and body["checks"]["redis"]["ok"]
    assert metric(stack, "owlai_heartbeat_age_seconds", process="beat") >= 3

    # The conversations take new turns (on the surviving worker).
    stack.model.delay = 0
    try:
        again = clients[0].ask("다시 물어볼게", timeout=40)
    finally:
        for client in clients:
            client.close()
    assert again[-1]["status"] == "completed"
    assert ToolCallAudit.objects.count() == 1  # the lost turns were not re-run


def test_two_beats_never_run_a_sweep_twice_in_one_period(bare_stack, django_user_model):
    stack = bare_stack
    # Timers off: every recovery run comes from one of the two beats' messages.
    stack.env["OWLAI_SWEEP_TICK_SECONDS"] = "0"
    staff = staff_with_grant(django_user_model)
    stale = []
    for _ in range(3):
        turn = Turn.objects.create(conversation=conversation_create(owner=staff), status=TurnStatus.RUNNING)
        Turn.objects.filter(pk=turn.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
        stale.append(turn.pk)
    stack.start_worker(2, name="worker")
    stack.start_beat()
    start_second_beat(stack)

    wait_for(
        lambda: not Turn.objects.filter(pk__in=stale, status=TurnStatus.RUNNING).exists(), 40, "stale turns failed"
    )
    # Let both beats send a few more rounds each.
    wait_for(lambda: stack.procs["worker"].log.read_text().count("lease held elsewhere") >= 3, 40, "collisions")

    worker_log = stack.procs["worker"].log.read_text()
    sent = sum(p.read_text().count(f"Sending due task turn-recovery ({RECOVERY})") for p in stack.tmp.glob("beat*.log"))
    skipped = worker_log.count(f"sweep {RECOVERY}: lease held elsewhere")
    runs = SweepLease.objects.get(name=RECOVERY).runs
    assert runs >= 1 and skipped >= 3
    assert runs + skipped <= sent  # every message ran or was refused, none ran twice in a period
    # Each lost turn was failed once: one error, one end, whatever the number of beats.
    for turn_id in stale:
        assert Turn.objects.get(pk=turn_id).status == TurnStatus.FAILED
        assert TurnEvent.objects.filter(turn_id=turn_id, type="turn.finished").count() == 1
        assert TurnEvent.objects.filter(turn_id=turn_id, type="error").count() == 1


def test_turns_queued_when_redis_restarts_are_enqueued_again_at_once(bare_stack, django_user_model):
    """Redis without persistence loses the queued messages; the first worker
    to see the broker's new run id enqueues every queued turn again, long
    before OWLAI_TURN_QUEUE_SECONDS."""
    stack = bare_stack
    stack.env["OWLAI_TURN_QUEUE_SECONDS"] = "120"
    stack.start_worker(1, name="worker")  # one slot: the other turns wait in the queue
    stack.start_beat()
    wait_for(lambda: readyz(stack)[0] == 200, 30, f"ready: {readyz(stack)}")
    wait_for(lambda: SweepLease.objects.filter(name="broker-run-id").exists(), 30, "broker run id seen")

    staff = staff_with_grant(django_user_model)
    clients = clients_for(stack, staff, 5)
    stack.model.delay = 2
    results: list[list[dict]] = [[] for _ in clients]

    def ask(n: int) -> None:
        results[n] = clients[n].ask(f"고객이 몇 명이야? ({n})", timeout=80)

    askers = [threading.Thread(target=ask, args=(n,)) for n in range(len(clients))]
    for asker in askers:
        asker.start()
    # All five started (one running, four queued) before Redis goes: a turn
    # started while it is away is a different case (refused at its start).
    wait_for(
        lambda: Turn.objects.count() == 5 and Turn.objects.filter(status=TurnStatus.QUEUED).count() == 4,
        30,
        "one turn running, four queued",
    )
    assert metric(stack, "owlai_queue_depth") >= 1

    stack.kill("redis")
    status, body = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(readyz(stack)), 20, "readyz 503")
    assert body["checks"]["redis"]["ok"] is False and body["checks"]["database"]["ok"] is True
    assert metric(stack, "owlai_metrics_source_up", source="queue") == 0
    time.sleep(1)
    stack.model.delay = 0.2  # what is measured below is the platform's wait, not the model's
    stack.start_redis()  # empty: the queued messages are gone
    back = time.monotonic()

    # The fault's deadline (the 30 s), not the 120 s queue timeout
    # plus a sweep period: every turn has ended by then or the test fails.
    for asker in askers:
        asker.join(max(0.0, back + 30 - time.monotonic()))
    assert not any(asker.is_alive() for asker in askers), stack.logs()
    ends = [events[-1] for events in results if events]
    assert len(ends) == 5, stack.logs()
    queued_ends = [end for end in ends if end["status"] == "completed"]
    assert len(queued_ends) >= 4  # the queued turns ran; the one in flight may have failed visibly
    assert all(end["type"] == "turn.finished" for end in ends)
    assert not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists()
    assert "re-enqueueing queued turns" in stack.procs["worker"].log.read_text()
    # Every conversation takes a new turn.
    for client in clients:
        again = client.ask("한 번 더", timeout=60)
        assert again[-1]["type"] == "turn.finished" and again[-1]["status"] == "completed", again[-3:]
        client.close()
    wait_for(lambda: readyz(stack)[0] == 200, 30, "ready again")
