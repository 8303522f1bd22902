"""Every bad frame gets an `error` event and the socket stays open; refusals
are the documented close codes on an accepted socket; errors are in the
socket user's language. In-process (the real ASGI application and consumer),
and on the production stack with a real websocket client for what only a
real server shows (the handshake)."""

from __future__ import annotations

import json
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import translation
from django.utils.translation import gettext

from chat.models import Turn, TurnStatus
from chat.services import conversation_create
from owlai.asgi import application
from tests.test_websocket import communicator, receive_until, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def frames_and_replies(cookie, conversation_id, frames, *, headers=()) -> tuple[list[dict], dict]:
    """Send each frame, collect its one reply; then prove the socket still
    works (a `sync` gets the state)."""

    async def scenario():
        comm = communicator(conversation_id, cookie=cookie)
        comm.scope["headers"] = [*comm.scope["headers"], *headers]
        assert (await comm.connect())[0]
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        replies = []
        for frame in frames:
            await comm.send_to(text_data=frame)
            replies.append(json.loads(await comm.receive_from(timeout=5)))
        await comm.send_to(text_data=json.dumps({"type": "sync"}))
        after = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return replies, after

    return async_to_sync(scenario)()


def test_lone_surrogates_get_an_error_and_the_socket_stays_open(personas, install_models):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)
    replies, after = frames_and_replies(
        cookie,
        conversation.pk,
        [
            '{"type": "turn.start", "text": "\\ud800"}',  # a lone surrogate as a JSON escape
            '{"type": "turn.start", "text": "ok", "model": "\\udfff"}',
            '{"type": "\\ud83d"}',
            '{"\\ud800": 1, "type": "sync"}',
            '{"type": "turn.start", "text": "raw \ud800 surrogate"}',  # one a server could hand over as is
        ],
    )
    assert [(r["type"], r["code"]) for r in replies] == [("error", "invalid_unicode")] * 5
    assert after["type"] == "state"
    assert Turn.objects.count() == 0


def test_other_bad_frames_each_get_an_error(personas, install_models):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)
    replies, after = frames_and_replies(
        cookie,
        conversation.pk,
        [
            "[" * 20000 + "]" * 20000,  # nested past the parser's recursion limit
            json.dumps({"type": "turn.start", "text": "a", "ref": 5}),
            json.dumps({"type": "turn.start", "text": "a", "model": True}),
            json.dumps({"type": "turn.cancel"}),  # nothing to stop
            json.dumps({"type": "turn.cancel", "turn_id": "x"}),
            json.dumps({"type": "sync", "turn_id": -1}),
            json.dumps({"type": 7}),
            "null",
        ],
    )
    assert [r["code"] for r in replies] == [
        "malformed_json",
        "bad_event",
        "bad_event",
        "cancel_refused",
        "bad_event",
        "bad_event",
        "bad_event",
        "bad_event",
    ]
    assert all(r["type"] == "error" and r["message"] for r in replies)
    assert after["type"] == "state"


def test_an_unexpected_failure_is_an_error_event_not_a_closed_socket(personas, monkeypatch):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    def broken(**kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("chat.consumers.turn_events_after", broken)
    replies, after = frames_and_replies(
        cookie, conversation.pk, [json.dumps({"type": "sync", "turn_id": 1, "after_seq": 0})]
    )
    assert [(r["type"], r["code"]) for r in replies] == [("error", "internal_error")]
    assert after["type"] == "state"


@pytest.mark.parametrize(
    "headers,language",
    [
        ((), "ko"),
        (((b"accept-language", b"en-US,en;q=0.9"),), "en"),
        (((b"cookie", b"django_language=en"),), "en"),
        (((b"accept-language", b"en"), (b"cookie", b"django_language=ko")), "ko"),
    ],
)
def test_errors_are_in_the_socket_users_language(personas, headers, language):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)
    extra = list(headers)
    # The communicator's cookie header holds the session; merge a language cookie into it.
    cookie_value = f"sessionid={cookie}"
    for name, value in headers:
        if name == b"cookie":
            cookie_value += "; " + value.decode()
            extra.remove((name, value))

    async def scenario():
        comm = WebsocketCommunicator(
            application,
            f"/ws/chat/{conversation.pk}/",
            headers=[(b"host", b"localhost"), (b"origin", b"http://localhost"), (b"cookie", cookie_value.encode())]
            + extra,
        )
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=5)
        await comm.send_to(text_data="{not json")
        reply = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return reply

    reply = async_to_sync(scenario)()
    with translation.override(language):
        assert reply["message"] == gettext("The frame is not valid JSON.")


def test_a_start_with_a_ref_is_acknowledged_before_its_events_and_errors_echo_it(personas, install_models):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=5)
        await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": "x" * 9000, "ref": "r1"}))
        refused = json.loads(await comm.receive_from(timeout=5))
        await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": "안녕", "ref": "r2"}))
        events = await receive_until(comm)
        await comm.disconnect()
        return refused, events

    refused, events = async_to_sync(scenario)()
    assert (refused["code"], refused["ref"]) == ("turn_refused", "r1")
    turn = Turn.objects.get()
    assert events[0] == {"type": "turn.started", "turn_id": turn.pk, "ref": "r2"}
    assert [e["type"] for e in events[1:]][0] == "turn.accepted"


def test_a_turn_cancel_frame_stops_a_queued_turn(personas, install_models, monkeypatch):
    # No worker picks the turn up: it stays queued until the Stop.
    monkeypatch.setattr("chat.turns.dispatch.run_in_process", lambda turn_id: _noop())
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=5)
        await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": "a", "ref": "r"}))
        started = json.loads(await comm.receive_from(timeout=5))
        await comm.send_to(text_data=json.dumps({"type": "turn.cancel", "turn_id": started["turn_id"]}))
        finished = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return finished

    finished = async_to_sync(scenario)()
    assert (finished["type"], finished["status"]) == ("turn.finished", "cancelled")
    assert Turn.objects.get().status == TurnStatus.CANCELLED


async def _noop():
    return None


@pytest.mark.parametrize("path", ["/ws/nowhere/", "/ws/chat/not-a-uuid/", "/"])
def test_unknown_paths_close_with_4404(personas, path):
    cookie = session_cookie(personas.staff)

    async def scenario():
        comm = WebsocketCommunicator(
            application,
            path,
            headers=[
                (b"host", b"localhost"),
                (b"origin", b"http://localhost"),
                (b"cookie", f"sessionid={cookie}".encode()),
            ],
        )
        assert (await comm.connect())[0]
        return await comm.receive_output(timeout=5)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4404}


def test_a_session_that_ended_while_the_socket_was_open_gets_4401(personas, install_models):
    from django.contrib.sessions.models import Session

    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        from channels.db import database_sync_to_async

        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=5)
        await database_sync_to_async(lambda: Session.objects.all().delete())()
        await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": "a"}))
        return await comm.receive_output(timeout=5)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}
    assert Turn.objects.count() == 0


def test_a_changed_password_ends_open_sockets_too(personas, install_models):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)
    personas.staff.set_password("a-new-password-42")
    personas.staff.save()

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        connected, _ = await comm.connect()
        return await comm.receive_output(timeout=5)

    # The session's hash no longer matches: not signed in at all.
    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4401}


# --- the real server: what the browser sees at the handshake -------------------------------------


@pytest.mark.services
@pytest.mark.e2e
def test_a_real_server_accepts_then_closes_with_the_documented_codes(
    tmp_path, require_postgres_app_db, require_redis, django_user_model
):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    from tests.support.stack import Stack, process_env

    owner = django_user_model.objects.create_user("ws-owner", password="pw-owner-123")
    other = django_user_model.objects.create_user("ws-other", password="pw-other-123")
    conversation = conversation_create(owner=owner)

    def cookie(user) -> str:
        client = Client()
        client.force_login(user)
        return client.cookies["sessionid"].value

    config = tmp_path / "owlai.toml"
    config.write_text(
        '[[providers]]\nname = "d"\nkind = "offline-demo"\ntier = "private"\nallow_in_production = true\n'
        'models = ["owlai-offline-demo"]\n'
    )
    stack = Stack(tmp_path, process_env(config, LOG_LEVEL="WARNING"))

    def close_code(path: str, *, user=None, origin: str | None = None) -> int | None:
        headers = {"Cookie": f"sessionid={cookie(user)}"} if user else {}
        with connect(
            f"ws://127.0.0.1:{stack.port}{path}",
            additional_headers=headers,
            origin=origin or f"http://127.0.0.1:{stack.port}",
            open_timeout=10,
        ) as ws:  # the handshake succeeds: no HTTP 403 or 500
            try:
                ws.recv(timeout=10)
            except ConnectionClosed as closed:
                return closed.rcvd.code if closed.rcvd else None
        return None

    def frame_then_state(user) -> tuple[dict, dict]:
        with connect(
            f"ws://127.0.0.1:{stack.port}/ws/chat/{conversation.pk}/",
            additional_headers={"Cookie": f"sessionid={cookie(user)}"},
            origin=f"http://127.0.0.1:{stack.port}",
            open_timeout=10,
        ) as ws:
            assert json.loads(ws.recv(timeout=10))["type"] == "state"
            ws.send('{"type": "turn.start", "text": "\\ud800"}')
            error = json.loads(ws.recv(timeout=10))
            ws.send('{"type": "sync"}')
            return error, json.loads(ws.recv(timeout=10))

    try:
        stack.start_redis()
        stack.start_web()
        chat_path = f"/ws/chat/{conversation.pk}/"
        assert close_code(chat_path) == 4401
        assert close_code(chat_path, user=other) == 4403
        assert close_code(f"/ws/chat/{uuid.uuid4()}/", user=owner) == 4403
        assert close_code(chat_path, user=owner, origin="http://evil.example") == 4403
        assert close_code("/ws/nowhere/", user=owner) == 4404
        error, state = frame_then_state(owner)
        assert (error["type"], error["code"]) == ("error", "invalid_unicode")
        assert state["type"] == "state"
        assert "Traceback" not in stack.procs["web"].log.read_text()
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()
