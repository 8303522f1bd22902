"""Connectors end to end on the production stack: a real websocket client,
daphne, a Celery worker (and beat), its own Redis, PostgreSQL, the scripted
model recording every request body, and real MCP servers (the people server
on loopback HTTP for an internal-only connector, and as a stdio subprocess
the worker starts for an open one).

- A public-tier turn never sees the internal-only connector: not in any
  request body, before or after a tool search, not even in a refusal; a
  private-tier turn finds and calls its tools; connector personal data is
  masked in every request body.
- Approvals over the websocket: approve, always allow (then auto-approved),
  revocation (asked again), deny, repeated-denial auto-block and expiry, each
  with its audit event and no arguments in any audit field.
- A worker killed while a turn waits for approval loses nothing: the
  decision resumes the turn on a new worker."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from django.test import Client
from django.urls import reverse
from websockets.sync.client import connect

from audit.models import AuditEvent, ToolCallAudit
from chat.models import ToolApproval, Turn, TurnStatus
from chat.services import conversation_create
from governance.models import LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.support.connector_world import (
    ALL_MODELS,
    EMAIL,
    PERSONAL,
    PHONE,
    RRN,
    add_connector,
    set_policy,
    two_tier_config,
)
from tests.support.fake_llm import FakeLLMServer, text, tool_call
from tests.support.mcp_servers import http_server, stdio_command_toml
from tests.support.stack import Stack, process_env

pytestmark = [
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(420),
]

CRM_SUMMARY = "인사·고객 CRM (내부 전용)"
PRIVATE, PUBLIC = "onprem/inhouse-model", "cloud/cloud-model"
# What a public-tier turn must never carry: the internal-only connector's
# name (as a tool prefix or in the prompt), its summary, its tools' words.
INTERNAL = ["crm__", "- crm:", CRM_SUMMARY, "[connector crm;"]


class Script:
    """Replies per model (each a Reply or a function of the request body),
    and every request body per model."""

    def __init__(self) -> None:
        self.queues: dict[str, list] = {"inhouse-model": [], "cloud-model": []}
        self.bodies: dict[str, list[dict]] = {"inhouse-model": [], "cloud-model": []}
        self.lock = threading.Lock()

    def __call__(self, body: dict):
        with self.lock:
            self.bodies[body["model"]].append(body)
            queue = self.queues[body["model"]]
            reply = queue.pop(0) if queue else text("(script exhausted)")
        return reply(body) if callable(reply) else reply

    def then(self, model: str, *replies) -> None:
        with self.lock:
            self.queues[model].extend(replies)


class Socket:
    """One websocket of a conversation: frames in order, `state` skipped."""

    def __init__(self, port: int, conversation_id, cookie: str) -> None:
        self.ws = connect(
            f"ws://127.0.0.1:{port}/ws/chat/{conversation_id}/",
            additional_headers={"Cookie": f"sessionid={cookie}"},
            origin=f"http://127.0.0.1:{port}",
            open_timeout=20,
        )

    def send(self, frame: dict) -> None:
        self.ws.send(json.dumps(frame))

    def until(self, kind: str, timeout: float = 90) -> list[dict]:
        frames: list[dict] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                frame = json.loads(self.ws.recv(timeout=max(0.1, min(2.0, deadline - time.monotonic()))))
            except TimeoutError:
                continue
            if frame["type"] == "state":
                continue
            frames.append(frame)
            if frame["type"] == kind:
                return frames
            if frame["type"] == "error" and "seq" not in frame:
                raise AssertionError(f"refused frame: {frame}")
        raise AssertionError(f"no {kind} within {timeout}s: {[f['type'] for f in frames]}")

    def ask(self, question: str, model: str = PRIVATE, until: str = "turn.finished") -> list[dict]:
        self.send({"type": "turn.start", "text": question, "model": model})
        return self.until(until)

    def decide(self, approval_id: str, decision: str) -> list[dict]:
        self.send({"type": "approval.decide", "approval_id": approval_id, "decision": decision})
        return self.until("turn.finished")

    def close(self) -> None:
        self.ws.close()


def kinds(frames: list[dict]) -> list[str]:
    return [f["type"] for f in frames if f["type"] != "message.delta"]


def finished_tools(frames: list[dict]) -> list[tuple[str, str]]:
    return [(f["tool"], f["outcome"]) for f in frames if f["type"] == "tool.finished"]


@pytest.fixture
def world(tmp_path, require_postgres_app_db, require_redis, settings, django_user_model):
    """People server on HTTP (internal-only `crm`), the same server as the
    worker's stdio subprocess (open `desk`), a user allowed both, the stack."""
    crm_record, desk_record = tmp_path / "crm.jsonl", tmp_path / "desk.jsonl"
    os.environ["OWLAI_TEST_MCP_RECORD"] = str(crm_record)
    people = http_server("people")
    server = people.__enter__()
    os.environ["OWLAI_TEST_MCP_RECORD"] = str(desk_record)  # what the worker passes to its stdio server
    fake = FakeLLMServer().__enter__()
    script = Script()
    fake.script = [script] * 10_000
    config = (
        two_tier_config(fake.base_url) + stdio_command_toml("people", "people") + 'env = ["OWLAI_TEST_MCP_RECORD"]\n'
    )
    config_path = tmp_path / "owlai.toml"
    config_path.write_text(config)
    settings.OWLAI_INSTALL = parse_install_config(config)
    install_config_sync(config=settings.OWLAI_INSTALL)
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))

    user = django_user_model.objects.create_user("conn-e2e", password="pw-e2e-123")
    role = Role.objects.create(name="conn-e2e-role")
    role.users.add(user)
    add_connector("crm", url=server.url, roles=[role], summary=CRM_SUMMARY)
    desk = add_connector("desk", command="people", roles=[role], exposure=ALL_MODELS, summary="상담 데스크")
    set_policy(desk, "echo", "require_approval")
    web = Client()
    web.force_login(user)

    class World:
        pass

    w = World()
    w.user, w.fake, w.script, w.web = user, fake, script, web
    w.cookie = web.cookies["sessionid"].value
    w.config_path, w.tmp = config_path, tmp_path
    w.desk_record = desk_record
    try:
        yield w
    finally:
        fake.__exit__(None, None, None)
        people.__exit__(None, None, None)
        os.environ.pop("OWLAI_TEST_MCP_RECORD", None)


def start_stack(world, **env) -> Stack:
    stack = Stack(
        world.tmp,
        process_env(
            world.config_path,
            OWLAI_APPROVAL_SWEEP_SECONDS="1",
            OWLAI_TURN_RECOVERY_SECONDS="2",
            # One socket starts many turns here, one after the other.
            OWLAI_WS_TURN_STARTS_PER_MINUTE="600",
            OWLAI_WS_TURN_START_BURST="50",
            **env,
        ),
    )
    return stack


def socket(world, stack) -> Socket:
    return Socket(stack.port, conversation_create(owner=world.user).pk, world.cookie)


def received(path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


def no_arguments_in_audit(*values: str) -> None:
    digests = list(ToolApproval.objects.values_list("arguments_digest", flat=True))
    dumped = json.dumps(
        [list(AuditEvent.objects.values()), list(ToolCallAudit.objects.values())], ensure_ascii=False, default=str
    )
    for value in [*values, *digests]:
        assert value not in dumped, value


def test_tiers_over_the_websocket(world):
    stack = start_stack(world, OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD="1")
    with stack.running():
        public = socket(world, stack)
        private = socket(world, stack)
        try:
            # Public: the search finds only the open connector's tools; the
            # one it loads is called and its personal data arrives masked.
            world.script.then(
                "cloud-model",
                tool_call("search_connector_tools", {"query": "customer contact card lookup"}),
                tool_call("desk__find_customer", {"name": "김민지"}),
                text("김민지 고객 정보를 찾았습니다."),
            )
            frames = public.ask("김민지 고객 연락처 찾아 줘", model=PUBLIC)
            assert frames[-1]["status"] == "completed", frames
            assert finished_tools(frames) == [("search_connector_tools", "success"), ("desk__find_customer", "success")]
            public_bodies = list(world.script.bodies["cloud-model"])
            assert len(public_bodies) == 3
            first_tools = [t["function"]["name"] for t in public_bodies[0]["tools"]]
            assert first_tools == ["search_connector_tools"]
            loaded = [t["function"]["name"] for t in public_bodies[2]["tools"]]
            assert "desk__find_customer" in loaded and not [n for n in loaded if n.startswith("crm")]
            dumped = json.dumps(public_bodies, ensure_ascii=False)
            assert not [s for s in INTERNAL if s in dumped], [s for s in INTERNAL if s in dumped]
            assert "상담 데스크" in dumped  # the open connector is listed with its summary

            # A name learnt elsewhere: refused with the words an unknown tool gets.
            world.script.then(
                "cloud-model",
                tool_call("crm__find_customer", {"name": "김민지"}, call_id="c1"),
                tool_call("nothing__find_customer", {"name": "김민지"}, call_id="c2"),
                text("그런 도구는 없습니다."),
            )
            frames = public.ask("crm__find_customer 를 불러 봐", model=PUBLIC)
            assert finished_tools(frames) == [("crm__find_customer", "denied"), ("nothing__find_customer", "denied")]
            bodies = world.script.bodies["cloud-model"][3:]
            results = [m["content"] for m in bodies[-1]["messages"] if m["role"] == "tool"][-2:]
            assert results[0] == results[1] and "crm" not in results[0]
            for body in bodies:  # everything but what the model itself wrote
                for message in body["messages"]:
                    if message["role"] != "assistant" and message["role"] != "user":
                        assert not [s for s in INTERNAL if s in json.dumps(message, ensure_ascii=False)]
                assert not [s for s in INTERNAL if s in json.dumps(body["tools"], ensure_ascii=False)]

            # Private: the search finds the internal-only connector's tools too.
            world.script.then(
                "inhouse-model",
                tool_call("search_connector_tools", {"query": "crm customer card"}),
                tool_call("crm__find_customer", {"name": "김민지"}, call_id="p1"),
                tool_call("crm__customer_card", {"name": "김민지"}, call_id="p2"),
                text("찾았습니다."),
            )
            frames = private.ask("내부 CRM 에서 김민지 고객 찾아 줘")
            assert frames[-1]["status"] == "completed", frames
            assert finished_tools(frames)[1:] == [("crm__find_customer", "success"), ("crm__customer_card", "success")]
            private_bodies = world.script.bodies["inhouse-model"]
            assert CRM_SUMMARY in private_bodies[0]["messages"][0]["content"]
            found = json.loads(private_bodies[1]["messages"][-1]["content"])
            assert {"crm__find_customer", "crm__customer_card"} <= {t["name"] for t in found["tools"]}
            results = [json.loads(m["content"]) for m in private_bodies[-1]["messages"] if m["role"] == "tool"]
            assert results[1]["structured"]["phone"].startswith("[전화번호-")
            assert results[2]["content"][0]["text"].endswith(results[1]["structured"]["phone"])
        finally:
            public.close()
            private.close()
    everything = world.fake.all_request_text()
    assert not [value for value in PERSONAL if value in everything]  # masked in every request body
    rows = list(ToolCallAudit.objects.order_by("id"))
    assert [(r.tool, r.call_outcome) for r in rows if r.tool.startswith("crm")] == [
        ("crm__find_customer", "denied"),
        ("crm__find_customer", "success"),
        ("crm__customer_card", "success"),
    ]
    denied = next(r for r in rows if r.tool == "crm__find_customer")
    assert denied.reason == "connector hidden from this tier"
    no_arguments_in_audit("김민지", PHONE, EMAIL, RRN)


def test_approval_flows_over_the_websocket(world):
    stack = start_stack(world, OWLAI_APPROVAL_SECONDS="8")
    mail = "desk__echo"
    with stack.running():
        sock = socket(world, stack)
        try:
            # Approve.
            world.script.then("inhouse-model", tool_call(mail, {"text": f"보고서 {PHONE}"}), text("보냈습니다."))
            waiting = sock.ask("보고서 보내 줘", until="approval.requested")
            request = waiting[-1]
            assert (request["tool"], request["connector"]) == (mail, "desk")
            # Shown as the model wrote it (no vault holds this phone): the
            # approver sees what will be sent.
            assert request["arguments"]["text"] == f"보고서 {PHONE}" and request["expires_in"] <= 8
            frames = sock.decide(request["approval_id"], "approve")
            assert kinds(frames) == ["approval.decided", "tool.finished", "message.completed", "turn.finished"]
            assert frames[0]["decision"] == "approved" and finished_tools(frames) == [(mail, "success")]

            # Always allow, then the next call runs without asking.
            world.script.then("inhouse-model", tool_call(mail, {"text": "둘째"}), text("보냈습니다."))
            request = sock.ask("또 보내 줘", until="approval.requested")[-1]
            assert sock.decide(request["approval_id"], "always_allow")[-1]["status"] == "completed"
            world.script.then("inhouse-model", tool_call(mail, {"text": "셋째"}), text("보냈습니다."))
            frames = sock.ask("하나 더")
            assert "approval.requested" not in kinds(frames) and finished_tools(frames) == [(mail, "success")]

            # Revoked on the API: asked again; denied twice, then blocked without asking.
            (grant,) = world.web.get(reverse("chat:always-allowed")).json()
            assert world.web.delete(reverse("chat:always-allowed-revoke", args=[grant["id"]])).status_code == 204
            for _ in range(2):
                world.script.then("inhouse-model", tool_call(mail, {"text": "넷째"}), text("보내지 않았습니다."))
                request = sock.ask("넷째도 보내 줘", until="approval.requested")[-1]
                frames = sock.decide(request["approval_id"], "deny")
                assert frames[0]["decision"] == "denied" and finished_tools(frames) == [(mail, "denied")]
            world.script.then("inhouse-model", tool_call(mail, {"text": "넷째"}), text("막혔습니다."))
            frames = sock.ask("넷째 다시")
            assert "approval.requested" not in kinds(frames) and finished_tools(frames) == [(mail, "denied")]

            # Nobody answers: the expiry job ends the wait and the turn goes on.
            world.script.then("inhouse-model", tool_call(mail, {"text": "다섯째"}), text("답이 없어 그만둡니다."))
            waited = time.monotonic()
            sock.ask("다섯째", until="approval.requested")
            frames = sock.until("turn.finished", timeout=60)
            assert time.monotonic() - waited >= 7
            assert frames[0]["type"] == "approval.decided" and frames[0]["decision"] == "expired"
            assert finished_tools(frames) == [(mail, "denied")] and frames[-1]["status"] == "completed"

            # An answer to a request no longer open: an error frame, the socket stays.
            sock.send({"type": "approval.decide", "approval_id": request["approval_id"], "decision": "approve"})
            assert sock.until("error")[-1]["code"] == "approval_refused"
            sock.send({"type": "approval.decide", "approval_id": "x", "decision": "approve"})
            assert sock.until("error")[-1]["code"] == "bad_event"
        finally:
            sock.close()
    assert received(world.desk_record) == [f"보고서 {PHONE}", "둘째", "셋째"]
    events = list(AuditEvent.objects.filter(kind__in=_APPROVAL_KINDS).order_by("id").values_list("kind", flat=True))
    assert events == [
        "approval_approved",
        "approval_always_allowed",
        "approval_auto_approved",
        "always_allow_revoked",
        "approval_denied",
        "approval_denied",
        "approval_auto_blocked",
        "approval_expired",
    ]
    no_arguments_in_audit("보고서", "둘째", "셋째", "넷째", "다섯째", PHONE)


_APPROVAL_KINDS = [
    "approval_approved",
    "approval_always_allowed",
    "approval_denied",
    "approval_expired",
    "approval_auto_approved",
    "approval_auto_blocked",
    "always_allow_revoked",
]


def test_a_worker_killed_while_a_turn_waits_loses_nothing(world):
    stack = start_stack(world, OWLAI_TURN_HEARTBEAT_SECONDS="1", OWLAI_TURN_STALE_SECONDS="3")
    mail = "desk__echo"
    with stack.running():
        sock = socket(world, stack)
        try:
            world.script.then("inhouse-model", tool_call(mail, {"text": "재시작 후에도"}), text("보냈습니다."))
            request = sock.ask("보내 줘", until="approval.requested")[-1]
            stack.kill("worker")
            time.sleep(5)  # longer than a stale heartbeat: recovery must leave the waiting turn alone
            turn = Turn.objects.get()
            assert turn.status == TurnStatus.WAITING_APPROVAL and turn.loop_state["pending"]
            stack.start_worker(name="worker-2")
            frames = sock.decide(request["approval_id"], "approve")
        finally:
            sock.close()
    assert kinds(frames) == ["approval.decided", "tool.finished", "message.completed", "turn.finished"]
    assert frames[-1]["status"] == "completed" and finished_tools(frames) == [(mail, "success")]
    assert received(world.desk_record) == ["재시작 후에도"]  # the call ran once
    assert len(world.script.bodies["inhouse-model"]) == 2  # the first model call was not made again
    (row,) = ToolCallAudit.objects.all()
    assert row.call_outcome == "success"
