"""The channel layer behind Redis Sentinel (README: where state lives): a
Sentinel host entry reaches the master through the sentinel, both for the
web processes' subscriptions and for the workers' blocking publish. Runs its
own redis-server and a sentinel on free loopback ports."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest
from asgiref.sync import async_to_sync

from tests.support.stack import free_port, wait_for_port

pytestmark = pytest.mark.services


@pytest.fixture
def sentinel(tmp_path):
    master_port, sentinel_port = free_port(), free_port()
    procs = []
    try:
        master_log = tmp_path / "master.log"
        master = subprocess.Popen(
            ["redis-server", "--port", str(master_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=master_log.open("w"),
            stderr=subprocess.STDOUT,
        )
        procs.append(master)
        wait_for_port(master_port, master, master_log)
        config = tmp_path / "sentinel.conf"
        config.write_text(f"port {sentinel_port}\nbind 127.0.0.1\nsentinel monitor owlai 127.0.0.1 {master_port} 1\n")
        sentinel_log = tmp_path / "sentinel.log"
        proc = subprocess.Popen(
            ["redis-server", str(config), "--sentinel"], stdout=sentinel_log.open("w"), stderr=subprocess.STDOUT
        )
        procs.append(proc)
        wait_for_port(sentinel_port, proc, sentinel_log)
        yield {"master_name": "owlai", "sentinels": [("127.0.0.1", sentinel_port)]}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


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
