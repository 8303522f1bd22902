"""Per-socket limits of the chat websocket, in-process (real consumer,
in-memory channel layer): a frame flood gets `rate_limited` errors and the
socket stays open, a sustained flood is closed with 4429, `turn.start` has its
own budget, normal use is never limited, and a socket whose client does not
read is closed with 4408 while another conversation's turn goes on."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync

from chat.consumers import CLOSE_RATE_LIMITED, CLOSE_TOO_SLOW, ChatConsumer, TokenBucket
from chat.models import Turn
from chat.services import conversation_create
from tests.test_websocket import communicator, receive_until, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tight(settings):
    settings.OWLAI_WS_FRAMES_PER_SECOND = 5
    settings.OWLAI_WS_FRAME_BURST = 10
    settings.OWLAI_WS_TURN_STARTS_PER_MINUTE = 1
    settings.OWLAI_WS_TURN_START_BURST = 2
    settings.OWLAI_WS_FLOOD_FACTOR = 10
    settings.OWLAI_WS_FLOOD_SECONDS = 3  # 150 refused frames close the socket
    return settings


async def outputs_until_quiet(comm, timeout=0.5) -> list[dict]:
    """Everything the consumer sent until it goes quiet (frames decoded)."""
    got = []
    while True:
        try:
            # Not receive_output: its timeout cancels the application.
            out = await asyncio.wait_for(comm.output_queue.get(), timeout)
        except TimeoutError:
            return got
        got.append(json.loads(out["text"]) if out["type"] == "websocket.send" else out)
        if out["type"] == "websocket.close":
            return got


def test_token_bucket_refills_at_its_rate():
    now = [0.0]
    bucket = TokenBucket(2, 3, clock=lambda: now[0])
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    now[0] = 0.5
    assert bucket.take() and not bucket.take()
    now[0] = 100
    assert sum(bucket.take() for _ in range(10)) == 3  # never more than the burst


def test_a_frame_flood_gets_rate_limited_errors_and_the_socket_stays_open(personas, tight):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        for _ in range(60):
            await comm.send_to(text_data=json.dumps({"type": "no.such.event"}))
        replies = await outputs_until_quiet(comm)
        await asyncio.sleep(0.5)  # the bucket refills: the socket is usable again
        await comm.send_to(text_data=json.dumps({"type": "sync"}))
        after = json.loads(await comm.receive_from(timeout=5))
        await comm.disconnect()
        return replies, after

    replies, after = async_to_sync(scenario)()
    codes = [r.get("code") for r in replies]
    assert all(r["type"] == "error" for r in replies) and len(replies) == 60
    assert 10 <= codes.count("unknown_type") <= 12  # the burst, plus what refilled meanwhile
    assert codes.count("rate_limited") == 60 - codes.count("unknown_type")
    limited = next(r for r in replies if r["code"] == "rate_limited")
    assert limited["message"] and "turn_id" not in limited
    assert after["type"] == "state"


def test_a_sustained_flood_closes_the_socket_with_4429(personas, tight):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        for _ in range(400):
            await comm.send_to(text_data="{not json")
        replies = await outputs_until_quiet(comm)
        await comm.send_to(text_data=json.dumps({"type": "sync"}))
        more = await outputs_until_quiet(comm, timeout=0.3)
        return replies, more

    replies, more = async_to_sync(scenario)()
    assert replies[-1] == {"type": "websocket.close", "code": CLOSE_RATE_LIMITED}
    errors = replies[:-1]
    assert 150 <= sum(r["code"] == "rate_limited" for r in errors) <= 200
    assert more == []  # closed: nothing more is answered


def test_a_turn_start_flood_starts_at_most_the_allowed_turns(personas, install_models, tight):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        first = await _ask(comm, "하나")
        second = await _ask(comm, "둘")
        for n in range(8):  # the frame budget has room; the turn budget has not
            await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": f"셋 {n}"}))
        replies = await outputs_until_quiet(comm, timeout=1.0)
        await comm.disconnect()
        return first, second, replies

    first, second, replies = async_to_sync(scenario)()
    assert first[-1]["status"] == second[-1]["status"] == "completed"
    assert [r.get("code") for r in replies] == ["rate_limited"] * 8
    assert Turn.objects.filter(conversation=conversation).count() == 2


async def _ask(comm, text: str) -> list[dict]:
    await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": text}))
    return await receive_until(comm)


def test_normal_use_is_never_limited(personas, install_models):
    """Default limits: three turns in a row, a resync after each and a
    reconnect: no `rate_limited` anywhere."""
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        seen = []
        for _ in range(2):
            comm = communicator(conversation.pk, cookie=cookie)
            assert (await comm.connect())[0]
            seen.append(json.loads(await comm.receive_from(timeout=5)))
            for text in ("안녕", "@sales SELECT name FROM customers"):
                events = await _ask(comm, text)
                seen += events
                await comm.send_to(
                    text_data=json.dumps({"type": "sync", "turn_id": events[0]["turn_id"], "after_seq": 0})
                )
                seen += await outputs_until_quiet(comm, timeout=0.3)
            await comm.disconnect()
        return seen

    seen = async_to_sync(scenario)()
    assert not [f for f in seen if f.get("type") == "error"]
    assert sum(f.get("type") == "turn.finished" for f in seen) >= 4


def test_a_socket_that_does_not_read_is_closed_and_others_go_on(personas, install_models, monkeypatch):
    """The transport's write buffer is over the cap for one socket (daphne
    reports it; here it is faked): that socket gets no more events and is
    closed with 4408, another conversation's turn completes as usual, and the
    slow one's events are all stored for its resync."""
    from chat.models import TurnEvent

    cookie = session_cookie(personas.staff)
    slow_conversation = conversation_create(owner=personas.staff)
    other_conversation = conversation_create(owner=personas.staff)
    slow_channels = set()

    def buffered(self):
        return 10**9 if self.channel_name in slow_channels else 0

    monkeypatch.setattr(ChatConsumer, "_buffered_bytes", buffered)

    async def scenario():
        slow = communicator(slow_conversation.pk, cookie=cookie)
        other = communicator(other_conversation.pk, cookie=cookie)
        assert (await slow.connect())[0] and (await other.connect())[0]
        assert json.loads(await slow.receive_from(timeout=5))["type"] == "state"
        assert json.loads(await other.receive_from(timeout=5))["type"] == "state"
        slow_channels.update(_channels_of(slow_conversation))
        await slow.send_to(text_data=json.dumps({"type": "turn.start", "text": "안녕"}))
        closed = await slow.receive_output(timeout=10)
        events = await _ask(other, "@sales SELECT name FROM customers")
        await other.disconnect()
        return closed, events

    closed, events = async_to_sync(scenario)()
    # The very next output after its turn started is the close: no event was sent.
    assert closed == {"type": "websocket.close", "code": CLOSE_TOO_SLOW}
    assert events[-1]["status"] == "completed"
    slow_turn = Turn.objects.get(conversation=slow_conversation)
    assert TurnEvent.objects.filter(turn=slow_turn, type="turn.accepted").exists()  # stored for the resync


def _channels_of(conversation) -> set[str]:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    return set(layer.groups.get(conversation.group_name, {}))


class ScriptedClock:
    """The consumer's rate clock, moved by the test: 'a second apart' without
    waiting a second (tests never depend on wall-clock time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _turns_a_second_apart(personas, monkeypatch, count: int) -> list[dict]:
    """`count` messages on one socket, each sent a second after the previous
    one's answer ended: the frames answering each (the turn's events or a refusal)."""
    clock = ScriptedClock()
    monkeypatch.setattr(ChatConsumer, "clock", staticmethod(clock))
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        assert json.loads(await comm.receive_from(timeout=5))["type"] == "state"
        answers = []
        for n in range(count):
            clock.now += 1.0
            await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": f"질문 {n}", "ref": f"r{n}"}))
            first = json.loads(await comm.receive_from(timeout=15))
            answers.append(first if first["type"] == "error" else (await receive_until(comm))[-1])
        await comm.disconnect()
        return answers

    return async_to_sync(scenario)()


def test_a_fast_human_sending_a_message_a_second_apart_is_not_limited(personas, install_models, monkeypatch):
    """Default limits: ten messages, each a second after the last answer
    (a person reading a README aloud): every one is answered."""
    answers = _turns_a_second_apart(personas, monkeypatch, 10)
    assert [a["type"] for a in answers] == ["turn.finished"] * 10, answers
    assert all(a["status"] == "completed" for a in answers)


def test_a_script_starting_a_turn_every_second_is_stopped_and_told_how_long_to_wait(
    personas, install_models, monkeypatch
):
    """Default limits: a script that starts a turn every second for a minute
    is refused before the minute is out, and the refusal names the wait (in
    the message and as `retry_after` seconds)."""
    answers = _turns_a_second_apart(personas, monkeypatch, 40)
    refused = [a for a in answers if a["type"] == "error"]
    assert refused and all(a["code"] == "rate_limited" for a in refused)
    first = refused[0]
    assert isinstance(first["retry_after"], int) and 1 <= first["retry_after"] <= 60
    assert str(first["retry_after"]) in first["message"]
    assert first["ref"].startswith("r")
    assert Turn.objects.count() == len(answers) - len(refused) < 40
