"""Model and audit faults on the production stack: daphne, a prefork Celery
worker and beat (tests/support/stack.py, with an own redis-server), the test
PostgreSQL database, a real websocket client, and the scripted model server
on loopback. Deadlines are shortened through the worker's environment, as an
operator would; time bounds are generous (3x the deadline + 5 s).

Every model fault and every unwritable audit record ends the turn visibly at
the client (an `error` event, then `turn.finished` with status `failed`) with
the reason in words; a call the executor refuses (an 8 MB tool argument, a
DELETE full of NUL bytes and lone surrogates) is recorded as `denied`, the
model is told, and the turn goes on, as the README says. In every case the
conversation takes a new turn afterwards, and no customer query ran
unrecorded: every audit attempt has its outcome or shows "no outcome
recorded", and every tool call the model asked for has its audit row (unless
the audit trail itself was unwritable, in which case nothing ran).

"Nothing reached the customer database" is observed: the `vault` connection's
DSN points at a canary listener that counts every connection made to it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from django.conf import settings
from django.test import Client

from audit.models import NO_OUTCOME, Outcome, ToolCallAudit
from chat.models import Turn, TurnStatus
from chat.services import conversation_create
from governance.models import DbConnection, DbGrant, LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.conftest import app_db_is_postgres
from tests.support import fake_llm
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.fault_helpers import (
    CountingScript,
    app_db_dsn,
    assert_no_query_ran_unrecorded,
    failure,
    in_turn_language,
    rss_kib,
    table_locked,
    wait_exit,
)
from tests.support.stack import BIN, ROOT, Stack
from tests.support.ws_client import ChatClient
from tests.test_audit_db_guards import insert_revoked, pg  # noqa: F401 (pg: fixture)
from tests.test_audit_write_path import Canary
from tests.test_e2e_chat import staff_with_grant

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

FIRST_BYTE, IDLE, TOTAL, LOCK_MS = 2, 2, 8, 500
FAST_ENV = {
    "OWLAI_MODEL_CONNECT_SECONDS": "2",
    "OWLAI_MODEL_FIRST_BYTE_SECONDS": str(FIRST_BYTE),
    "OWLAI_MODEL_IDLE_SECONDS": str(IDLE),
    "OWLAI_MODEL_TOTAL_SECONDS": str(TOTAL),
    "OWLAI_MODEL_RETRY_BASE_SECONDS": "0.1",
    "OWLAI_AUDIT_LOCK_TIMEOUT_MS": str(LOCK_MS),
    "OWLAI_AUDIT_STATEMENT_TIMEOUT_MS": "3000",
    # These tests start several turns on one socket in quick succession; the
    # per-socket turn-start limit is tested elsewhere (tests/test_socket_limits.py).
    "OWLAI_WS_TURN_STARTS_PER_MINUTE": "600",
    "OWLAI_WS_TURN_START_BURST": "100",
}


def bound(deadline: float) -> float:
    return 3 * deadline + 5


SQL = "SELECT count(*) AS customers FROM customers"
MiB = 1024 * 1024


def _stack_env(fake: FakeLLMServer, config_path, target_dsn: str, canary: Canary, *, db_user: str | None) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": app_db_dsn(db_user).replace("postgresql://", "postgres://", 1),
        "SECRET_KEY": settings.SECRET_KEY,
        "OWLAI_CONFIG": str(config_path),
        "OWLAI_TEST_TARGET_DSN": target_dsn,
        "OWLAI_TEST_CANARY_DSN": canary.dsn,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DB_CONN_MAX_AGE": "0",
        "OWLAI_DB_ROLE_CHECK": "1" if db_user else "0",
        **FAST_ENV,
    }


def _config(fake: FakeLLMServer) -> str:
    return f"""
[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "{fake.base_url}"
models = ["inhouse-model"]
"""


def wait_ready(worker, timeout: float = 30) -> None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if "ready." in worker.log.read_text():
            return
        if worker.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"the worker did not start:\n{worker.log.read_text()[-4000:]}")


def _start(tmp, *, pg_customer_db, db_user: str | None = None, beat: bool = True):
    if not app_db_is_postgres():
        pytest.skip("needs DATABASE_URL pointing at PostgreSQL (run `make test`)")
    fake = FakeLLMServer().__enter__()
    canary = Canary()
    config_path = tmp / "owlai.toml"
    config_path.write_text(_config(fake))
    stack = Stack(tmp, _stack_env(fake, config_path, pg_customer_db.dsn, canary, db_user=db_user))
    stack.fake, stack.canary, stack.customer_db = fake, canary, pg_customer_db
    try:
        stack.start_redis()
        stack.start_web()
        stack.start_worker(concurrency=2)
        wait_ready(stack.procs["worker"])  # so a turn's time is the fault's, not the worker's start-up
        if beat:
            stack.start_beat()
    except BaseException:
        print(stack.logs())
        stack.close()
        canary.close()
        fake.__exit__(None, None, None)
        raise
    return stack


def _stop(stack) -> None:
    try:
        stack.close()
    finally:
        stack.canary.close()
        stack.fake.__exit__(None, None, None)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, django_db_setup, pg_customer_db):
    """One stack for the module (the worker's memory is watched across cases);
    each test sets up its database rows again (transactional tests flush)."""
    stack = _start(tmp_path_factory.mktemp("faults-stack"), pg_customer_db=pg_customer_db)
    yield stack
    _stop(stack)


class World:
    """One user with grants on `sales` (the real customer DB) and `vault` (the
    canary), a conversation, and a websocket client; `script(...)` sets what
    the model answers and counts the tool calls it asks for."""

    def __init__(self, stack, user_model) -> None:
        self.stack = stack
        install_config_sync(config=parse_install_config(_config(stack.fake)))
        feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
        self.user = staff_with_grant(user_model)
        vault = DbConnection.objects.create(
            name="vault", engine="postgresql", dsn_env="OWLAI_TEST_CANARY_DSN", business_summary="고객"
        )
        DbGrant.objects.create(role=Role.objects.get(name="e2e-role"), connection=vault, whole_database=True)
        web = Client()
        web.force_login(self.user)
        self.cookie = web.cookies["sessionid"].value
        self.client = ChatClient(stack.port, conversation_create(owner=self.user).pk, self.cookie)
        self.counter = CountingScript()
        stack.fake.requests.clear()
        stack.fake.script = []

    def script(self, *steps) -> None:
        self.stack.fake.script = self.counter.wrap(list(steps))

    def ask(self, question: str, timeout: float = 45) -> tuple[list[dict], float]:
        started = time.monotonic()
        try:
            events = self.client.ask(question, timeout=timeout)
        except BaseException:
            print(self.stack.logs())
            raise
        return events, time.monotonic() - started

    def works_again(self) -> None:
        """The conversation takes a new turn, with a governed query on the real customer DB."""
        self.script(tool_call("run_sql", {"connection": "sales", "sql": SQL}), text("고객은 모두 3명입니다."))
        events, _took = self.ask("다시 물어볼게")
        assert events[-1]["status"] == "completed", events[-3:]
        finished = [e for e in events if e["type"] == "tool.finished"]
        assert [(e["outcome"], e["row_count"]) for e in finished] == [("success", 1)]


@pytest.fixture
def world(stack, django_user_model):
    w = World(stack, django_user_model)
    yield w
    w.client.close()


# --- 1. model faults ---------------------------------------------------------------

MODEL_FAULTS = {
    # name: (scripted steps, model requests made, message id, params, deadline for the bound)
    "http_500_after_retries": (
        [fake_llm.status(500)] * 3,
        3,
        "the model server answered with HTTP status %(status)d.",
        {"status": 500},
        TOTAL,
    ),
    "malformed_json": ([fake_llm.malformed()], 1, "the model server sent a malformed chunk.", {}, FIRST_BYTE),
    "html_200": (
        [fake_llm.html()],
        1,
        "the model server sent %(type)s instead of a streamed answer.",
        {"type": "text/html"},
        FIRST_BYTE,
    ),
    "cut_stream": ([fake_llm.cut()], 1, "the model's answer was cut off before it finished.", {}, FIRST_BYTE),
    "silence": (
        [fake_llm.silence(30)],
        1,
        "the model did not start answering within %(seconds)s seconds.",
        {"seconds": f"{FIRST_BYTE:g}"},
        FIRST_BYTE,
    ),
    "keep_alive_drip": (
        [fake_llm.drip(30, content="잠시만요", interval=0.1)],
        1,
        "the model stopped sending for more than %(seconds)s seconds.",
        {"seconds": f"{IDLE:g}"},
        IDLE,
    ),
}


@pytest.mark.parametrize("case", MODEL_FAULTS)
def test_a_model_fault_fails_the_turn_visibly_in_time_and_the_conversation_goes_on(world, case):
    steps, requests, msgid, params, deadline = MODEL_FAULTS[case]
    world.script(*steps)
    events, took = world.ask("고객이 몇 명이야?")
    error, finished = failure(events)
    expected = in_turn_language(finished["turn_id"], msgid, **params)
    assert expected in error["message"], (expected, error["message"])
    assert took < bound(deadline), took
    assert len(world.stack.fake.requests) == requests  # 5xx retried, nothing else
    turn = Turn.objects.get(pk=finished["turn_id"])
    assert (turn.status, turn.error) == (TurnStatus.FAILED, error["message"])
    world.works_again()
    assert_no_query_ran_unrecorded(requested=world.counter.tool_calls)
    print(f"{case}: failed in {took:.1f}s: {error['message']}")


def test_huge_answer_and_huge_tool_argument_keep_the_worker_memory_bounded(world):
    """A 10 MB answer fails the turn at the answer cap; an 8 MB tool argument
    stops reading at the argument cap and is refused unparsed (one audited
    `denied` row, the model told), then the model answers. The worker tree's
    resident memory grows by less than 100 MiB across both."""
    worker = world.stack.procs["worker"].pid
    world.works_again()  # warm: the pool has imported and connected
    before = rss_kib(worker)

    fake = world.stack.fake
    seen = len(fake.sent_bytes)
    world.script(fake_llm.huge_text(10 * MiB, piece=64 * 1024))
    events, took = world.ask("긴 답을 줘")
    error, finished = failure(events)
    cap = settings.OWLAI_MODEL_ANSWER_MAX_CHARS
    expected = in_turn_language(
        finished["turn_id"], "the model's answer exceeded %(max)d characters and was stopped.", max=cap
    )
    assert expected in error["message"]
    assert took < bound(TOTAL), took
    # (max: a reply of an earlier case, e.g. silence, may still be finishing)
    sent = max(fake.wait_sent(seen + 1)[seen:])
    seen = len(fake.sent_bytes)
    assert sent < 10 * MiB  # reading stopped early: the worker never took in the whole answer

    world.script(fake_llm.huge_tool_argument(8 * MiB), text("너무 긴 질의였습니다."))
    events, took = world.ask("큰 질의를 실행해")
    assert events[-1]["status"] == "completed", events[-3:]
    assert [(e["outcome"], e["row_count"]) for e in events if e["type"] == "tool.finished"] == [("denied", None)]
    assert took < bound(TOTAL), took
    (row,) = ToolCallAudit.objects.filter(turn_id=events[-1]["turn_id"])
    assert (row.outcome, row.call_outcome, row.tool) == (Outcome.DENIED, Outcome.DENIED, "run_sql")
    assert "arguments longer than" in row.reason
    told = world.stack.fake.requests[-1]["messages"][-1]
    refused = in_turn_language(
        events[-1]["turn_id"],
        "arguments longer than %(limit)s characters; send a shorter call",
        limit=settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS,
    )
    assert told["role"] == "tool" and refused in json.loads(told["content"])["error"]
    sent = max(fake.wait_sent(seen + 1)[seen:])
    assert sent < 8 * MiB

    after = rss_kib(worker)
    growth = sum(after.values()) - sum(before.get(p, 0) for p in after)
    print(f"worker tree VmRSS KiB before {before} after {after}: growth {growth / 1024:.1f} MiB")
    assert growth < 100 * 1024, (before, after)
    world.works_again()
    assert_no_query_ran_unrecorded(requested=world.counter.tool_calls)


# --- 2. audit faults ---------------------------------------------------------------


def test_a_locked_audit_table_fails_the_turn_closed_and_nothing_reaches_the_customer_db(world):
    canary = world.stack.canary
    world.script(tool_call("run_sql", {"connection": "vault", "sql": SQL}), text("(should not be asked)"))
    contacts = canary.contacts
    log = world.stack.procs["worker"].log
    timeouts = log.read_text().count("canceling statement due to lock timeout")
    with table_locked(app_db_dsn(), "audit_toolcallaudit"):
        events, took = world.ask("고객이 몇 명이야?", timeout=30)
        time.sleep(LOCK_MS / 1000)  # still held well past the lock timeout
    error, finished = failure(events)
    expected = in_turn_language(
        finished["turn_id"], "The action could not be recorded in the audit log, so its result was withheld."
    )
    assert error["message"] == expected
    assert LOCK_MS / 1000 <= took < bound(LOCK_MS / 1000), took
    # The worker gave up on the lock (its lock_timeout), it did not wait for the release.
    assert log.read_text().count("canceling statement due to lock timeout") > timeouts
    assert canary.contacts == contacts  # the customer database was never contacted
    assert not ToolCallAudit.objects.exists()  # the attempt could not be written, so nothing ran
    assert len(world.stack.fake.requests) == 1  # the model never saw a result
    assert_no_query_ran_unrecorded(requested=world.counter.tool_calls, written=False)

    # Positive control: with the lock gone the same call reaches the canary,
    # after its attempt row was written (the canary hangs up, so the account
    # check cannot pass: its outcome record says `denied`).
    world.script(tool_call("run_sql", {"connection": "vault", "sql": SQL}), text("연결이 되지 않습니다."))
    events, _took = world.ask("다시 해 봐")
    assert events[-1]["status"] == "completed", events[-3:]
    assert canary.contacts > contacts
    (attempt,) = ToolCallAudit.objects.all()
    assert attempt.outcome == Outcome.STARTED and attempt.call_outcome in (Outcome.DENIED, Outcome.FAILED)
    world.counter.tool_calls -= 1  # the locked turn's call: refused unrecorded by design (nothing ran)
    world.works_again()
    assert_no_query_ran_unrecorded(requested=world.counter.tool_calls)


def test_a_locked_outcome_table_withholds_the_result_and_the_attempt_shows_no_outcome(world):
    """The attempt is recorded, the query runs, its outcome cannot be
    written: the result is withheld (the model never reads it), the turn
    fails visibly, and the audit screens show "no outcome recorded"."""
    world.script(tool_call("run_sql", {"connection": "sales", "sql": SQL}), text("(should not be asked)"))
    with table_locked(app_db_dsn(), "audit_toolcalloutcome"):
        events, took = world.ask("고객이 몇 명이야?", timeout=30)
    error, finished = failure(events)
    assert error["message"] == in_turn_language(
        finished["turn_id"], "The action could not be recorded in the audit log, so its result was withheld."
    )
    assert LOCK_MS / 1000 <= took < bound(LOCK_MS / 1000), took
    (attempt,) = ToolCallAudit.objects.all()
    assert (attempt.outcome, attempt.call_outcome, attempt.sql_text) == (Outcome.STARTED, NO_OUTCOME, SQL)
    assert len(world.stack.fake.requests) == 1  # the result never reached the model
    assert_no_query_ran_unrecorded(requested=world.counter.tool_calls, told=False)
    world.works_again()


NASTY_DELETE = "DELETE FROM customers WHERE name = 'a\x00b\ud800c' /* \udfff */"


def test_nul_bytes_and_lone_surrogates_in_a_refused_delete_are_recorded_sanitised(world):
    before = world.stack.customer_db.fingerprint()
    world.script(tool_call("run_sql", {"connection": "sales", "sql": NASTY_DELETE}), text("삭제는 할 수 없습니다."))
    events, _took = world.ask("김민준을 지워 줘")
    assert events[-1]["status"] == "completed", events[-3:]
    assert [(e["outcome"]) for e in events if e["type"] == "tool.finished"] == ["denied"]
    (row,) = ToolCallAudit.objects.all()
    assert (row.outcome, row.call_outcome) == (Outcome.DENIED, Outcome.DENIED)
    assert row.sql_text == "DELETE FROM customers WHERE name = 'a\ufffdb\ufffdc' /* \ufffd */"
    told = world.stack.fake.requests[-1]["messages"][-1]
    refused = in_turn_language(events[-1]["turn_id"], "not a read-only query: %(reason)s", reason="").strip()
    assert told["role"] == "tool" and refused in json.loads(told["content"])["error"]
    assert world.stack.customer_db.fingerprint() == before
    world.works_again()
    assert_no_query_ran_unrecorded(requested=world.counter.tool_calls)


@pytest.fixture
def app_stack(pg, tmp_path, pg_customer_db):  # noqa: F811 (pg: fixture)
    """Web and worker connected as the production application role (the
    audit set-up applied, the start-up role check on)."""
    stack = _start(tmp_path, pg_customer_db=pg_customer_db, db_user=pg.app, beat=False)
    yield stack
    _stop(stack)


def test_insert_revoked_from_the_worker_role_fails_closed_and_a_new_worker_refuses_to_start(
    pg,  # noqa: F811
    app_stack,
    django_user_model,
):
    w = World(app_stack, django_user_model)
    try:
        w.works_again()  # the application role runs a governed turn
        contacts = app_stack.canary.contacts
        with insert_revoked(pg, "audit_toolcallaudit"):
            w.script(tool_call("run_sql", {"connection": "vault", "sql": SQL}), text("(should not be asked)"))
            events, took = w.ask("고객이 몇 명이야?", timeout=30)
            error, finished = failure(events)
            assert error["message"] == in_turn_language(
                finished["turn_id"], "The action could not be recorded in the audit log, so its result was withheld."
            )
            assert took < bound(LOCK_MS / 1000)
            assert "permission denied for table audit_toolcallaudit" in app_stack.procs["worker"].log.read_text()
            assert app_stack.canary.contacts == contacts
            assert ToolCallAudit.objects.count() == 1  # only the first turn's
            # A worker started now refuses, saying why.
            log = app_stack.tmp / "worker-refused.log"
            refused = subprocess.Popen(
                [str(BIN / "celery"), "-A", "owlai", "worker", "-P", "solo", "-Q", "owlai-refused", "-l", "info"],
                cwd=ROOT,
                env=app_stack.env,
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = wait_exit(refused, 30)
            finally:
                if refused.poll() is None:
                    refused.kill()
                    refused.wait(10)
            output = log.read_text()
            assert code not in (None, 0), output[-2000:]
            assert "OwlAI worker refused to start" in output
            assert "cannot INSERT into audit table audit_toolcallaudit" in output
        w.counter.tool_calls -= 1  # the refused call: no row by design, nothing ran
        w.works_again()
        assert_no_query_ran_unrecorded(requested=w.counter.tool_calls)
        assert NO_OUTCOME not in {r.call_outcome for r in ToolCallAudit.objects.all()}
    finally:
        w.client.close()
