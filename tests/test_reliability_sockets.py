"""A client that does not read, on the production stack (daphne, a Celery
worker, beat, PostgreSQL, an own redis-server): while its turn streams a
large answer, daphne's memory stays bounded, the socket is closed (4408,
OWLAI_WS_SEND_BUFFER_BYTES) and another user's turn on another conversation
finishes about as fast as without it. Sizes are reduced to keep the test
short; the bounds are generous, never tight wall-clock figures."""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.test import Client

from chat.models import Turn, TurnEvent, TurnStatus
from chat.services import conversation_create
from tests.support.fake_llm import FakeLLMServer, huge_text, text
from tests.support.slow_client import SlowClient, rss_bytes
from tests.support.stack import Stack, process_env, scripted_provider
from tests.support.ws_client import ChatClient
from tests.test_e2e_chat import staff_with_grant

pytestmark = [pytest.mark.services, pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Characters of the large answer: its deltas and its `message.completed`
# carry it twice, far more than the kernel buffers of one loopback socket.
BIG = int(os.environ.get("OWLAI_TEST_SLOW_ANSWER_CHARS", 12_000_000))
MiB = 1024 * 1024


def answer(body: dict):
    if "BIG" in str(body["messages"][-1].get("content")):
        return huge_text(BIG, piece=8 * 1024)
    return text("짧은 답입니다.")


@pytest.fixture
def stack(tmp_path, require_postgres_app_db, require_redis, pg_customer_db):
    fake = FakeLLMServer().__enter__()
    fake.script = [answer] * 100
    config_path = scripted_provider(tmp_path, fake.base_url)
    stack = Stack(
        tmp_path,
        process_env(
            config_path,
            OWLAI_TEST_TARGET_DSN=pg_customer_db.dsn,
            OWLAI_MODEL_ANSWER_MAX_CHARS=str(BIG + 1000),
            OWLAI_WS_SEND_BUFFER_BYTES=os.environ.get("OWLAI_TEST_SEND_BUFFER_BYTES", str(MiB)),
            LOG_LEVEL="WARNING",
            # A frame per streamed piece (8 KiB), as a slower model would give:
            # many frames of an ordinary size rather than a few huge ones.
            OWLAI_DELTA_COALESCE_SECONDS="0",
        ),
    )
    try:
        with stack.running():
            yield stack
    finally:
        fake.__exit__(None, None, None)


def timed_ask(client: ChatClient, text_: str) -> tuple[float, list[dict]]:
    started = time.monotonic()
    events = client.ask(text_, timeout=40)
    return time.monotonic() - started, events


def test_a_client_that_does_not_read_costs_bounded_memory_and_nothing_to_others(stack, django_user_model):
    staff = staff_with_grant(django_user_model)
    web = Client()
    web.force_login(staff)
    cookie = web.cookies["sessionid"].value
    slow_conversation = conversation_create(owner=staff)
    other = ChatClient(stack.port, conversation_create(owner=staff).pk, cookie)
    daphne_pid = stack.procs["web"].pid
    try:
        timed_ask(other, "워밍업")  # first-turn costs (imports, connections) out of the baseline
        baseline, _ = timed_ask(other, "기준")
        rss_before = rss_bytes(daphne_pid)

        slow = SlowClient(stack.port, slow_conversation.pk, cookie)
        slow.connect()
        slow.send_json({"type": "turn.start", "text": "BIG 답을 길게 해줘"})
        peak = [rss_before]
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                peak[0] = max(peak[0], rss_bytes(daphne_pid))
                time.sleep(0.1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            deadline = time.monotonic() + 20
            while not TurnEvent.objects.filter(turn__conversation=slow_conversation, type="message.delta").exists():
                assert time.monotonic() < deadline, "the large answer did not start streaming"
                time.sleep(0.1)
            loaded, events = timed_ask(other, "느린 클라이언트가 있어도")
            deadline = time.monotonic() + 40
            slow_turn = Turn.objects.get(conversation=slow_conversation)
            while slow_turn.status in (TurnStatus.QUEUED, TurnStatus.RUNNING):
                assert time.monotonic() < deadline, "the large turn did not finish"
                time.sleep(0.2)
                slow_turn.refresh_from_db()
            time.sleep(1.0)  # what daphne still does with it shows in the peak
        finally:
            sampling.set()
            sampler.join()
        closed = slow.closed_by_server(timeout=5)
        slow.close()
    except BaseException:
        print(stack.logs())
        raise
    finally:
        other.close()
    grew = (peak[0] - rss_before) / MiB
    print(
        f"baseline {baseline:.2f}s, with a slow client {loaded:.2f}s; daphne RSS {rss_before / MiB:.0f} MiB, "
        f"peak +{grew:.1f} MiB; slow turn {slow_turn.status}"
    )
    assert events[-1]["type"] == "turn.finished" and events[-1]["status"] == "completed"
    assert loaded < 3 * baseline + 2
    assert slow_turn.status == TurnStatus.COMPLETED
    completed = TurnEvent.objects.get(turn=slow_turn, type="message.completed")
    assert len(completed.payload["text"]) == BIG  # stored whole: a reconnect resyncs it
    assert closed, "the socket that did not read is still open"
    assert "does not read" in stack.logs()
    assert grew < 50, f"daphne grew by {grew:.1f} MiB for one client that does not read"
