"""owlai.broker: Celery's Redis transport with one Redis client per channel,
for every Redis broker URL scheme, carrying tasks as kombu's own does, also
through a Sentinel and after the pool is replaced."""

from __future__ import annotations

import uuid

import pytest
import redis
from kombu import Connection, Queue

from owlai import broker
from owlai.celery import app
from tests.support.stack import sentinel_redis


@pytest.mark.parametrize(
    "url, transport",
    [
        ("redis://127.0.0.1:6379/0", broker.Transport),
        ("rediss://127.0.0.1:6379/0", broker.Transport),
        ("sentinel://127.0.0.1:26379", broker.SentinelTransport),
    ],
)
def test_every_redis_scheme_gets_the_reusing_transport(url, transport):
    with app.connection_for_write(url) as connection:
        assert type(connection.transport) is transport


def roundtrip(connection: Connection) -> list:
    """Publish three messages and take them back, as a worker would."""
    queue = Queue(f"owlai-broker-test-{uuid.uuid4().hex[:8]}")
    got: list = []
    with connection.Producer() as producer:
        for n in range(3):
            producer.publish({"n": n}, routing_key=queue.name, declare=[queue])
    with connection.Consumer(queue, callbacks=[lambda body, message: (got.append(body["n"]), message.ack())]):
        while len(got) < 3:
            connection.drain_events(timeout=5)
    queue(connection.default_channel).delete()
    return got


@pytest.mark.services
def test_commands_share_one_client_per_pool_and_tasks_still_flow(require_redis, monkeypatch):
    built: list = []
    real_init = redis.Redis.__init__

    def counting_init(self, *args, **kwargs):
        built.append(kwargs.get("connection_pool"))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting_init)
    with Connection("redis://127.0.0.1:6379/0", transport="redis") as connection:
        assert roundtrip(connection) == [0, 1, 2]
        channel = connection.default_channel
        # Three publishes, three receipts and three acknowledgements: the
        # consuming client and one client for all the rest (kombu's own
        # transport builds one per command).
        sync_clients = [pool for pool in built if pool is channel.pool]
        assert len(sync_clients) == 1, built
        first = channel._create_client()
        assert channel._create_client() is first
        # kombu drops its pools after a connection error: the client follows.
        channel._pool = None
        second = channel._create_client()
        assert second is not first and second.connection_pool is channel.pool
        assert second.ping()


@pytest.mark.services
def test_tasks_flow_through_a_sentinel(tmp_path):
    with sentinel_redis(tmp_path) as host:
        ((sentinel_host, sentinel_port),) = host["sentinels"]
        url = f"sentinel://{sentinel_host}:{sentinel_port}"
        options = {"master_name": host["master_name"]}
        with Connection(url, transport_options=options) as connection:
            assert type(connection.default_channel) is broker.SentinelChannel
            assert roundtrip(connection) == [0, 1, 2]
