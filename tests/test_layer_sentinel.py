"""The channel layer behind Redis Sentinel (README: where state lives): a
Sentinel host entry reaches the master through the sentinel, both for the
web processes' subscriptions and for the workers' blocking publish. Runs its
own redis-server and a sentinel on free loopback ports."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from asgiref.sync import async_to_sync

from tests.support.stack import sentinel_redis

pytestmark = pytest.mark.services


@pytest.fixture
def sentinel(tmp_path):
    with sentinel_redis(tmp_path) as host:
        yield host


def test_the_layer_publishes_and_subscribes_through_a_sentinel(sentinel):
    from chat.layers import RedisChannelLayer

    layer = RedisChannelLayer(hosts=[sentinel], prefix=f"owlai-test-{uuid.uuid4().hex[:8]}")

    async def scenario():
        channel = await layer.new_channel()
        await layer.group_add("conversation.s", channel)
        await layer.group_send("conversation.s", {"type": "turn.event", "event": {"n": 1}})
        await asyncio.to_thread(layer.group_send_blocking, "conversation.s", {"type": "turn.event", "event": {"n": 2}})
        async with asyncio.timeout(10):
            received = [await layer.receive(channel), await layer.receive(channel)]
        await layer.flush()
        return received

    assert [m["event"]["n"] for m in async_to_sync(scenario)()] == [1, 2]
