"""The agent API on the production stack (daphne, a Celery worker,
PostgreSQL, Redis, the scripted local model server that records every
request, the people MCP server over HTTP as a connector whose `echo` needs
approval): a script with a token starts a turn, streams it to its end as
Server-Sent Events and answers its approval on the way; the same question
asked over the websocket leaves the same audit rows. And the `openai`
Python client talks to the /v1 facade, streaming and not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.test import Client
from websockets.sync.client import connect

from accounts.models import TokenScope
from accounts.services import api_token_create
from audit.models import AuditEvent, ToolCallAudit
from chat.models import Conversation, Turn, TurnStatus
from chat.services import conversation_create
from governance.models import LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.support.browser import browser_stack_running
from tests.support.connector_world import ALL_MODELS, add_connector, recording_people_server
from tests.support.fake_llm import text, tool_call
from tests.test_e2e_chat import staff_with_grant

pytestmark = [
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.timeout(300),
]

ROOT = Path(__file__).resolve().parent.parent
MAIL = "mailer__echo"
QUESTION = "김민준 고객 연락처 찾고 회의록 메일 보내 줘"
CUSTOMER_SQL = "SELECT name, phone FROM customers WHERE id = 1"
CUSTOMER_PHONE = "010-1234-5678"  # tests/support/customer_dbs.py


@pytest.fixture(scope="module")
def people_http(tmp_path_factory):
    with recording_people_server(tmp_path_factory.mktemp("mcp")) as server:
        yield server


@pytest.fixture(scope="module")
def stack(tmp_path_factory, django_db_setup, pg_customer_db):
    """One stack for the module (redis, daphne, a threads-pool worker, the
    scripted model server): starting daphne and a worker is the slow part."""
    with browser_stack_running(tmp_path_factory.mktemp("agentapi-stack"), pg_customer_db) as running:
        yield running


@pytest.fixture
def world(stack, people_http, transactional_db, django_user_model):
    """The install config synced (the scripted `inhouse-model` the chat
    default); e2e-staff may query `sales` and use the `mailer` connector,
    whose `echo` requires approval; a token with the agent scope."""
    install_config_sync(config=parse_install_config(stack.config_text))
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
    fake = stack.fake
    fake.script, fake.delay = [], 0.0
    fake.requests.clear()
    staff = staff_with_grant(django_user_model)
    role = Role.objects.get(name="e2e-role")
    add_connector("mailer", url=people_http.url, roles=[role], exposure=ALL_MODELS, policy="require_approval")
    _, key = api_token_create(user=staff, name="report script", actor=staff, scopes=[TokenScope.AGENT])
    return {
        "staff": staff,
        "key": key,
        "base": stack.base_url,
        "port": stack.stack.port,
        "fake": fake,
        "logs": stack.stack.logs,
    }


def script_one_turn(fake) -> None:
    """A query that reads a phone number, a call that needs approval, then
    the answer."""
    fake.script += [
        tool_call("run_sql", {"connection": "sales", "sql": CUSTOMER_SQL}, "c1"),
        tool_call(MAIL, {"text": "회의록: 김민준 고객에게 연락하기"}, "c2"),
        text("고객은 3명이고 회의록을 보냈습니다."),
    ]


def websocket_turn(world, conversation) -> list[dict]:
    """The page's way: turn.start, approve over the socket, to turn.finished."""
    client = Client()
    client.force_login(world["staff"])
    events: list[dict] = []
    with connect(
        f"ws://127.0.0.1:{world['port']}/ws/chat/{conversation.pk}/",
        additional_headers={"Cookie": f"sessionid={client.cookies['sessionid'].value}"},
        origin=world["base"],
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps({"type": "turn.start", "text": QUESTION}))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            event = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if event["type"] == "state":
                continue
            events.append(event)
            if event["type"] == "approval.requested":
                ws.send(
                    json.dumps({"type": "approval.decide", "approval_id": event["approval_id"], "decision": "approve"})
                )
            if event["type"] == "turn.finished":
                return events
    raise AssertionError(f"no turn.finished: {events}")


def sse_events(response: httpx.Response):
    """(id, event, data) of each Server-Sent Event, as they arrive."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                yield fields.get("id"), fields.get("event"), json.loads(fields["data"])
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def api_turn(world, conversation) -> tuple[dict, list[tuple]]:
    """A script's way: start the turn with the token, stream its events,
    answer the approval with another request while the stream stays open."""
    headers = {"Authorization": f"Bearer {world['key']}"}
    with httpx.Client(base_url=world["base"], headers=headers, timeout=90) as http:
        started = http.post("/api/agent/turns/", json={"text": QUESTION, "conversation_id": str(conversation.pk)})
        assert started.status_code == 201, started.text
        started = started.json()
        received = []
        with http.stream("GET", started["stream_url"], headers={"Accept": "text/event-stream"}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for seq, kind, frame in sse_events(response):
                received.append((seq, kind, frame))
                if kind == "approval.requested":
                    decided = http.post(f"/api/agent/approvals/{frame['approval_id']}/", json={"decision": "approve"})
                    assert decided.status_code == 200, decided.text
                    assert decided.json()["status"] == "approved"
        # Polling gives the same events, numbered the same.
        polled = http.get(started["events_url"], params={"after_seq": 0}).json()
    assert polled["finished"] and polled["status"] == "completed"
    assert [e["seq"] for e in polled["events"]] == [int(seq) for seq, _, _ in received]
    return started, received


def comparable(row: ToolCallAudit) -> dict:
    """An audit row but its ids, times and conversation/turn (which differ by construction)."""
    skip = {"id", "created_at", "conversation_id", "turn_id", "duration_ms"}
    fields = {f.attname: getattr(row, f.attname) for f in ToolCallAudit._meta.concrete_fields if f.attname not in skip}
    return fields | {"call_outcome": row.call_outcome, "call_row_count": row.call_row_count}


def test_a_script_with_a_token_streams_a_turn_answers_its_approval_and_leaves_the_websocket_turns_audit(world):
    fake = world["fake"]
    script_one_turn(fake)
    script_one_turn(fake)
    by_socket = conversation_create(owner=world["staff"])
    by_script = conversation_create(owner=world["staff"])
    try:
        socket_events = websocket_turn(world, by_socket)
        started, received = api_turn(world, by_script)
    except Exception:
        print(world["logs"]())
        raise

    # The same protocol: the stream's event names and ids are the stored
    # events' types and seqs, ending with turn.finished completed.
    kinds = [kind for _, kind, _ in received]
    assert kinds[0] == "turn.accepted" and kinds[-1] == "turn.finished", kinds
    assert received[-1][2]["status"] == "completed"
    assert {"tool.started", "tool.finished", "approval.requested", "approval.decided", "message.completed"} <= set(
        kinds
    )
    assert [k for k in kinds if k != "message.delta"] == [
        e["type"] for e in socket_events if e["type"] not in ("message.delta", "turn.started")
    ]
    assert all(frame["seq"] == int(seq) and frame["type"] == kind for seq, kind, frame in received)
    answer = next(frame for _, kind, frame in received if kind == "message.completed")["text"]
    assert answer == "고객은 3명이고 회의록을 보냈습니다."
    # Masking: the model read the phone number only as a token, in both
    # turns, and the script's stream never carried it either.
    assert CUSTOMER_PHONE not in fake.all_request_text()
    assert fake.all_request_text().count("[전화번호") >= 2
    assert CUSTOMER_PHONE not in json.dumps(received, ensure_ascii=False)
    requested = next(frame for _, kind, frame in received if kind == "approval.requested")

    turn = Turn.objects.get(pk=started["turn_id"])
    assert turn.status == TurnStatus.COMPLETED and str(turn.conversation_id) == started["conversation_id"]
    assert turn.origin == Turn.objects.get(conversation=by_socket).origin == "chat"

    # The audit rows match the websocket turn's, row for row, apart from ids.
    socket_rows = [comparable(r) for r in ToolCallAudit.objects.filter(conversation_id=by_socket.pk).order_by("id")]
    script_rows = [comparable(r) for r in ToolCallAudit.objects.filter(conversation_id=by_script.pk).order_by("id")]
    assert [r["tool"] for r in script_rows] == ["run_sql", MAIL]
    assert script_rows == socket_rows
    # The approval was recorded the same way, by the same person.
    approvals = AuditEvent.objects.filter(kind="approval_approved").order_by("id")
    assert [(e.actor_username, e.details["tool_name"]) for e in approvals] == [("e2e-staff", MAIL)] * 2
    # And every request of the script is on the record as the token's.
    used = AuditEvent.objects.filter(kind="api_token_used").values_list("details", flat=True)
    paths = [d["path"] for d in used]
    assert "/api/agent/turns/" in paths and f"/api/agent/approvals/{requested['approval_id']}/" in paths


def test_the_openai_client_talks_to_the_facade_streaming_and_not(world):
    from openai import OpenAI

    fake = world["fake"]
    fake.script += [
        tool_call("run_sql", {"connection": "sales", "sql": "SELECT count(*) AS customers FROM customers"}),
        text("고객은 모두 3명입니다."),
        text("다시 세어도 3명입니다."),
    ]
    client = OpenAI(base_url=world["base"] + "/v1", api_key=world["key"], max_retries=0, timeout=90)
    assert "inhouse-model" in [m.id for m in client.models.list()]

    first = client.chat.completions.create(
        model="inhouse-model", messages=[{"role": "user", "content": "고객이 몇 명이야?"}]
    )
    assert first.choices[0].message.content == "고객은 모두 3명입니다."
    extra = first.model_extra["owlai"]
    assert extra["status"] == "completed"
    conversation = Conversation.objects.get(pk=extra["conversation_id"])
    assert conversation.owner == world["staff"]

    # The conversation id round-trips: the streamed answer continues it.
    chunks = list(
        client.chat.completions.create(
            model="inhouse-model",
            messages=[{"role": "user", "content": "다시 세어 줘"}],
            stream=True,
            metadata={"conversation_id": extra["conversation_id"]},
        )
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == "다시 세어도 3명입니다."
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert {c.model_extra["owlai"]["conversation_id"] for c in chunks} == {extra["conversation_id"]}
    turns = Turn.objects.filter(conversation=conversation).order_by("created_at")
    assert [t.status for t in turns] == [TurnStatus.COMPLETED, TurnStatus.COMPLETED]
    # The model got the conversation's own history, not the client's: the
    # second request carries the first question and answer as stored.
    history = [m.get("content") for m in fake.requests[-1]["messages"]]
    assert "고객이 몇 명이야?" in history and "고객은 모두 3명입니다." in history
    assert ToolCallAudit.objects.filter(conversation_id=conversation.pk).count() == 1

    # A call that needs approval ends the completion with the request; the
    # script answers it and follows the rest of the turn on its stream.
    fake.script += [tool_call(MAIL, {"text": "회의록"}, "c9"), text("회의록을 보냈습니다.")]
    waiting = client.chat.completions.create(
        model="inhouse-model",
        messages=[{"role": "user", "content": "회의록 메일 보내 줘"}],
        extra_headers={"X-OwlAI-Conversation": extra["conversation_id"]},
    )
    asked = waiting.model_extra["owlai"]
    assert asked["status"] == "waiting_approval" and asked["approval"]["tool"] == MAIL
    assert asked["approval"]["approval_id"] in waiting.choices[0].message.content
    headers = {"Authorization": f"Bearer {world['key']}"}
    with httpx.Client(base_url=world["base"], headers=headers, timeout=90) as http:
        decided = http.post(f"/api/agent/approvals/{asked['approval']['approval_id']}/", json={"decision": "approve"})
        assert decided.status_code == 200
        with http.stream("GET", f"/api/agent/turns/{asked['turn_id']}/stream/") as response:
            rest = [(kind, frame) for _, kind, frame in sse_events(response)]
    assert next(frame for kind, frame in rest if kind == "approval.decided")["decision"] == "approved"
    assert rest[-1][0] == "turn.finished" and rest[-1][1]["status"] == "completed"
    assert next(frame for kind, frame in rest if kind == "message.completed")["text"] == "회의록을 보냈습니다."


def readme_block(name: str, fence: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = readme[readme.index(start) + len(start) : readme.index(end)].strip()
    return block.removeprefix(f"```{fence}").removesuffix("```").strip("\n") + "\n"


def test_the_readmes_curl_and_openai_examples_run_as_written(world, tmp_path):
    fake = world["fake"]
    fake.script += [text("고객은 3명입니다."), text("도시별로 나눴습니다."), text("주문은 3건입니다.")]
    env = {**os.environ, "OWLAI_URL": world["base"], "OWLAI_TOKEN": world["key"], "OWLAI_MODEL": "inhouse-model"}
    env.pop("DJANGO_SETTINGS_MODULE", None)

    curl = subprocess.run(
        ["bash", "-e", "-c", readme_block("agentapi-curl", "sh")], env=env, capture_output=True, text=True, timeout=120
    )
    assert curl.returncode == 0, curl.stderr
    events = [json.loads(line.removeprefix("data: ")) for line in curl.stdout.splitlines() if line.startswith("data: ")]
    assert events[0]["type"] == "turn.accepted" and events[-1] == {
        **events[-1],
        "type": "turn.finished",
        "status": "completed",
    }
    assert next(e for e in events if e["type"] == "message.completed")["text"] == "고객은 3명입니다."

    script = tmp_path / "example.py"
    script.write_text(readme_block("agentapi-openai", "python"))
    python = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180)
    assert python.returncode == 0, python.stderr
    assert python.stdout.splitlines() == ["도시별로 나눴습니다.", "주문은 3건입니다."]
    # Both answers in one conversation, the script's first message asked as written.
    conversations = Conversation.objects.filter(owner=world["staff"])
    asked = {c.pk: list(Turn.objects.filter(conversation=c)) for c in conversations}
    assert sorted(len(turns) for turns in asked.values()) == [1, 2]
    assert any("SELECT city" in json.dumps(r["messages"], ensure_ascii=False) for r in fake.requests)
