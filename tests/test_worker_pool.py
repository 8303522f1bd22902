"""The worker pool of the production profile (README "Production profile"):
turns run in a Celery `threads` pool, so turns waiting on a slow model run
side by side instead of queueing behind worker slots; a turn waiting on its
model holds no database connection; one heartbeat thread per worker keeps
every running turn's heartbeat fresh, and a worker killed mid-turn still
fails its turn visibly."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.conf import settings
from django.db import connection as django_connection

from chat.models import Turn, TurnStatus
from tests.support.fake_llm import FakeLLMServer, text
from tests.support.stack import Stack, process_env, scripted_provider
from tests.test_reliability import clients_for, run_parallel

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

THREADS = 16


@pytest.fixture
def stack(tmp_path, require_postgres_app_db, require_redis):
    """The production stack (tests.support.stack) with its worker in the
    threads pool, intervals shortened as in test_reliability."""

    fake = FakeLLMServer().__enter__()
    config_path = scripted_provider(tmp_path, fake.base_url)
    stack = Stack(
        tmp_path,
        process_env(
            config_path,
            OWLAI_TURN_HEARTBEAT_SECONDS="1",
            OWLAI_TURN_STALE_SECONDS="3",
            OWLAI_TURN_RECOVERY_SECONDS="1",
            OWLAI_TURN_QUEUE_SECONDS="4",
        ),
    )
    stack.fake = fake
    try:
        with stack.running(concurrency=THREADS, pool="threads"):
            yield stack
    finally:
        fake.__exit__(None, None, None)


class SlowText:
    """Answers with text after `delay` seconds; counts calls in flight."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def __call__(self, body: dict):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
        finally:
            with self.lock:
                self.in_flight -= 1
        return text("답변입니다.")


def _db_connections() -> int:
    db = settings.DATABASES["default"]
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres") as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
            [django_connection.settings_dict["NAME"]],
        ).fetchone()
    return count


def test_turns_waiting_on_a_slow_model_run_side_by_side_with_bounded_db_connections(stack, django_user_model):
    user = django_user_model.objects.create_user("pool-user", is_staff=True)
    model = SlowText(delay=1.0)
    stack.fake.script = [model] * 100
    clients = clients_for(stack, user, 8)
    # Warm up the worker (imports, first connections) with one turn.
    run_parallel(clients[:1], turns=1, timeout=30)
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], _db_connections())

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        results = run_parallel(clients, turns=1, timeout=30)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stop.set()
        watcher.join()
    wall = time.monotonic() - started
    assert all(conversation[-1][-1]["status"] == "completed" for conversation in results)
    serial = 8 * model.delay
    print(f"8 turns with a 1 s model: {wall:.1f}s (serial {serial:.0f}s), {model.most_in_flight} model calls at once")
    assert wall < 5.0 < serial
    assert model.most_in_flight >= 4
    # Threads may hold a connection while they do database work, never one
    # per thread while they wait; plus daphne, beat, the heartbeat thread,
    # this test's own and the watcher's.
    assert peak[0] <= THREADS + 8, peak[0]


def test_a_turn_claimed_by_a_pool_thread_is_heartbeated_and_a_killed_worker_still_fails_it(stack, django_user_model):
    user = django_user_model.objects.create_user("pool-user", is_staff=True)
    stack.fake.script = [SlowText(delay=30)] + [SlowText(delay=0)] * 10
    (client,) = clients_for(stack, user, 1)
    outcome: dict = {}

    def ask() -> None:
        try:
            outcome["events"] = client.ask("천천히 답해줘", timeout=45)
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    asker = threading.Thread(target=ask)
    asker.start()
    deadline = time.monotonic() + 20
    while not Turn.objects.filter(status=TurnStatus.RUNNING).exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    turn = Turn.objects.get(status=TurnStatus.RUNNING)
    first = turn.heartbeat_at
    time.sleep(2.5)  # heartbeat every 1 s (the stack's environment)
    assert Turn.objects.get(pk=turn.pk).heartbeat_at > first  # beaten while its thread waits on the model

    stack.kill("worker")
    stack.start_worker(THREADS, pool="threads")  # a supervisor's new worker runs beat's recovery job
    asker.join(timeout=45)
    try:
        events = outcome["events"]
    except KeyError:
        print(stack.logs())
        raise AssertionError(f"the client saw no end of its turn: {outcome.get('error')!r}") from None
    assert events[-1]["status"] == "failed" and events[-2]["code"] == "worker_lost"
    again = client.ask("다시", timeout=30)
    client.close()
    assert again[-1]["status"] == "completed"
