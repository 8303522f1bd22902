"""The database is the truth about a turn, Redis only transport: stored events
with per-turn sequence numbers, coalesced deltas, the `state` and `sync`
frames, the conditional claim, heartbeats and the recovery job, and counted
channel-layer drops. In-process (in-memory layer, turns run in a thread of
the test process); tests/test_reliability.py does the same on the real stack."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils import timezone

from chat import events as chat_events
from chat.models import Conversation, Turn, TurnEvent, TurnStatus
from chat.services import conversation_create
from chat.turns.emitter import make_emitter
from chat.turns.lifecycle import turn_claim
from chat.turns.recovery import turns_recover
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from tests.test_websocket import communicator, receive_until, session_cookie


def stored(turn) -> list[dict]:
    return [e.as_frame() for e in TurnEvent.objects.filter(turn=turn).order_by("seq")]


@pytest.fixture
def published(monkeypatch):
    frames: list[dict] = []
    monkeypatch.setattr("chat.events.publish_all", lambda group, published: frames.extend(published))
    return frames


# --- stored events, seq, coalescing -------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("prepared_statements", [True, False], ids=["prepared", "client-bound"])
def test_every_event_is_stored_and_published_with_its_turn_and_seq(
    personas, install_models, published, settings, prepared_statements
):
    # The turn's statements run prepared on PostgreSQL, and as plain
    # statements where that is off (PgBouncer) or impossible (SQLite).
    settings.OWLAI_PREPARED_STATEMENTS = prepared_statements
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(
        conversation=conversation, user=personas.staff, text="@sales SELECT name FROM customers", model=None
    )
    turn_run(turn_id=turn.pk)
    rows = stored(turn)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert rows == published  # what went out is what a resync gives back
    kinds = [r["type"] for r in rows]
    assert kinds[0] == "turn.accepted" and kinds[-1] == "turn.finished"
    assert {"tool.started", "tool.finished", "message.delta", "message.completed"} <= set(kinds)
    assert all(r["turn_id"] == turn.pk for r in rows)
    completed = next(r for r in rows if r["type"] == "message.completed")["text"]
    assert "".join(r["text"] for r in rows if r["type"] == "message.delta") == completed


@pytest.mark.django_db
def test_deltas_are_coalesced_not_stored_per_token(personas, settings, published):
    settings.OWLAI_DELTA_COALESCE_SECONDS = 0.05
    conversation = conversation_create(owner=personas.staff)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.RUNNING)
    emit = make_emitter(group=conversation.group_name, turn_id=turn.pk)
    tokens = [f"t{i} " for i in range(500)]
    started = time.monotonic()
    for token in tokens:
        emit("message.delta", {"text": token})
    emit("message.completed", {"text": "".join(tokens)})
    elapsed = time.monotonic() - started
    # The completed message is held for the turn's end (or the next event).
    assert not TurnEvent.objects.filter(turn=turn, type="message.completed").exists()
    emit.flush()
    deltas = TurnEvent.objects.filter(turn=turn, type="message.delta")
    # The first piece goes out at once; then at most one row per 50 ms.
    assert 1 <= deltas.count() <= 2 + elapsed / 0.05
    assert deltas.count() < 50
    assert "".join(d.payload["text"] for d in deltas.order_by("seq")) == "".join(tokens)
    assert [f["seq"] for f in published] == list(range(1, deltas.count() + 2))
    assert published[-1]["type"] == "message.completed"


@pytest.mark.django_db
def test_the_answers_tail_is_held_with_the_completed_message_and_stored_in_one_write(personas, settings, monkeypatch):
    """The delta text still pending when the message completes is not
    written on its own: it goes with message.completed into the next write
    (the turn's end, or a tool call's first event), one statement."""
    settings.OWLAI_DELTA_COALESCE_SECONDS = 60
    writes: list[list[str]] = []
    monkeypatch.setattr("chat.events.publish_all", lambda group, frames: writes.append([f["type"] for f in frames]))
    conversation = conversation_create(owner=personas.staff)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.RUNNING)
    emit = make_emitter(group=conversation.group_name, turn_id=turn.pk)
    for token in ["첫 ", "조각", "들"]:
        emit("message.delta", {"text": token})
    emit("message.completed", {"text": "첫 조각들"})
    assert writes == [["message.delta"]]  # the first piece at once, the rest held
    emit("tool.started", {"id": "call-1"})
    assert writes == [["message.delta"], ["message.delta", "message.completed"], ["tool.started"]]
    rows = stored(turn)
    assert [r["seq"] for r in rows] == [1, 2, 3, 4]
    assert "".join(r["text"] for r in rows if r["type"] == "message.delta") == "첫 조각들"


@pytest.mark.django_db(transaction=True)
def test_a_turns_last_events_are_stored_with_its_end_and_sent_as_one_message(personas, install_models, monkeypatch):
    """The answer's last delta, message.completed and turn.finished are
    written in the turn's final transaction and go out as one layer message,
    in order; nothing of the turn is published twice."""
    messages: list[dict] = []
    monkeypatch.setattr("chat.events.group_send_now", lambda group, message: messages.append(message))
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="SELECT 1 AS one", model=None)
    turn_run(turn_id=turn.pk)
    last = messages[-1]
    assert last["type"] == "turn.events"
    assert [f["type"] for f in last["events"]][-2:] == ["message.completed", "turn.finished"]
    sent = [m["event"] for m in messages[:-1]] + last["events"]
    assert [f["seq"] for f in sent] == list(range(1, len(sent) + 1))
    assert sent == stored(turn)


@pytest.mark.django_db
def test_a_seq_already_taken_silences_the_emitter(personas, published, caplog):
    conversation = conversation_create(owner=personas.staff)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.RUNNING)
    TurnEvent.objects.create(turn=turn, seq=1, type="error", payload={})
    emit = make_emitter(group=conversation.group_name, turn_id=turn.pk)
    emit("turn.accepted", {})
    emit("tool.started", {})
    assert emit.lost and published == [] and TurnEvent.objects.filter(turn=turn).count() == 1


# --- the conditional claim ----------------------------------------------------------


@pytest.mark.django_db
def test_a_duplicate_delivery_is_a_no_op(personas, install_models, published):
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="@sales SELECT 1 AS one", model=None)
    turn_run(turn_id=turn.pk)
    events_after_first = TurnEvent.objects.filter(turn=turn).count()
    turn_run(turn_id=turn.pk)  # the same task delivered again
    assert TurnEvent.objects.filter(turn=turn).count() == events_after_first
    assert turn_claim(turn_id=turn.pk) is None


@pytest.mark.django_db
def test_a_turn_running_when_its_worker_died_is_not_run_again(personas, install_models, published, monkeypatch):
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="SELECT 1", model=None)
    assert turn_claim(turn_id=turn.pk)  # the first worker claimed it, then died
    monkeypatch.setattr("chat.turns.runner._run", lambda turn: pytest.fail("a redelivered task must not run the turn"))
    turn_run(turn_id=turn.pk)  # redelivered to another worker
    turn.refresh_from_db()
    assert turn.status == TurnStatus.RUNNING and published == []


# --- recovery -------------------------------------------------------------------------


def _age(turn, **fields_seconds_ago) -> None:
    now = timezone.now()
    Turn.objects.filter(pk=turn.pk).update(**{k: now - timedelta(seconds=v) for k, v in fields_seconds_ago.items()})


@pytest.mark.django_db
def test_a_stale_heartbeat_fails_the_turn_visibly(
    personas, install_models, settings, published, django_capture_on_commit_callbacks
):
    conversation = conversation_create(owner=personas.staff)
    lost = turn_start(conversation=conversation, user=personas.staff, text="하나", model=None)
    assert turn_claim(turn_id=lost.pk)
    alive_conversation = conversation_create(owner=personas.staff)
    alive = turn_start(conversation=alive_conversation, user=personas.staff, text="둘", model=None)
    assert turn_claim(turn_id=alive.pk)
    # The worker had stored an event (and taken its number: chat.turns.journal).
    TurnEvent.objects.create(turn=lost, seq=1, type="turn.accepted", payload={})
    Turn.objects.filter(pk=lost.pk).update(last_seq=1)
    _age(lost, heartbeat_at=settings.OWLAI_TURN_STALE_SECONDS + 1)
    _age(alive, heartbeat_at=settings.OWLAI_TURN_STALE_SECONDS - 5)

    with django_capture_on_commit_callbacks(execute=True):
        report = turns_recover()

    assert report.failed_running == 1
    lost.refresh_from_db()
    alive.refresh_from_db()
    assert lost.status == TurnStatus.FAILED and lost.error and alive.status == TurnStatus.RUNNING
    rows = stored(lost)
    assert [(r["seq"], r["type"]) for r in rows] == [(1, "turn.accepted"), (2, "error"), (3, "turn.finished")]
    assert rows[1]["code"] == "worker_lost" and rows[2]["status"] == "failed"
    assert published == rows[1:]  # the sockets are told
    # ... and the conversation takes a new turn at once.
    turn_start(conversation=conversation, user=personas.staff, text="셋", model=None)


@pytest.mark.django_db
def test_a_worker_that_outlives_its_recovery_does_not_finish_the_turn_twice(
    personas, install_models, settings, published, monkeypatch
):
    from chat.agent import LoopResult
    from chat.turns import runner as services

    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="하나", model=None)

    def slow_loop(**kwargs):
        # The heartbeat went stale meanwhile (a stuck database, say) and the
        # recovery job failed the turn before the worker got back.
        _age(turn, heartbeat_at=settings.OWLAI_TURN_STALE_SECONDS + 1)
        turns_recover()
        return LoopResult(
            new_messages=[{"role": "assistant", "content": "늦은 답"}], final_text="늦은 답", step_limit_hit=False
        )

    monkeypatch.setattr(services, "run_agent_loop", slow_loop)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.FAILED
    assert [r["type"] for r in stored(turn)].count("turn.finished") == 1
    assert not turn.messages.filter(role="assistant").exists()


@pytest.mark.django_db
def test_an_unclaimed_turn_is_enqueued_once_more_then_failed(
    personas, install_models, settings, published, monkeypatch, django_capture_on_commit_callbacks
):
    from chat import tasks

    enqueued: list[int] = []
    monkeypatch.setattr(tasks.run_turn, "delay", lambda turn_id: enqueued.append(turn_id))
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="하나", model=None)
    fresh = turn_start(
        conversation=conversation_create(owner=personas.staff), user=personas.staff, text="둘", model=None
    )

    assert turns_recover().requeued == 0  # still within its wait
    _age(turn, created_at=settings.OWLAI_TURN_QUEUE_SECONDS + 1)
    assert turns_recover().requeued == 1 and enqueued == [turn.pk]
    assert turns_recover().requeued == 0 and enqueued == [turn.pk]  # once only
    _age(turn, requeued_at=settings.OWLAI_TURN_QUEUE_SECONDS + 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert turns_recover().failed_queued == 1
    turn.refresh_from_db()
    assert turn.status == TurnStatus.FAILED
    assert [(r["type"], r.get("code")) for r in stored(turn)] == [("error", "not_started"), ("turn.finished", None)]
    assert [f["type"] for f in published] == ["error", "turn.finished"]
    fresh.refresh_from_db()
    assert fresh.status == TurnStatus.QUEUED and enqueued == [turn.pk]


@pytest.mark.django_db
def test_the_recovery_job_runs_from_beat(settings):
    from chat.tasks import recover_turns

    entry = settings.CELERY_BEAT_SCHEDULE["turn-recovery"]
    assert entry["task"] == recover_turns.name == "chat.recover_turns"
    assert entry["schedule"] == settings.OWLAI_TURN_RECOVERY_SECONDS <= 15


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_is_renewed_while_the_turn_runs(personas, settings):
    from chat.turns.heartbeat import TurnHeartbeat

    settings.OWLAI_TURN_HEARTBEAT_SECONDS = 0.1
    turn = Turn.objects.create(conversation=conversation_create(owner=personas.staff), status=TurnStatus.QUEUED)
    assert turn_claim(turn_id=turn.pk)
    first = Turn.objects.get(pk=turn.pk).heartbeat_at
    with TurnHeartbeat(turn.pk):
        time.sleep(0.45)
    renewed = Turn.objects.get(pk=turn.pk).heartbeat_at
    assert renewed > first
    time.sleep(0.25)
    assert Turn.objects.get(pk=turn.pk).heartbeat_at == renewed  # stops with the turn


@pytest.mark.django_db(transaction=True)
def test_turns_joining_do_not_call_for_extra_beats(personas, settings):
    """Beats keep their interval however many turns start: a turn's claim
    wrote its first heartbeat, so one joining is beaten with the others."""
    from chat.turns.heartbeat import TurnHeartbeat

    settings.OWLAI_TURN_HEARTBEAT_SECONDS = 1.0
    conversation = conversation_create(owner=personas.staff)
    first = Turn.objects.create(conversation=conversation, status=TurnStatus.QUEUED)
    assert turn_claim(turn_id=first.pk)
    claimed_at = Turn.objects.get(pk=first.pk).heartbeat_at
    with TurnHeartbeat(first.pk):
        for _ in range(3):
            time.sleep(0.1)
            other = Turn.objects.create(conversation=conversation, status=TurnStatus.QUEUED)
            assert turn_claim(turn_id=other.pk)
            with TurnHeartbeat(other.pk):
                pass
        time.sleep(0.2)
        assert Turn.objects.get(pk=first.pk).heartbeat_at == claimed_at  # no beat yet
        time.sleep(1.0)
        assert Turn.objects.get(pk=first.pk).heartbeat_at > claimed_at  # the interval's beat


# --- the websocket: state on connect, sync, gap -> replay ----------------------------


async def _next(comm, timeout=10) -> dict:
    return json.loads(await comm.receive_from(timeout=timeout))


@pytest.mark.django_db(transaction=True)
def test_a_connecting_client_gets_the_state_from_the_database(personas, install_models):
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        first = communicator(conversation.pk, cookie=cookie)
        assert (await first.connect())[0]
        empty = await _next(first)
        await first.send_to(text_data=json.dumps({"type": "turn.start", "text": "SELECT 1 AS one"}))
        live = await receive_until(first)
        await first.disconnect()
        second = communicator(conversation.pk, cookie=cookie)
        assert (await second.connect())[0]
        state = await _next(second)
        await second.disconnect()
        return empty, live, state

    empty, live, state = async_to_sync(scenario)()
    assert empty == {"type": "state", "messages": [], "turn": None}
    assert state["type"] == "state"
    (message,) = state["messages"]
    assert message.pop("at")  # when it was sent
    assert message == {"role": "user", "content": "SELECT 1 AS one", "turn_id": live[0]["turn_id"], "supersedes": None}
    assert state["turn"]["status"] == "completed" and state["turn"]["turn_id"] == live[0]["turn_id"]
    assert state["turn"]["events"] == live  # the finished turn renders as it did live


@pytest.mark.django_db(transaction=True)
def test_a_gap_in_seq_is_filled_by_sync(personas, install_models, monkeypatch):
    """The layer drops a frame (here: every tool.finished); the client sees the
    gap and asks for the rest; nothing is lost."""
    real_publish_all = chat_events.publish_all
    monkeypatch.setattr(
        "chat.events.publish_all",
        lambda group, frames: real_publish_all(group, [f for f in frames if f["type"] != "tool.finished"]),
    )
    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await _next(comm)  # state
        await comm.send_to(text_data=json.dumps({"type": "turn.start", "text": "@sales SELECT name FROM customers"}))
        live = await receive_until(comm)
        seqs = [e["seq"] for e in live]
        gap_after = next(a for a, b in zip(seqs, seqs[1:], strict=False) if b != a + 1)
        await comm.send_to(
            text_data=json.dumps({"type": "sync", "turn_id": live[0]["turn_id"], "after_seq": gap_after})
        )
        replayed = await receive_until(comm)
        await comm.send_to(text_data=json.dumps({"type": "sync", "turn_id": 10**9, "after_seq": 0}))
        unknown = await _next(comm)
        await comm.send_to(text_data=json.dumps({"type": "sync", "turn_id": "1", "after_seq": -1}))
        bad = await _next(comm)
        await comm.send_to(text_data=json.dumps({"type": "sync"}))
        whole = await _next(comm)
        await comm.disconnect()
        return live, gap_after, replayed, unknown, bad, whole

    live, gap_after, replayed, unknown, bad, whole = async_to_sync(scenario)()
    assert "tool.finished" not in {e["type"] for e in live}
    assert replayed[0]["seq"] == gap_after + 1 and replayed[0]["type"] == "tool.finished"
    merged = {e["seq"]: e for e in live + replayed}
    assert sorted(merged) == list(range(1, max(merged) + 1))
    assert [merged[s] for s in sorted(merged)] == stored(Turn.objects.get(pk=live[0]["turn_id"]))
    assert (unknown["type"], unknown["code"]) == ("error", "bad_event")
    assert (bad["type"], bad["code"]) == ("error", "bad_event")
    assert whole["type"] == "state" and whole["turn"]["events"][-1]["type"] == "turn.finished"


@pytest.mark.django_db(transaction=True)
def test_a_socket_resyncs_after_the_layer_recovers(personas, install_models):
    """After a Redis outage (chat.layers) the consumer joins its group again
    and sends the stored state instead of dying with 1011."""
    from channels.layers import get_channel_layer

    cookie = session_cookie(personas.staff)
    conversation = conversation_create(owner=personas.staff)

    async def scenario():
        comm = communicator(conversation.pk, cookie=cookie)
        assert (await comm.connect())[0]
        await _next(comm)
        layer = get_channel_layer()
        channel = next(iter(layer.groups[conversation.group_name]))
        await layer.group_discard(conversation.group_name, channel)  # as if Redis lost it
        await layer.send(channel, {"type": "layer.recovered"})
        state = await _next(comm)
        rejoined = channel in layer.groups.get(conversation.group_name, {})
        await comm.disconnect()
        return state, rejoined

    state, rejoined = async_to_sync(scenario)()
    assert state["type"] == "state" and rejoined


# --- channel-layer capacity ------------------------------------------------------------


def test_a_full_channel_is_counted_and_logged(settings, caplog):
    from channels.layers import channel_layers, get_channel_layer

    from chat.layers import DROPS

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "chat.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 2}}}
    channel_layers.backends = {}
    DROPS.reset()

    async def scenario():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("conversation.x", channel)
        for n in range(5):
            await layer.group_send("conversation.x", {"type": "turn.event", "event": {"n": n}})

    with caplog.at_level(logging.WARNING, logger="chat.layers"):
        async_to_sync(scenario)()
    assert DROPS.total == 3
    assert sum("channel layer full" in r.getMessage() for r in caplog.records) == 3


def test_the_capacity_comes_from_the_environment(monkeypatch):
    import importlib
    import os

    import owlai.settings as owlai_settings

    monkeypatch.setitem(os.environ, "OWLAI_CHANNEL_CAPACITY", "4321")
    try:
        reloaded = importlib.reload(owlai_settings)
        assert reloaded.CHANNEL_LAYERS["default"]["CONFIG"]["capacity"] == 4321
    finally:
        monkeypatch.delitem(os.environ, "OWLAI_CHANNEL_CAPACITY")
        importlib.reload(owlai_settings)


@pytest.mark.services
def test_redis_layer_counts_what_a_full_socket_queue_drops(require_redis, settings, caplog):
    """Pub/sub: messages wait in the receiving process, at most `capacity`
    per socket; the rest are dropped there, counted and logged. A blocking
    group send (a worker's) reaches the socket like an async one."""
    import asyncio
    import uuid

    from chat.layers import DROPS, RedisChannelLayer

    layer = RedisChannelLayer(hosts=[settings.REDIS_URL], prefix=f"owlai-test-{uuid.uuid4().hex[:8]}", capacity=2)
    DROPS.reset()

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("conversation.y", channel)
        for n in range(3):
            await layer.group_send("conversation.y", {"type": "turn.event", "event": {"n": n}})
        for n in range(3, 5):
            await asyncio.to_thread(
                layer.group_send_blocking, "conversation.y", {"type": "turn.event", "event": {"n": n}}
            )
        async with asyncio.timeout(10):
            while DROPS.total < 3:
                await asyncio.sleep(0.01)
        received = [await layer.receive(channel) for _ in range(2)]
        await layer.flush()
        return received

    with caplog.at_level(logging.WARNING, logger="chat.layers"):
        received = async_to_sync(scenario)()
    assert [m["event"]["n"] for m in received] == [0, 1]
    assert DROPS.total == 3 and any("channel layer full" in r.getMessage() for r in caplog.records)


@pytest.mark.services
def test_redis_layer_tells_every_socket_when_its_connection_came_back(require_redis, settings):
    """A reconnection of the subscribed connection (Redis restarted: what was
    published meanwhile is lost) reaches every socket of the process as
    `layer.recovered`, even one whose queue is full; messages flow again."""
    import asyncio
    import uuid

    from chat.layers import RECOVERED, RedisChannelLayer

    layer = RedisChannelLayer(hosts=[settings.REDIS_URL], prefix=f"owlai-test-{uuid.uuid4().hex[:8]}", capacity=2)

    async def scenario():
        full, idle = await layer.new_channel(), await layer.new_channel()
        await layer.group_add("conversation.z", full)
        for n in range(2):
            await layer.send(full, {"type": "turn.event", "event": {"n": n}})
        loop_layer = layer._get_layer()
        async with asyncio.timeout(10):
            while loop_layer.channels[full].qsize() < 2:
                await asyncio.sleep(0.01)
        # The server drops the subscribed connection, as a restart would.
        await loop_layer._shards[0]._redis.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        async with asyncio.timeout(10):
            idle_first = await layer.receive(idle)
            from_full = [await layer.receive(full)]
            while from_full[-1] != RECOVERED:
                from_full.append(await layer.receive(full))
        await layer.group_send("conversation.z", {"type": "turn.event", "event": {"n": 9}})
        async with asyncio.timeout(10):
            after = await layer.receive(full)
        await layer.flush()
        return idle_first, from_full, after

    idle_first, from_full, after = async_to_sync(scenario)()
    assert idle_first == RECOVERED
    # The full queue made room for it (its oldest message went).
    assert from_full == [{"type": "turn.event", "event": {"n": 1}}, RECOVERED]
    assert after["event"] == {"n": 9}


# One statement: PostgreSQL only; make test's SQLite pass runs the other case.
START_PATHS = [True, False] if settings.DATABASES["default"]["ENGINE"].endswith("postgresql") else [False]


@pytest.mark.django_db
@pytest.mark.embedded
@pytest.mark.parametrize("one_statement", START_PATHS, ids=lambda one: "one-statement" if one else "three-statements")
@pytest.mark.parametrize("prepared_statements", [True, False], ids=["prepared", "client-bound"])
def test_a_turn_start_stores_the_turn_its_message_title_and_language(
    personas, monkeypatch, settings, one_statement, prepared_statements
):
    """PostgreSQL stores a turn's start in one statement; elsewhere (SQLite)
    in three: both store the same rows."""
    from django.utils import translation

    from accounts.language import user_language_set
    from chat.models import Message

    monkeypatch.setattr("owlai.prepared.writes_in_with", lambda: one_statement)
    settings.OWLAI_PREPARED_STATEMENTS = prepared_statements
    conversation = conversation_create(owner=personas.staff)
    before = Conversation.objects.get(pk=conversation.pk).updated_at
    with translation.override("ko"):
        first = turn_start(conversation=conversation, user=personas.staff, text="  첫 질문입니다  ", model="m-1")
    stored = Turn.objects.get(pk=first.pk)
    assert (stored.status, stored.requested_model, stored.language) == (TurnStatus.QUEUED, "m-1", "ko")
    assert first.conversation_id == conversation.pk and not first._state.adding
    [message] = Message.objects.filter(turn=stored)
    assert (message.role, message.content, message.conversation_id) == ("user", "첫 질문입니다", conversation.pk)
    after = Conversation.objects.get(pk=conversation.pk)
    assert after.title == "첫 질문입니다" and after.updated_at > before
    # The user's stored choice wins over the browser's; a title stays.
    Turn.objects.filter(pk=first.pk).update(status=TurnStatus.COMPLETED)
    user_language_set(user=personas.staff, language="en")
    with translation.override("ko"):
        second = turn_start(conversation=conversation, user=personas.staff, text="second", model=None)
    assert Turn.objects.get(pk=second.pk).language == "en"
    assert Message.objects.get(turn_id=second.pk).content == "second"
    assert Conversation.objects.get(pk=conversation.pk).title == "첫 질문입니다"


@pytest.mark.django_db
@pytest.mark.embedded
@pytest.mark.parametrize("prepared_statements", [True, False], ids=["prepared", "client-bound"])
def test_a_turns_end_and_its_rows_are_stored_together_or_not_at_all(personas, settings, prepared_statements):
    """chat.turns.journal.append: the events and rows go in only when the
    conditional UPDATE matched, and a refused row undoes the UPDATE (one
    statement on PostgreSQL, one transaction elsewhere)."""
    from django.db import IntegrityError, transaction

    from chat.models import Message
    from chat.turns import journal

    settings.OWLAI_PREPARED_STATEMENTS = prepared_statements
    conversation = conversation_create(owner=personas.staff)

    def end(turn, *numbers):
        message = Message(conversation=conversation, turn_id=turn.pk, role="assistant", content="done")
        return journal.append(
            turn_id=turn.pk,
            group=conversation.group_name,
            frames=[("turn.finished", {"n": n}) for n in numbers],
            when=(TurnStatus.RUNNING,),
            changes={"status": TurnStatus.COMPLETED, "finished_at": timezone.now()},
            rows=[message],
        )

    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.RUNNING)
    assert [f["seq"] for f in end(turn, 1, 2)] == [1, 2]
    assert Turn.objects.get(pk=turn.pk).status == "completed"
    assert list(TurnEvent.objects.filter(turn=turn).values_list("seq", "payload")) == [(1, {"n": 1}), (2, {"n": 2})]
    assert Message.objects.filter(turn=turn).count() == 1
    assert end(turn, 3) is None  # no longer running: nothing stored
    assert TurnEvent.objects.filter(turn=turn).count() == 2
    assert Message.objects.filter(turn=turn).count() == 1

    other = Turn.objects.create(conversation=conversation, status=TurnStatus.RUNNING)
    TurnEvent.objects.create(turn=other, seq=1, type="turn.accepted")  # behind the journal's back
    with pytest.raises(IntegrityError), transaction.atomic():
        end(other, 1)  # the number it takes is taken
    assert Turn.objects.get(pk=other.pk).status == TurnStatus.RUNNING
    assert Turn.objects.get(pk=other.pk).last_seq == 0
    assert TurnEvent.objects.filter(turn=other).count() == 1
    assert not Message.objects.filter(turn=other).exists()


@pytest.mark.django_db
def test_a_crash_while_building_the_models_input_ends_the_turn_at_once(
    personas, install_models, published, monkeypatch
):
    from chat.turns import runner

    def broken(**kwargs):
        raise RuntimeError("inputs")

    monkeypatch.setattr(runner, "turn_inputs", broken)
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(conversation=conversation, user=personas.staff, text="안녕", model=None)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert (turn.status, turn.failure) == (TurnStatus.FAILED, "crash")
    assert [r["type"] for r in stored(turn)][-1] == "turn.finished"
