"""Regenerate and edit: a new turn through the same turn start as any
message, which supersedes the conversation's latest turn. The earlier
version stays in the timeline (marked), leaves the model's history, and the
new one is audited as any turn is."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync

from audit.models import ToolCallAudit
from chat.models import Turn
from chat.services import conversation_create
from chat.turns.runner import _history
from chat.turns.start import TurnRefused, turn_start
from chat.turns.timeline import conversation_timeline
from tests.test_websocket import communicator, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

SQL = "@sales SELECT name FROM customers"


async def _ask(comm, text: str, **extra) -> list[dict]:
    """The frames answering one `turn.start`: its events to `turn.finished`,
    or the refusal alone."""
    await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": text, "ref": "r", **extra}))
    frames = []
    while True:
        frame = json.loads(await comm.receive_from(timeout=15))
        if frame["type"] == "state":
            continue
        frames.append(frame)
        if frame["type"] == "turn.finished" or (frame["type"] == "error" and "turn_id" not in frame):
            return frames


def _session(conversation, user, steps):
    """Runs `steps(comm)` (a coroutine function) on one connected socket."""
    cookie = session_cookie(user)

    async def go():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        try:
            return await steps(comm)
        finally:
            await comm.disconnect()

    return async_to_sync(go)()


def test_regenerate_runs_a_new_audited_turn_and_keeps_the_earlier_answer(personas, install_models):
    conversation = conversation_create(owner=personas.staff)

    async def steps(comm):
        first = await _ask(comm, SQL)
        return first, await _ask(comm, "", supersedes=first[0]["turn_id"])

    first, again = _session(conversation, personas.staff, steps)
    first_turn = first[0]["turn_id"]

    started = next(e for e in again if e["type"] == "turn.started")
    assert started["supersedes"] == first_turn
    assert again[-1]["status"] == "completed"
    new = Turn.objects.get(pk=started["turn_id"])
    assert new.supersedes_id == first_turn
    # The same message again, run and audited as any turn.
    assert new.messages.get(role="user").content == SQL
    audits = ToolCallAudit.objects.filter(conversation_id=conversation.pk)
    assert {a.turn_id for a in audits} == {first_turn, new.pk}

    timeline = conversation_timeline(conversation=conversation)
    users = [i for i in timeline if i["role"] == "user"]
    assert [(u["turn_id"], u["supersedes"]) for u in users] == [(first_turn, None), (new.pk, first_turn)]
    assert all(u["at"] for u in users)
    answers = [i for i in timeline if i["role"] == "assistant"]
    assert [a["turn_id"] for a in answers] == [first_turn, new.pk]  # the earlier answer is still there


def test_an_edited_message_replaces_the_earlier_one_in_the_models_history(personas, install_models):
    conversation = conversation_create(owner=personas.staff)

    async def steps(comm):
        first = await _ask(comm, "@sales SELECT name FROM customers WHERE false")
        edited = await _ask(comm, SQL, supersedes=first[0]["turn_id"])
        return edited, await _ask(comm, "@sales SELECT 1")

    edited, follow_up = _session(conversation, personas.staff, steps)
    assert edited[-1]["status"] == follow_up[-1]["status"] == "completed"

    latest = Turn.objects.get(pk=follow_up[0]["turn_id"])
    history = _history(conversation, latest)
    users = [m["content"] for m in history if m["role"] == "user"]
    assert users == [SQL, "@sales SELECT 1"]  # the message as first written is gone from the history


def test_only_the_latest_turn_gets_a_new_version(personas, install_models):
    conversation = conversation_create(owner=personas.staff)

    async def steps(comm):
        first = await _ask(comm, "@sales SELECT 1")
        await _ask(comm, "@sales SELECT 2")
        return await _ask(comm, "바꾼 질문", supersedes=first[0]["turn_id"]), await _ask(comm, "x", supersedes="1")

    refused, bad = _session(conversation, personas.staff, steps)
    assert refused[0]["type"] == "error" and refused[0]["code"] == "turn_refused"
    assert bad[0]["code"] == "bad_event"
    assert Turn.objects.filter(conversation=conversation).count() == 2


def test_another_conversations_turn_cannot_be_superseded(personas, install_models):
    mine = conversation_create(owner=personas.staff)
    other = conversation_create(owner=personas.staff)
    theirs = _session(other, personas.staff, lambda comm: _ask(comm, "@sales SELECT 1"))
    with pytest.raises(TurnRefused):
        turn_start(conversation=mine, user=personas.staff, text="", model=None, supersedes=theirs[0]["turn_id"])
