"""End to end on the production stack: a real websocket client against a
running ASGI server (daphne), a real Celery worker, PostgreSQL and Redis, and
the real OpenAI-compatible client talking to a scripted local server that
records every request."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from websockets.sync.client import connect

from audit.models import ToolCallAudit
from chat.models import Turn
from chat.services import conversation_create
from governance.models import DbConnection, DbGrant, Role
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.stack import free_port, process_env, scripted_provider, wait_for_port

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@contextlib.contextmanager
def running_stack(
    tmp_path, target_dsn: str, *, db_user: str | None = None, role_check: bool = False, tier: str = "private"
):
    """Config file, scripted model server, daphne and a Celery worker, the two
    processes connected as `db_user` (default: the test database's user)."""
    fake = FakeLLMServer().__enter__()
    config_path = scripted_provider(tmp_path, fake.base_url, tier=tier)
    run_id = uuid.uuid4().hex[:8]
    env = process_env(
        config_path,
        db_user=db_user,
        REDIS_URL=settings.REDIS_URL,
        OWLAI_CHANNEL_PREFIX=f"owlai-e2e-{run_id}",
        OWLAI_CELERY_QUEUE=f"owlai-e2e-{run_id}",
        OWLAI_TEST_TARGET_DSN=target_dsn,
        # As the test superuser the start-up role check must be off; as a
        # production application role it stays on.
        OWLAI_DB_ROLE_CHECK="1" if role_check else "0",
    )
    port = free_port()
    web_log, worker_log = tmp_path / "daphne.log", tmp_path / "worker.log"
    web = subprocess.Popen(
        [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "owlai.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=web_log.open("w"),
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            str(BIN / "celery"),
            "-A",
            "owlai",
            "worker",
            "-P",
            "solo",
            "-Q",
            env["OWLAI_CELERY_QUEUE"],
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=worker_log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, web, web_log)
        yield {"port": port, "fake": fake, "logs": (web_log, worker_log), "worker": worker}
    finally:
        for proc in (web, worker):
            proc.terminate()
        for proc in (web, worker):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        fake.__exit__(None, None, None)


@pytest.fixture
def stack(tmp_path, require_postgres_app_db, require_redis, pg_customer_db):
    # The customer DB is reached with a SELECT-only account, as the README
    # asks; the executor refuses a superuser DSN.
    with running_stack(tmp_path, pg_customer_db.dsn) as running:
        yield running


def staff_with_grant(django_user_model):
    staff = django_user_model.objects.create_user("e2e-staff", password="pw-e2e-123")
    target = DbConnection.objects.create(
        name="sales", engine="postgresql", dsn_env="OWLAI_TEST_TARGET_DSN", business_summary="고객과 주문"
    )
    role = Role.objects.create(name="e2e-role")
    role.users.add(staff)
    DbGrant.objects.create(role=role, connection=target, whole_database=True)
    return staff


def chat(port: int, conversation_id, cookie: str, frame: dict, timeout: float = 60) -> list[dict]:
    events: list[dict] = []
    with connect(
        f"ws://127.0.0.1:{port}/ws/chat/{conversation_id}/",
        additional_headers={"Cookie": f"sessionid={cookie}"},
        origin=f"http://127.0.0.1:{port}",
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps(frame))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if event["type"] == "state":  # the conversation as stored, sent on connect
                continue
            events.append(event)
            if event["type"] == "turn.finished":
                return events
    raise AssertionError(f"no turn.finished within {timeout}s: {events}")


def test_question_to_answer_through_worker_with_one_audit_row(stack, django_user_model):
    ask_and_check_one_governed_turn(stack, django_user_model)


def ask_and_check_one_governed_turn(stack, django_user_model) -> None:
    staff = staff_with_grant(django_user_model)
    fake = stack["fake"]
    fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": "SELECT count(*) AS customers FROM customers"}),
        text("고객은 모두 3명입니다."),
    ]
    conversation = conversation_create(owner=staff)
    client = Client()
    client.force_login(staff)
    try:
        events = chat(
            stack["port"],
            conversation.pk,
            client.cookies["sessionid"].value,
            {"type": "turn.start", "text": "고객이 몇 명이야?"},
        )
    except Exception:
        for log in stack["logs"]:
            print(log.read_text()[-5000:])
        raise

    kinds = [e["type"] for e in events]
    assert kinds[0] == "turn.accepted" and kinds[-1] == "turn.finished", kinds
    assert events[-1]["status"] == "completed"
    finished = next(e for e in events if e["type"] == "tool.finished")
    assert (finished["outcome"], finished["row_count"]) == ("success", 1)
    answer = next(e for e in events if e["type"] == "message.completed")["text"]
    assert answer == "고객은 모두 3명입니다."

    rows = list(ToolCallAudit.objects.all())
    assert len(rows) == 1
    row = rows[0]
    turn = Turn.objects.get(conversation=conversation)
    assert (row.call_outcome, row.actor_id, row.turn_id, row.conversation_id) == (
        "success",
        staff.pk,
        turn.pk,
        conversation.pk,
    )
    assert row.tables == ["customers"] and row.call_row_count == 1

    assert len(fake.requests) == 2
    tool_messages = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert json.loads(tool_messages[0]["content"])["rows"] == [[3]]
