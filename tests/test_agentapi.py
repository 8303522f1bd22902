"""The agent API in-process: who may ask (a token with the `agent` scope of
an active user, nothing else), the websocket's rules for starting a turn
(one at a time, the model and tier rules, the rate limit), and a turn run by
the offline demo model followed by polling and as Server-Sent Events."""

from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from accounts.models import ApiToken, TokenScope
from accounts.services import api_token_create
from agentapi import access
from audit.models import AuditEvent, EventKind, ToolCallAudit
from chat.models import Conversation, Turn, TurnStatus
from chat.services import conversation_create
from governance.models import LlmModel
from governance.services import install_config_sync
from owlai.install_config import parse_install_config
from tests.support.connector_world import two_tier_config


@pytest.fixture(autouse=True)
def fresh_buckets():
    access._buckets.clear()
    yield
    access._buckets.clear()


@pytest.fixture
def held(monkeypatch):
    """Turns handed to a worker are only collected: they stay queued."""
    handed: list[int] = []
    monkeypatch.setattr("agentapi.turns.hand_over", handed.append)
    return handed


def bearer(key: str, language: str = "en") -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_ACCEPT_LANGUAGE=language)


def agent_key(user, scopes=(TokenScope.AGENT,)) -> str:
    return api_token_create(user=user, name="script", actor=user, scopes=list(scopes))[1]


def endpoints(conversation, turn_id: int) -> list[tuple[str, str, dict | None]]:
    return [
        ("post", "/api/agent/turns/", {"text": "hi", "conversation_id": str(conversation.pk)}),
        ("get", f"/api/agent/turns/{turn_id}/events/", None),
        ("get", f"/api/agent/turns/{turn_id}/stream/", None),
        ("post", f"/api/agent/turns/{turn_id}/stop/", None),
        ("post", "/api/agent/approvals/00000000-0000-0000-0000-000000000000/", {"decision": "approve"}),
        ("get", "/v1/models", None),
        (
            "post",
            "/v1/chat/completions",
            {"model": "owlai-offline-demo", "messages": [{"role": "user", "content": "hi"}]},
        ),
    ]


def call(client: Client, method: str, path: str, body):
    if method == "get":
        return client.get(path)
    return client.post(path, json.dumps(body or {}), content_type="application/json")


@pytest.mark.django_db
def test_a_token_without_the_agent_scope_a_session_and_a_deactivated_users_token_are_refused(
    personas, install_models, held
):
    staff = personas.staff
    conversation = conversation_create(owner=staff)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED)
    unscoped = bearer(agent_key(staff, scopes=()))
    session = Client()
    session.force_login(staff)
    scoped_key = agent_key(staff)
    for method, path, body in endpoints(conversation, turn.pk):
        refused = call(unscoped, method, path, body)
        assert refused.status_code == 403, (path, refused.content)
        # The browser session is not a token: the page has its websocket.
        assert call(session, method, path, body).status_code == 401, path
        assert call(Client(), method, path, body).status_code == 401, path
    # OpenAI clients get OpenAI's error shape.
    refused = call(unscoped, *endpoints(conversation, turn.pk)[-1][:2], endpoints(conversation, turn.pk)[-1][2])
    assert refused.json()["error"]["type"] == "permission_error"
    assert "agent" in refused.json()["error"]["message"]
    # The scoped token works until its user is deactivated.
    assert bearer(scoped_key).get(f"/api/agent/turns/{turn.pk}/events/").status_code == 200
    staff.is_active = False
    staff.save()
    for method, path, body in endpoints(conversation, turn.pk):
        assert call(bearer(scoped_key), method, path, body).status_code == 401, path
    assert held == [] and Turn.objects.count() == 1


@pytest.mark.django_db
def test_tokens_are_created_with_scopes_on_the_record(personas):
    session = Client()
    session.force_login(personas.staff)
    created = session.post("/api/tokens/", {"name": "bi", "scopes": ["agent"]}, content_type="application/json")
    assert created.status_code == 201 and created.json()["scopes"] == ["agent"]
    event = AuditEvent.objects.get(kind=EventKind.API_TOKEN_CREATED)
    assert event.details["scopes"] == ["agent"]
    plain = session.post("/api/tokens/", {"name": "read only"}, content_type="application/json")
    assert plain.json()["scopes"] == []
    bad = session.post("/api/tokens/", {"name": "x", "scopes": ["admin"]}, content_type="application/json")
    assert bad.status_code == 400
    assert [t["scopes"] for t in session.get("/api/tokens/").json()] == [[], ["agent"]]


@pytest.mark.django_db
def test_an_admin_creates_a_token_with_the_agent_scope(personas):
    admin = Client()
    admin.force_login(personas.admin)
    response = admin.post(
        "/admin/accounts/apitoken/add/", {"user": personas.staff.pk, "name": "bi tool", "scopes": ["agent"]}
    )
    assert response.status_code == 302, response.content[:2000]
    token = ApiToken.objects.get(name="bi tool")
    assert token.user == personas.staff and token.scopes == ["agent"]
    assert AuditEvent.objects.get(kind=EventKind.API_TOKEN_CREATED).details["scopes"] == ["agent"]


@pytest.mark.django_db
def test_starting_follows_the_websockets_rules(personas, install_models, held, settings):
    settings.OWLAI_WS_TURN_START_BURST = 100
    staff, outsider = personas.staff, personas.outsider
    client = bearer(agent_key(staff))
    started = client.post("/api/agent/turns/", {"text": "SELECT 1"}, content_type="application/json")
    assert started.status_code == 201
    body = started.json()
    turn = Turn.objects.get(pk=body["turn_id"])
    assert held == [turn.pk] and turn.status == TurnStatus.QUEUED and turn.origin == "chat"
    assert str(turn.conversation_id) == body["conversation_id"]
    assert turn.conversation.owner == staff
    # One turn at a time in a conversation, as on the page.
    again = client.post(
        "/api/agent/turns/",
        {"text": "more", "conversation_id": body["conversation_id"]},
        content_type="application/json",
    )
    assert again.status_code == 409 and "already running" in again.json()["detail"]
    # Someone else's conversation is not found; neither are its turns.
    theirs = conversation_create(owner=outsider)
    other = client.post(
        "/api/agent/turns/", {"text": "hi", "conversation_id": str(theirs.pk)}, content_type="application/json"
    )
    assert other.status_code == 404
    outsider_client = bearer(agent_key(outsider))
    assert outsider_client.get(body["events_url"]).status_code == 404
    assert outsider_client.get(body["stream_url"]).status_code == 404
    # An empty message is refused with the run core's reason.
    empty = client.post("/api/agent/turns/", {"text": "   "}, content_type="application/json")
    assert empty.status_code == 409
    assert Turn.objects.count() == 1


@pytest.mark.django_db
def test_models_follow_the_tier_pinning(personas, held, settings):
    settings.OWLAI_WS_TURN_START_BURST = 100  # refused starts count too, as on the socket
    settings.OWLAI_INSTALL = parse_install_config(two_tier_config())
    install_config_sync(config=settings.OWLAI_INSTALL)
    staff = personas.staff
    client = bearer(agent_key(staff))
    listed = {m["id"] for m in client.get("/v1/models").json()["data"]}
    assert listed == {"inhouse-model", "cloud-model"}
    pinned = conversation_create(owner=staff)
    Conversation.objects.filter(pk=pinned.pk).update(tier="private")
    cloud = client.post(
        "/api/agent/turns/",
        {"text": "hi", "conversation_id": str(pinned.pk), "model": "cloud-model"},
        content_type="application/json",
    )
    assert cloud.status_code == 409 and "cloud-model" in cloud.json()["detail"]
    facade = client.post(
        "/v1/chat/completions",
        {
            "model": "cloud-model",
            "messages": [{"role": "user", "content": "hi"}],
            "metadata": {"conversation_id": str(pinned.pk)},
        },
        content_type="application/json",
    )
    assert facade.status_code == 404 and facade.json()["error"]["code"] == "model_not_found"
    unknown = client.post("/api/agent/turns/", {"text": "hi", "model": "nope"}, content_type="application/json")
    assert unknown.status_code == 409
    LlmModel.objects.filter(name="inhouse-model").update(enabled=False)
    disabled = client.post(
        "/api/agent/turns/", {"text": "hi", "model": "inhouse-model"}, content_type="application/json"
    )
    assert disabled.status_code == 409
    ok = client.post(
        "/api/agent/turns/",
        {"text": "hi", "conversation_id": str(pinned.pk), "model": "onprem/inhouse-model"},
        content_type="application/json",
    )
    assert ok.status_code == 409  # disabled under its full name too
    assert held == []


@pytest.mark.django_db
def test_the_facade_refuses_what_it_cannot_govern(personas, install_models, held):
    client = bearer(agent_key(personas.staff))
    # A client's whole history is accepted (content may be null on a tool
    # call), but only its last, the user's, message is read.
    with_history = client.post(
        "/v1/chat/completions",
        {
            "model": "nope",
            "messages": [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "hi"}],
        },
        content_type="application/json",
    )
    assert with_history.status_code == 404 and with_history.json()["error"]["code"] == "model_not_found"
    no_user_last = client.post(
        "/v1/chat/completions",
        {
            "model": "owlai-offline-demo",
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}],
        },
        content_type="application/json",
    )
    assert no_user_last.status_code == 400 and no_user_last.json()["error"]["param"] == "messages"
    theirs = conversation_create(owner=personas.outsider)
    other = client.post(
        "/v1/chat/completions",
        {"model": "owlai-offline-demo", "messages": [{"role": "user", "content": "hi"}]},
        content_type="application/json",
        HTTP_X_OWLAI_CONVERSATION=str(theirs.pk),
    )
    assert other.status_code == 404 and other.json()["error"]["code"] == "conversation_not_found"
    malformed = client.post(
        "/v1/chat/completions",
        {"model": "owlai-offline-demo", "messages": [{"role": "user", "content": "hi"}]},
        content_type="application/json",
        HTTP_X_OWLAI_CONVERSATION="not-a-uuid",
    )
    assert malformed.status_code == 404
    assert held == []


@pytest.mark.django_db
def test_turn_starts_share_the_websockets_rate_limit_per_user(personas, install_models, held, settings):
    settings.OWLAI_WS_TURN_STARTS_PER_MINUTE = 0.001
    settings.OWLAI_WS_TURN_START_BURST = 2
    staff = personas.staff
    first, second = bearer(agent_key(staff)), bearer(agent_key(staff))  # two tokens, one user
    assert first.post("/api/agent/turns/", {"text": "a"}, content_type="application/json").status_code == 201
    assert second.post("/api/agent/turns/", {"text": "b"}, content_type="application/json").status_code == 201
    limited = first.post("/api/agent/turns/", {"text": "c"}, content_type="application/json")
    assert limited.status_code == 429 and "Retry-After" in limited
    facade = second.post(
        "/v1/chat/completions",
        {"model": "owlai-offline-demo", "messages": [{"role": "user", "content": "d"}]},
        content_type="application/json",
    )
    assert facade.status_code == 429 and facade.json()["error"]["type"] == "rate_limit_exceeded"
    assert len(held) == 2
    # Another user has their own allowance.
    assert (
        bearer(agent_key(personas.admin))
        .post("/api/agent/turns/", {"text": "e"}, content_type="application/json")
        .status_code
        == 201
    )


def collect(response) -> str:
    async def read():
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)().decode()


def parse_sse(text: str) -> list[dict]:
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        if "data" in fields:
            out.append({"id": fields["id"], "event": fields["event"], **json.loads(fields["data"])})
    return out


@pytest.mark.django_db(transaction=True)
def test_a_turn_runs_and_is_followed_by_polling_and_as_server_sent_events(personas, install_models, settings):
    settings.OWLAI_AGENTAPI_POLL_SECONDS = 0.05
    client = bearer(agent_key(personas.staff))
    started = client.post(
        "/api/agent/turns/", {"text": "@sales SELECT count(*) AS n FROM customers"}, content_type="application/json"
    ).json()
    deadline = time.monotonic() + 60
    polled = client.get(started["events_url"]).json()
    while not polled["finished"] and time.monotonic() < deadline:
        time.sleep(0.1)
        polled = client.get(started["events_url"], {"after_seq": 0}).json()
    assert polled["finished"] and polled["status"] == "completed", polled
    kinds = [e["type"] for e in polled["events"]]
    assert kinds[0] == "turn.accepted" and "tool.finished" in kinds and kinds[-1] == "turn.finished"
    row = ToolCallAudit.objects.get(turn_id=started["turn_id"])
    assert (row.tool, row.actor_username, row.origin) == ("run_sql", "staff", "chat")

    streamed = client.get(started["stream_url"], HTTP_ACCEPT="text/event-stream")
    assert streamed.status_code == 200 and streamed["Content-Type"].startswith("text/event-stream")
    events = parse_sse(collect(streamed))
    assert [e["event"] for e in events] == kinds
    assert [int(e["id"]) for e in events] == [e["seq"] for e in polled["events"]]
    # A reconnect with Last-Event-ID gets only what came after.
    resumed = parse_sse(collect(client.get(started["stream_url"], HTTP_LAST_EVENT_ID=events[1]["id"])))
    assert [e["seq"] for e in resumed] == [e["seq"] for e in polled["events"][2:]]
    after = client.get(started["events_url"], {"after_seq": polled["last_seq"]}).json()
    assert after["events"] == [] and after["last_seq"] == polled["last_seq"]
    # A stream of an ended turn from its last event ends at once: no waiting
    # (which would send keep-alives), nothing given twice.
    settings.OWLAI_AGENTAPI_KEEPALIVE_SECONDS = 0.01
    settings.OWLAI_AGENTAPI_STREAM_SECONDS = 2  # a regression fails, rather than hangs
    assert collect(client.get(started["stream_url"], {"after_seq": polled["last_seq"]})) == ""

    # The answers have exactly the documented fields (the OpenAPI schema).
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert set(started) == documented(schema, "/api/agent/turns/", "post", "201")
    assert set(polled) == documented(schema, "/api/agent/turns/{turn_id}/events/", "get", "200")
    completion = client.post(
        "/v1/chat/completions",
        {"model": "owlai-offline-demo", "messages": [{"role": "user", "content": "@sales SELECT 1 AS one"}]},
        content_type="application/json",
    )
    assert completion.status_code == 200
    body = json.loads(collect(completion))
    assert completion["X-OwlAI-Conversation"] == body["owlai"]["conversation_id"]
    assert set(body) == documented(schema, "/v1/chat/completions", "post", "200")
    assert body["owlai"]["status"] == "completed" and "one" in body["choices"][0]["message"]["content"]
    assert set(body["choices"][0]) == set(component(schema, "Choice")["properties"])


def component(schema, name: str) -> dict:
    return schema["components"]["schemas"][name]


def documented(schema, path: str, method: str, status: str) -> set[str]:
    body = schema["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    return set(component(schema, body["$ref"].rsplit("/", 1)[1])["properties"])
