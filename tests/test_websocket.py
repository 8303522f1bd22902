"""The chat websocket in-process: session auth, origin check, ownership, bad
frames, and a whole turn on the offline demo model (real consumer, real
in-memory channel layer, turn run in-process as in the embedded profile)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from audit.models import ToolCallAudit
from chat.services import conversation_create
from owlai.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def communicator(conversation_id, *, cookie=None, origin="http://localhost") -> WebsocketCommunicator:
    headers = [(b"host", b"localhost")]
    if origin:
        headers.append((b"origin", origin.encode()))
    if cookie is not None:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, f"/ws/chat/{conversation_id}/", headers=headers)


async def receive_until(comm, final_type="turn.finished", timeout=15) -> list[dict]:
    """Turn events up to `final_type`; the `state` frame every connect starts
    with (tests/test_turn_state.py) is skipped."""
    events = []
    while True:
        event = json.loads(await comm.receive_from(timeout=timeout))
        if event["type"] == "state":
            continue
        events.append(event)
        if event["type"] == final_type:
            return events


def test_owner_chats_with_the_offline_demo_model_and_gets_rows(personas, install_models):
    staff_cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=staff_cookie)
        connected, _ = await comm.connect()
        assert connected
        await comm.send_to(
            text_data=json.dumps({"type": "turn.start", "text": "@sales SELECT name FROM customers ORDER BY id"})
        )
        events = await receive_until(comm)
        await comm.disconnect()
        return events

    events = async_to_sync(scenario)()
    kinds = [e["type"] for e in events]
    assert kinds[0] == "turn.accepted" and events[0]["offline_demo"] is True
    assert "tool.started" in kinds and kinds[-1] == "turn.finished" and events[-1]["status"] == "completed"
    finished = next(e for e in events if e["type"] == "tool.finished")
    assert (finished["outcome"], finished["row_count"]) == ("success", 3)
    completed = next(e for e in events if e["type"] == "message.completed")
    assert "김민준" in completed["text"] and "| name |" in completed["text"]
    assert "".join(e["text"] for e in events if e["type"] == "message.delta") == completed["text"]
    assert ToolCallAudit.objects.get().call_outcome == "success"


def test_bad_frames_get_errors_and_the_socket_stays_usable(personas, install_models, settings):
    staff_cookie = session_cookie(personas.staff)
    settings.OWLAI_WS_MAX_FRAME_BYTES = 1000
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=staff_cookie)
        assert (await comm.connect())[0]
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        replies = []
        for frame in [
            "{not json",
            json.dumps({"type": "no.such.event"}),
            json.dumps(["a list"]),
            json.dumps({"type": "turn.start", "text": "x" * 2000}),
            json.dumps({"type": "turn.start", "text": 42}),
            json.dumps({"type": "turn.start", "text": "   "}),
        ]:
            await comm.send_to(text_data=frame)
            replies.append(json.loads(await comm.receive_from(timeout=5)))
        await comm.send_to(bytes_data=b"\x00\x01")
        replies.append(json.loads(await comm.receive_from(timeout=5)))
        # Still usable: a proper turn runs to the end.
        await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": "안녕"}))
        events = await receive_until(comm)
        await comm.disconnect()
        return replies, events

    replies, events = async_to_sync(scenario)()
    assert [r["type"] for r in replies] == ["error"] * 7
    assert [r["code"] for r in replies] == [
        "malformed_json",
        "unknown_type",
        "bad_event",
        "frame_too_large",
        "bad_event",
        "turn_refused",
        "bad_frame",
    ]
    assert all(r["message"] for r in replies)
    assert events[-1] == {
        "type": "turn.finished",
        "turn_id": events[-1]["turn_id"],
        "seq": events[-1]["seq"],
        "status": "completed",
    }


async def close_code(comm) -> int | None:
    """Refusals accept the socket and close it at once with a close code
    (a handshake 403 reaches a browser only as 1006): the code, and nothing
    sent before it."""
    connected, _ = await comm.connect()
    assert connected is True
    message = await comm.receive_output(timeout=5)
    assert message["type"] == "websocket.close", message
    return message.get("code")


def test_non_owner_cannot_connect(personas):
    outsider_cookie = session_cookie(personas.outsider)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        return await close_code(communicator(conversation.pk, cookie=outsider_cookie))

    assert async_to_sync(scenario)() == 4403


def test_unknown_conversation_reads_like_not_owned(personas):
    staff_cookie = session_cookie(personas.staff)
    import uuid

    async def scenario():
        return await close_code(communicator(uuid.uuid4(), cookie=staff_cookie))

    assert async_to_sync(scenario)() == 4403


def test_anonymous_cannot_connect(personas):
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        return await close_code(communicator(conversation.pk))

    assert async_to_sync(scenario)() == 4401


def test_foreign_origin_is_refused(personas):
    staff_cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        return await close_code(communicator(conversation.pk, cookie=staff_cookie, origin="http://evil.example"))

    assert async_to_sync(scenario)() == 4403


def test_events_reach_every_socket_of_the_conversation_only(personas, install_models):
    staff_cookie = session_cookie(personas.staff)
    mine = conversation_create(owner=personas.staff)
    other = conversation_create(owner=personas.staff)

    async def scenario():
        a = communicator(mine.pk, cookie=staff_cookie)
        b = communicator(other.pk, cookie=staff_cookie)
        assert (await a.connect())[0] and (await b.connect())[0]
        assert json.loads(await b.receive_from(timeout=5))["type"] == "state"
        await a.send_to(text_data=json.dumps({"type": "turn.start", "text": "hello"}))
        events = await receive_until(a)
        leaked = await b.receive_nothing(timeout=0.3)
        await a.disconnect()
        await b.disconnect()
        return events, leaked

    events, nothing_on_b = async_to_sync(scenario)()
    assert events[-1]["type"] == "turn.finished"
    assert nothing_on_b is True


def test_a_deleted_conversation_cannot_be_connected_to(personas):
    from chat.services import conversation_delete

    staff_cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)
    conversation_delete(conversation=conversation)

    async def scenario():
        return await close_code(communicator(conversation.pk, cookie=staff_cookie))

    assert async_to_sync(scenario)() == 4403  # reads like an unknown one


def test_an_open_socket_closes_when_its_conversation_is_deleted(personas):
    from channels.db import database_sync_to_async

    from chat.services import conversation_delete

    staff_cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=staff_cookie)
        connected, _ = await comm.connect()
        assert connected
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        await database_sync_to_async(conversation_delete)(conversation=conversation)
        return await comm.receive_output(timeout=5)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": 4403}
