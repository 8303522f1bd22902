"""Database faults on the production stack: daphne, a Celery worker with the
threads pool (README production profile), an own redis-server, no beat (so
nothing but the turn itself can end it), and the scripted model on loopback.

The machine's PostgreSQL and MariaDB are shared: they are never restarted.
Every database the stack reaches goes through its own fault proxy process
(tests/support/fault_proxy.py) that can reset every connection and refuse
new ones for a while (a restart), or stop forwarding while keeping the
connections open (a network gone silent):

- the application database restarts (3 s) while turns wait on a customer
  query and on their model: every spanning turn ends in its own words within
  seconds of the database's return (not "worker lost" after the heartbeat
  goes stale), nothing runs unrecorded or twice, and every socket's next turn
  starts and completes (the web threads' kept connections are replaced);
- a customer PostgreSQL / MariaDB connection goes silent mid-query: the call
  fails at its statement timeout plus the margin with a reason, the server's
  session is gone, and the worker thread goes on with the turn;
- an unreachable customer server fails the call (not "denied") within the
  connect timeout.

Time bounds are generous (the deadline + 10 s); the ~47 s of "worker lost"
and the never-ending calls these faults cost before are far outside them.
"""

from __future__ import annotations

import os
import threading
import time

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from audit.models import NO_OUTCOME, Outcome, ToolCallAudit
from chat.models import Turn, TurnStatus
from chat.services import conversation_create
from governance.models import DbConnection, DbGrant, LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.conftest import app_db_is_postgres
from tests.support import fake_llm
from tests.support.customer_dbs import _mysql_admin
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.fault_helpers import app_db_dsn, in_turn_language, table_locked
from tests.support.fault_proxy import FaultProxy
from tests.support.stack import Stack
from tests.support.ws_client import ChatClient
from tests.test_e2e_chat import staff_with_grant
from tests.test_reliability_faults import wait_ready

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CONNECT, MARGIN = 2, 3  # the customer-DB connect timeout and deadline margin the stack runs with
SLACK = 10
DOWN = 3  # the application database's restart
SQL = "SELECT count(*) AS customers, 'tag-7c1e' AS tag FROM customers"
TAG = "tag-7c1e"
# How a turn the restart spanned may end, if not completed: the audit record
# that could not be written (its result withheld), or the database itself.
TRUTHFUL_FAILURES = (
    "The action could not be recorded in the audit log, so its result was withheld.",
    "The platform's database could not be reached, so the turn was stopped. Please ask again.",
)


class Router(list):
    """A model script that never runs out: each request is answered by
    `route(body)` (the question decides what the model does)."""

    def __init__(self, route) -> None:
        super().__init__([route])

    def pop(self, index: int = -1):
        return self[0]


def _question(body: dict) -> str:
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")


def route(body: dict):
    question = _question(body)
    if body["messages"][-1]["role"] == "tool":
        return text("조회를 마쳤습니다.")
    if question.startswith("천천히"):
        return fake_llm.stall("생각하는 중입니다. ", 8)
    if question.startswith("조회 "):
        return tool_call("run_sql", {"connection": question.split()[1], "sql": SQL})
    return text("네, 말씀하세요.")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, django_db_setup, pg_customer_db, mysql_customer_db):
    """One stack for the module; each test sets up its rows again
    (transactional tests flush)."""
    if not app_db_is_postgres():
        pytest.skip("needs DATABASE_URL pointing at PostgreSQL (run `make test`)")
    tmp = tmp_path_factory.mktemp("db-faults")
    app = connection.settings_dict
    proxies = {
        "app": FaultProxy(app["HOST"] or "127.0.0.1", int(app["PORT"] or 5432), tmp / "proxy-app.log"),
        "pg": FaultProxy("127.0.0.1", 5432, tmp / "proxy-pg.log"),
        "my": FaultProxy("127.0.0.1", 3306, tmp / "proxy-my.log"),
        "dead": FaultProxy("127.0.0.1", 5432, tmp / "proxy-dead.log"),
    }
    proxies["dead"].send("blackhole")  # accepts, never answers: a server that cannot be reached
    fake = FakeLLMServer().__enter__()
    config_path = tmp / "owlai.toml"
    config_path.write_text(_config(fake))
    app_dsn = app_db_dsn().replace("postgresql://", "postgres://", 1)
    host_port = f"{app['HOST'] or '127.0.0.1'}:{app['PORT'] or 5432}"
    env = {
        "DATABASE_URL": app_dsn.replace(host_port, f"127.0.0.1:{proxies['app'].port}", 1),
        "SECRET_KEY": settings.SECRET_KEY,
        "OWLAI_CONFIG": str(config_path),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        # The default set-up: web threads keep their connections for a minute.
        "DB_CONN_MAX_AGE": "60",
        "OWLAI_DB_ROLE_CHECK": "0",
        "OWLAI_TEST_TARGET_DSN": _via(pg_customer_db.dsn, proxies["pg"]),
        "OWLAI_TEST_MYSQL_DSN": _via(mysql_customer_db.dsn, proxies["my"]),
        "OWLAI_TEST_DEAD_PG_DSN": _via(pg_customer_db.dsn, proxies["dead"]),
        "OWLAI_TEST_DEAD_MYSQL_DSN": _via(mysql_customer_db.dsn, proxies["dead"]),
        "OWLAI_CUSTOMER_DB_CONNECT_SECONDS": str(CONNECT),
        "OWLAI_CUSTOMER_DB_MARGIN_SECONDS": str(MARGIN),
        "OWLAI_WS_TURN_STARTS_PER_MINUTE": "600",
        "OWLAI_WS_TURN_START_BURST": "100",
    }
    stack = Stack(tmp, {**os.environ, **env})
    stack.fake, stack.proxies = fake, proxies
    stack.pg_db, stack.my_db = pg_customer_db, mysql_customer_db
    try:
        stack.start_redis()
        stack.start_web()
        stack.start_worker(concurrency=4, pool="threads")
        wait_ready(stack.procs["worker"])
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()
        fake.__exit__(None, None, None)
        for proxy in proxies.values():
            proxy.close()


def _via(dsn: str, proxy: FaultProxy) -> str:
    """`dsn` with its host and port replaced by the proxy's."""
    head, rest = dsn.split("@", 1)
    _hostport, path = rest.split("/", 1)
    return f"{head}@127.0.0.1:{proxy.port}/{path}"


def _config(fake: FakeLLMServer) -> str:
    return f"""
[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "{fake.base_url}"
models = ["inhouse-model"]
"""


class World:
    """A user with grants on `sales` (PostgreSQL), `shop` (MariaDB) and two
    servers that cannot be reached, and `sockets` chat sockets (one
    conversation each)."""

    def __init__(self, stack, user_model, sockets: int = 1) -> None:
        self.stack = stack
        install_config_sync(config=parse_install_config(_config(stack.fake)))
        feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
        self.user = staff_with_grant(user_model)
        role = Role.objects.get(name="e2e-role")
        for name, engine, env in (
            ("shop", "mysql", "OWLAI_TEST_MYSQL_DSN"),
            ("gone", "postgresql", "OWLAI_TEST_DEAD_PG_DSN"),
            ("gonemy", "mysql", "OWLAI_TEST_DEAD_MYSQL_DSN"),
        ):
            target = DbConnection.objects.create(name=name, engine=engine, dsn_env=env, business_summary="고객")
            DbGrant.objects.create(role=role, connection=target, whole_database=True)
        web = Client()
        web.force_login(self.user)
        cookie = web.cookies["sessionid"].value
        self.clients = [ChatClient(stack.port, conversation_create(owner=self.user).pk, cookie) for _ in range(sockets)]
        stack.fake.requests.clear()
        stack.fake.script = Router(route)
        for proxy in stack.proxies.values():
            if proxy is not stack.proxies["dead"]:
                proxy.send("pass")

    def timeout(self, name: str, ms: int) -> None:
        DbConnection.objects.filter(name=name).update(statement_timeout_ms=ms)

    def ask(self, question: str, client: int = 0, timeout: float = 60) -> tuple[list[dict], float]:
        started = time.monotonic()
        try:
            events = self.clients[client].ask(question, timeout=timeout)
        except BaseException:
            print(self.stack.logs())
            raise
        return events, time.monotonic() - started

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture
def world(stack, django_user_model):
    w = World(stack, django_user_model, sockets=3)
    yield w
    w.close()


def finished_steps(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "tool.finished"]


def sessions(db, *, waiting: bool = False) -> list[tuple]:
    """The customer PostgreSQL database's sessions opened by OwlAI."""
    sql = "SELECT pid, state, wait_event_type FROM pg_stat_activity WHERE datname = %s AND application_name = %s"
    name = db.admin_dsn.rsplit("/", 1)[1]
    with psycopg.connect(db.admin_dsn, autocommit=True) as conn:
        rows = conn.execute(sql, [name, "owlai-dbexec"]).fetchall()
    return [r for r in rows if r[2] == "Lock"] if waiting else rows


def mysql_sessions(db) -> list[tuple]:
    """The customer MariaDB database's sessions of its reader account."""
    reader = db.dsn.split("//", 1)[1].split(":", 1)[0]
    conn = _mysql_admin()
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT id, command, state FROM information_schema.processlist WHERE user = %s", (reader,))
            return list(cursor.fetchall())
    finally:
        conn.close()


def wait_for(predicate, timeout: float, what: str):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


# --- 1. the application database restarts -------------------------------------------


def test_an_application_database_restart_ends_spanning_turns_in_words_and_the_next_turns_start(world):
    stack = world.stack
    world.timeout("sales", 60_000)  # the customer query outlasts the restart
    for n in range(3):  # every socket (and the web threads it used) has a kept connection
        events, _took = world.ask("안녕하세요", client=n)
        assert events[-1]["status"] == "completed", events[-3:]
    stack.proxies["pg"].send(f"watch {TAG}")

    results: dict[int, list[dict]] = {}
    ended: dict[int, float] = {}

    def ask(n: int, question: str) -> None:
        results[n], _took = world.ask(question, client=n, timeout=90)
        ended[n] = time.monotonic()

    with table_locked(stack.pg_db.admin_dsn, "customers"):
        askers = [
            threading.Thread(target=ask, args=(0, "조회 sales")),
            threading.Thread(target=ask, args=(1, "조회 sales")),
        ]
        for asker in askers:
            asker.start()
        # Both customer queries wait on the lock, their attempts recorded.
        wait_for(lambda: len(sessions(stack.pg_db, waiting=True)) == 2, 30, "two queries waiting on the lock")
        slow = threading.Thread(target=ask, args=(2, "천천히 생각해 줘"))
        slow.start()
        askers.append(slow)
        time.sleep(1)  # the slow turn is accepted and waits on its model
        stack.proxies["app"].send(f"refuse {DOWN}")  # every connection reset, new ones refused
        time.sleep(DOWN + 0.5)
        back = time.monotonic()
    # The lock is gone: the customer queries finish, on connections the
    # restart broke in the worker.
    for asker in askers:
        asker.join(60)
    assert set(results) == {0, 1, 2}, (results.keys(), stack.logs())

    for n, events in results.items():
        finished = events[-1]
        assert finished["type"] == "turn.finished", events[-3:]
        assert ended[n] - back < 8 + SLACK, (n, ended[n] - back)  # the slow model's 8 s, not the ~47 s of "worker lost"
        turn = Turn.objects.get(pk=finished["turn_id"])
        assert turn.status == finished["status"]
        if turn.status == TurnStatus.FAILED:
            # In its own words: the audit record that could not be written, or the database.
            error = next(e for e in events if e["type"] == "error")
            assert error["message"] == turn.error
            assert turn.error in (
                in_turn_language(
                    turn.pk, "The action could not be recorded in the audit log, so its result was withheld."
                ),
                in_turn_language(
                    turn.pk, "The platform's database could not be reached, so the turn was stopped. Please ask again."
                ),
            ), turn.error
        else:
            assert turn.status == TurnStatus.COMPLETED, (turn.status, turn.error)
        print(f"turn {turn.pk}: {turn.status} {ended[n] - back:.1f}s after the database's return: {turn.error}")

    # Nothing ran unrecorded or twice: one attempt per customer query, each
    # sent to the customer database once.
    rows = list(ToolCallAudit.objects.filter(tool="run_sql").order_by("id"))
    assert len(rows) == 2, [(r.pk, r.outcome) for r in rows]
    assert all(r.call_outcome in (Outcome.SUCCESS, NO_OUTCOME) for r in rows), [r.call_outcome for r in rows]
    assert stack.proxies["pg"].send("seen") == "ok 2"

    # The next turn on every socket starts and works (no internal_error:
    # each web thread's kept connection is checked and replaced).
    for n in range(3):
        events, _took = world.ask("조회 sales", client=n)
        assert events[-1]["status"] == "completed", events[-3:]
        assert [e["outcome"] for e in finished_steps(events)] == ["success"]


# --- 2. a customer connection goes silent mid-query --------------------------------


def test_a_customer_postgresql_connection_cut_mid_query_fails_the_call_at_its_deadline(world):
    stack = world.stack
    timeout_ms = 2000
    world.timeout("sales", timeout_ms)
    with table_locked(stack.pg_db.admin_dsn, "customers"):
        asker = threading.Thread(target=lambda: world.__dict__.update(result=world.ask("조회 sales", timeout=60)))
        asker.start()
        wait_for(lambda: sessions(stack.pg_db, waiting=True), 30, "the query waiting on the lock")
        cut = time.monotonic()
        stack.proxies["pg"].send("blackhole")  # nothing reaches either side any more
    # The query now runs and answers, into the void; its session waits in
    # its transaction, holding its lock.
    asker.join(60)
    events, _took = world.result
    took = time.monotonic() - cut
    assert events[-1]["status"] == "completed", events[-3:]  # the worker thread went on with the turn
    assert [e["outcome"] for e in finished_steps(events)] == ["failed"]
    assert took < timeout_ms / 1000 + MARGIN + SLACK, took
    (row,) = ToolCallAudit.objects.filter(tool="run_sql")
    assert row.call_outcome == Outcome.FAILED
    assert "did not answer within 5 seconds" in row.call_reason, row.call_reason
    # The server ended the session itself (our goodbye never arrived).
    wait_for(lambda: not sessions(stack.pg_db), MARGIN + SLACK, "the customer session ended on the server")
    with psycopg.connect(stack.pg_db.admin_dsn) as admin:
        admin.execute("SET lock_timeout = '1s'")
        admin.execute("LOCK TABLE customers IN ACCESS EXCLUSIVE MODE")  # no lock left behind
    stack.proxies["pg"].send("pass")
    events, _took = world.ask("조회 sales")
    assert [e["outcome"] for e in finished_steps(events)] == ["success"]


def test_a_customer_mariadb_connection_cut_mid_query_fails_with_a_reason(world):
    stack = world.stack
    world.timeout("shop", 2000)
    world.ask("조회 shop")  # warm: the account check is made (and cached)
    admin = _mysql_admin(stack.my_db.admin_dsn.rsplit("/", 1)[1])
    try:
        with admin.cursor() as cursor:
            cursor.execute("LOCK TABLES customers WRITE")
        asker = threading.Thread(target=lambda: world.__dict__.update(result=world.ask("조회 shop", timeout=60)))
        asker.start()
        wait_for(
            lambda: any("lock" in (state or "").lower() for _id, _cmd, state in mysql_sessions(stack.my_db)),
            30,
            "the query waiting on the table lock",
        )
        cut = time.monotonic()
        stack.proxies["my"].send("blackhole")
        with admin.cursor() as cursor:
            cursor.execute("UNLOCK TABLES")
    finally:
        admin.close()
    asker.join(60)
    events, _took = world.result
    assert events[-1]["status"] == "completed", events[-3:]
    assert [e["outcome"] for e in finished_steps(events)] == ["failed"]
    assert time.monotonic() - cut < 2 + MARGIN + SLACK
    row = ToolCallAudit.objects.filter(tool="run_sql").order_by("-id").first()
    assert row.call_outcome == Outcome.FAILED
    assert "did not answer within 5 seconds" in row.call_reason, row.call_reason
    wait_for(lambda: not mysql_sessions(stack.my_db), MARGIN + SLACK, "the customer session ended on the server")
    stack.proxies["my"].send("pass")
    events, _took = world.ask("조회 shop")
    assert [e["outcome"] for e in finished_steps(events)] == ["success"]


# --- 3. an unreachable customer server ----------------------------------------------


@pytest.mark.parametrize("name", ["gone", "gonemy"])
def test_an_unreachable_customer_server_fails_the_call_within_the_connect_timeout(world, name):
    events, took = world.ask(f"조회 {name}")
    assert events[-1]["status"] == "completed", events[-3:]
    (step,) = finished_steps(events)
    assert step["outcome"] == "failed", step
    assert took < CONNECT + SLACK, took
    (row,) = ToolCallAudit.objects.filter(tool="run_sql")
    assert (row.outcome, row.call_outcome) == (Outcome.STARTED, Outcome.FAILED)
    assert f"could not be reached, or refused the connection, within {CONNECT} seconds" in row.call_reason
