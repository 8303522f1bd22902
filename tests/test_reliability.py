"""Reliability on the production stack (daphne, a prefork Celery worker, beat,
PostgreSQL and an own redis-server this test may restart): under parallel
load every turn reaches `turn.finished` at its client; a worker killed with
-9 mid-turn fails its turn visibly and the conversation takes a new one; a
Redis restart mid-run loses and strands nothing. Intervals are shortened
through the environment, as an operator would."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.test import Client

from audit.models import ToolCallAudit
from chat.models import Turn, TurnEvent, TurnStatus
from chat.services import conversation_create
from tests.support.fake_llm import FakeLLMServer, Reply, text, tool_call
from tests.support.stack import Stack, process_env, scripted_provider
from tests.support.ws_client import ChatClient
from tests.test_e2e_chat import staff_with_grant

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SQL = "SELECT count(*) AS customers FROM customers"


class Model:
    """Answers every turn with one tool call, then text, after `delay`
    seconds; counts the tool calls it asked for."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.tool_calls = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        time.sleep(self.delay)
        if body["messages"][-1]["role"] == "tool":
            return text("고객은 모두 3명입니다.")
        with self.lock:
            self.tool_calls += 1
        return tool_call("run_sql", {"connection": "sales", "sql": SQL})


@pytest.fixture
def stack(tmp_path, require_postgres_app_db, require_redis, pg_customer_db):
    yield from _stack(tmp_path, pg_customer_db)


@pytest.fixture(params=["prefork", "threads"])
def pooled_stack(request, tmp_path, require_postgres_app_db, require_redis, pg_customer_db):
    # Fewer pooled connections than worker slots: threads borrow and return.
    yield from _stack(tmp_path, pg_customer_db, pool=request.param, concurrency=4, OWLAI_DB_POOL_SIZE="2")


def _stack(tmp_path, pg_customer_db, *, pool: str = "prefork", concurrency: int = 2, **env):
    model = Model()
    fake = FakeLLMServer().__enter__()
    fake.script = [model] * 1000
    config_path = scripted_provider(tmp_path, fake.base_url)

    stack = Stack(
        tmp_path,
        process_env(
            config_path,
            OWLAI_TEST_TARGET_DSN=pg_customer_db.dsn,
            # Shortened so a lost worker's turn fails in seconds, not a minute.
            OWLAI_TURN_HEARTBEAT_SECONDS="1",
            OWLAI_TURN_STALE_SECONDS="3",
            OWLAI_TURN_RECOVERY_SECONDS="1",
            OWLAI_TURN_QUEUE_SECONDS="4",
            **env,
        ),
    )
    stack.model = model
    stack.fake = fake
    try:
        with stack.running(pool=pool, concurrency=concurrency):
            yield stack
    finally:
        fake.__exit__(None, None, None)


def clients_for(stack, user, n: int) -> list[ChatClient]:
    web = Client()
    web.force_login(user)
    cookie = web.cookies["sessionid"].value
    return [ChatClient(stack.port, conversation_create(owner=user).pk, cookie) for _ in range(n)]


def run_parallel(clients: list[ChatClient], turns: int, timeout: float) -> list[list[list[dict]]]:
    def converse(client: ChatClient) -> list[list[dict]]:
        try:
            return [client.ask(f"고객이 몇 명이야? ({n})", timeout=timeout) for n in range(turns)]
        finally:
            client.close()

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        return list(pool.map(converse, clients))


def test_every_turn_of_parallel_conversations_reaches_its_client(stack, django_user_model):
    staff = staff_with_grant(django_user_model)
    clients = clients_for(stack, staff, 10)
    started = time.monotonic()
    try:
        results = run_parallel(clients, turns=2, timeout=45)
    except BaseException:
        print(stack.logs())
        raise
    turns = [turn for conversation in results for turn in conversation]
    assert len(turns) == 20
    assert all(t[-1]["type"] == "turn.finished" and t[-1]["status"] == "completed" for t in turns)
    assert Turn.objects.filter(status=TurnStatus.COMPLETED).count() == 20
    tool_finished = sum(1 for t in turns for e in t if e["type"] == "tool.finished")
    assert stack.model.tool_calls == ToolCallAudit.objects.count() == tool_finished == 20
    assert TurnEvent.objects.filter(type="tool.finished").count() == 20
    print(f"20 turns in {time.monotonic() - started:.1f}s, syncs {sum(c.syncs for c in clients)}")


def test_turns_run_on_a_connection_pool_in_web_and_workers(pooled_stack, django_user_model):
    """OWLAI_DB_POOL_SIZE: each process borrows from its own pool (prefork
    children do not share the parent's), fewer connections than worker slots."""
    staff = staff_with_grant(django_user_model)
    clients = clients_for(pooled_stack, staff, 6)
    results = run_parallel(clients, turns=2, timeout=45)
    turns = [turn for conversation in results for turn in conversation]
    assert len(turns) == 12
    assert all(t[-1]["type"] == "turn.finished" and t[-1]["status"] == "completed" for t in turns)
    assert pooled_stack.model.tool_calls == ToolCallAudit.objects.count() == 12
    assert "PoolTimeout" not in pooled_stack.logs()


def test_a_killed_worker_fails_its_turn_visibly_and_the_conversation_goes_on(stack, django_user_model):
    staff = staff_with_grant(django_user_model)
    (client,) = clients_for(stack, staff, 1)
    stack.model.delay = 30  # the model is slow: the turn is mid-flight when the worker dies

    def kill_when_running():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if Turn.objects.filter(status=TurnStatus.RUNNING).exists():
                time.sleep(0.5)
                stack.kill("worker")
                # A supervisor starts a new worker; it runs beat's recovery job.
                stack.start_worker()
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_when_running)
    killer.start()
    started = time.monotonic()
    try:
        lost = client.ask("고객이 몇 명이야?", timeout=40)
        took = time.monotonic() - started
        killer.join()
        stack.model.delay = 0
        again = client.ask("다시 물어볼게", timeout=30)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        client.close()
    assert lost[-1] == {**lost[-1], "type": "turn.finished", "status": "failed"}
    assert lost[-2]["type"] == "error" and lost[-2]["code"] == "worker_lost"
    assert took < 60
    assert again[-1]["status"] == "completed"
    assert ToolCallAudit.objects.count() == 1  # the lost turn made no tool call; it was not re-run


def test_a_redis_restart_loses_no_turn(stack, django_user_model):
    staff = staff_with_grant(django_user_model)
    clients = clients_for(stack, staff, 4)
    stack.model.delay = 2  # turns are in flight when Redis goes

    def restart_soon():
        time.sleep(1.0)
        stack.restart_redis(down_seconds=1.0)

    restarter = threading.Thread(target=restart_soon)
    restarter.start()
    try:
        results = run_parallel(clients, turns=2, timeout=50)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        restarter.join()
    turns = [turn for conversation in results for turn in conversation]
    assert len(turns) == 8 and all(t[-1]["type"] == "turn.finished" for t in turns)
    assert not Turn.objects.filter(status__in=[TurnStatus.QUEUED, TurnStatus.RUNNING]).exists()
    # Turns that were in flight may fail (their worker lost the broker), but
    # never silently: each client saw how its turn ended, as stored.
    for t in turns:
        stored = Turn.objects.get(pk=t[-1]["turn_id"])
        assert stored.status == t[-1]["status"]
    completed = sum(t[-1]["status"] == "completed" for t in turns)
    print(f"after a Redis restart: {completed}/8 completed, reconnects {sum(c.reconnects for c in clients)}")
    assert json.dumps(turns)  # frames are plain JSON
