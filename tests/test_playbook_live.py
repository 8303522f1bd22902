"""A playbook run's websocket in-process (the real ASGI application, the
in-memory layer, nodes run in this process): the person it runs for and the
playbook's owner are sent the run's state on connect and a `run.changed`
after every change the engine or a stop commits, plus the steps' tool calls
cut down to names and outcomes; no frame carries a value. Anyone else, an
anonymous socket and a foreign origin are closed before anything is sent."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from owlai.asgi import application
from playbooks.engine import drive
from playbooks.models import PlaybookRun, RunStatus
from playbooks.runs import playbook_run_start, playbook_run_stop
from playbooks.services import playbook_create, playbook_share

pytestmark = [pytest.mark.usefixtures("english"), pytest.mark.django_db(transaction=True)]

PHONES_SQL = "SELECT name, phone FROM customers ORDER BY id"
SQL_NODE = {"key": "names", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "$sql"}}
AGENT_NODE = {"key": "again", "kind": "agent", "prompt": "@sales SELECT phone FROM customers"}


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def communicator(run_id, *, cookie=None, origin="http://localhost") -> WebsocketCommunicator:
    headers = [(b"host", b"localhost")]
    if origin:
        headers.append((b"origin", origin.encode()))
    if cookie is not None:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, f"/ws/playbook-runs/{run_id}/", headers=headers)


def queued_run(personas, install_models, nodes, actor=None, sql=PHONES_SQL) -> PlaybookRun:
    """A stored run not yet handed to a worker: the test drives it once its
    socket is connected."""
    playbook = playbook_create(
        owner=personas.staff,
        name="Customer phones",
        model=install_models,
        parameters=[{"name": "sql", "kind": "text"}],
        nodes=nodes,
        actor=personas.staff,
    )
    if actor is not None and actor != personas.staff:
        playbook_share(playbook=playbook, users=[actor], actor=personas.staff)
    return playbook_run_start(
        playbook=playbook, actor=actor or personas.staff, parameters={"sql": sql}, dispatch_after_commit=False
    )


async def frames_until_ended(comm, timeout=15) -> list[dict]:
    frames = []
    while True:
        frame = json.loads(await comm.receive_from(timeout=timeout))
        frames.append(frame)
        if frame["type"] == "run.changed" and frame["status"] not in ("queued", "running", "waiting_approval"):
            return frames


async def close_code(comm) -> int | None:
    """The socket is accepted and closed at once: its code, nothing sent before."""
    connected, _ = await comm.connect()
    assert connected is True
    message = await comm.receive_output(timeout=5)
    assert message["type"] == "websocket.close", message
    return message.get("code")


@pytest.mark.embedded  # the embedded profile's path too: in-memory layer, nodes run in-process
def test_the_owner_follows_a_run_to_its_end_without_a_value(personas, install_models):
    run = queued_run(personas, install_models, [SQL_NODE, AGENT_NODE])
    cookie = session_cookie(personas.staff)

    async def scenario():
        comm = communicator(run.pk, cookie=cookie)
        assert (await comm.connect())[0]
        first = json.loads(await comm.receive_from(timeout=5))
        await database_sync_to_async(drive)(run.pk)
        frames = await frames_until_ended(comm)
        await comm.disconnect()
        return first, frames

    first, frames = async_to_sync(scenario)()
    # On connect: the run as stored.
    assert first == {"type": "run.changed", "run_id": run.pk, "status": "queued", "node": 0}
    changes = [(f["status"], f["node"]) for f in frames if f["type"] == "run.changed"]
    # Step 1 starts, step 1's output is stored as step 2 starts, then the end.
    assert changes == [("running", 0), ("running", 1), ("completed", 2)]
    assert {f["run_id"] for f in frames if f["type"] == "run.changed"} == {run.pk}
    # The steps' tool calls, cut down to their names and outcomes.
    finished = [f for f in frames if f["type"] == "tool.finished"]
    assert [f["tool"] for f in finished] == ["run_sql", "run_sql"]
    assert {f["outcome"] for f in finished} == {"success"}
    assert set(finished[0]) == {"type", "turn_id", "seq", "call_id", "tool", "outcome"}
    started = [f for f in frames if f["type"] == "tool.started"]
    assert started and all(set(f) == {"type", "turn_id", "seq", "call_id", "tool"} for f in started)
    assert "message.delta" not in {f["type"] for f in frames}  # the text is read from the run API
    sent = json.dumps(frames, ensure_ascii=False)
    for value in ("010-1234-5678", "김민준", "SELECT", "phone"):
        assert value not in sent
    assert PlaybookRun.objects.get(pk=run.pk).status == RunStatus.COMPLETED


def test_a_failed_step_and_a_stop_reach_the_socket(personas, install_models):
    hidden = {**SQL_NODE, "arguments": {"connection": "hr_secret", "sql": "$sql"}}
    failing = queued_run(personas, install_models, [hidden], sql="SELECT * FROM salaries")
    cookie = session_cookie(personas.staff)

    async def failed():
        comm = communicator(failing.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=5)
        await database_sync_to_async(drive)(failing.pk)
        frames = await frames_until_ended(comm)
        await comm.disconnect()
        return frames

    frames = async_to_sync(failed)()
    assert frames[-1] == {"type": "run.changed", "run_id": failing.pk, "status": "failed", "node": 0}
    assert "salaries" not in json.dumps(frames)
    assert PlaybookRun.objects.get(pk=failing.pk).error  # the reason is read from the run API

    stopped = queued_run(personas, install_models, [SQL_NODE])

    async def stop():
        comm = communicator(stopped.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=5)
        await database_sync_to_async(playbook_run_stop)(run=stopped, actor=personas.staff)
        frame = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return frame

    assert async_to_sync(stop)() == {"type": "run.changed", "run_id": stopped.pk, "status": "cancelled", "node": 0}


def test_the_playbook_owner_watches_a_run_of_someone_it_is_shared_with(personas, install_models):
    run = queued_run(personas, install_models, [SQL_NODE], actor=personas.outsider)
    owner, runner = session_cookie(personas.staff), session_cookie(personas.outsider)

    async def scenario():
        first = []
        for cookie in (owner, runner):
            comm = communicator(run.pk, cookie=cookie)
            assert (await comm.connect())[0]
            first.append(json.loads(await comm.receive_from(timeout=5))["status"])
            await comm.disconnect()
        return first

    assert async_to_sync(scenario)() == ["queued", "queued"]


def test_others_anonymous_and_foreign_origins_are_closed_without_data(personas, install_models, django_user_model):
    run = queued_run(personas, install_models, [SQL_NODE])
    stranger = session_cookie(personas.outsider)
    # Shared with them, but not their run: they may run it, not watch it.
    shared = django_user_model.objects.create_user("shared", password="pw-shared-123")
    playbook_share(playbook=run.playbook, users=[shared], actor=personas.staff)
    sharer = session_cookie(shared)
    owner = session_cookie(personas.staff)

    async def scenario():
        return [
            await close_code(communicator(run.pk, cookie=stranger)),
            await close_code(communicator(run.pk, cookie=sharer)),
            await close_code(communicator(run.pk + 1000, cookie=owner)),  # none: reads the same
            await close_code(communicator(run.pk)),
            await close_code(communicator(run.pk, cookie=owner, origin="http://evil.example")),
        ]

    assert async_to_sync(scenario)() == [4403, 4403, 4403, 4401, 4403]


def test_a_socket_whose_session_ended_gets_nothing_more(personas, install_models):
    from django.contrib.sessions.models import Session

    run = queued_run(personas, install_models, [SQL_NODE])
    cookie = session_cookie(personas.staff)

    async def scenario():
        comm = communicator(run.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await comm.receive_from(timeout=5)
        await database_sync_to_async(Session.objects.filter(session_key=cookie).delete)()
        await database_sync_to_async(drive)(run.pk)
        sent = []
        while True:
            message = await comm.receive_output(timeout=5)
            if message["type"] == "websocket.close":
                return sent, message["code"]
            sent.append(json.loads(message["text"]))

    sent, code = async_to_sync(scenario)()
    assert code == 4401
    # The first frame after the sign-out finds the session gone: nothing is sent.
    assert sent == []


def test_relayed_step_events_keep_names_and_ids_only():
    from playbooks.live import step_frame

    requested = {
        "type": "approval.requested",
        "turn_id": 7,
        "seq": 3,
        "approval_id": "a1",
        "call_id": "c1",
        "tool": "desk__echo",
        "connector": "desk",
        "arguments": {"text": "010-1234-5678"},
        "expires_in": 300,
    }
    assert step_frame(requested) == {
        "type": "approval.requested",
        "turn_id": 7,
        "seq": 3,
        "approval_id": "a1",
        "call_id": "c1",
        "tool": "desk__echo",
    }
    finished = {"type": "tool.finished", "turn_id": 7, "seq": 4, "call_id": "c1", "tool": "run_sql"}
    finished |= {"outcome": "success", "result": "김민준 010-1234-5678", "row_count": 1}
    assert "result" not in step_frame(finished) and step_frame(finished)["outcome"] == "success"
    for dropped in ("message.delta", "message.completed", "turn.accepted", "error"):
        assert step_frame({"type": dropped, "turn_id": 7, "seq": 5, "text": "010-1234-5678"}) is None
