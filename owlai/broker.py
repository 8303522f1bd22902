"""Celery's Redis broker transport, with one Redis client per channel.

kombu's Redis channel builds a new `redis.Redis` client for every command it
sends outside its consuming connection: each task published (the web's
`run_turn.delay`), and, in a worker, each message received (recorded as
unacknowledged) and each acknowledgement. Building one fills the client's
table of response callbacks (a case-insensitive dict of ~150 commands); under
bench/load.py that was a tenth of a worker's CPU and a good part of the web
process's cost of starting a turn.

A `redis.Redis` client is safe to share between threads (each command takes
a connection from the pool; pipelines are separate objects), so the channel
keeps one per connection pool: when kombu replaces the pool (after a
connection error), the client is built again with it.

owlai.celery registers these classes for the `redis`, `rediss` and
`sentinel` URL schemes, so a deployment's own broker URL picks them up.
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis


class _OneClientPerPool:
    def _create_client(self, asynchronous: bool = False):
        if asynchronous:
            # The consuming connection (BRPOP, the poller): kombu keeps it itself.
            return super()._create_client(asynchronous=True)
        pool = self.pool
        client = self.__dict__.get("_owlai_client")
        if client is None or client.connection_pool is not pool:
            client = super()._create_client()
            self.__dict__["_owlai_client"] = client
        return client


class Channel(_OneClientPerPool, kombu_redis.Channel):
    pass


class SentinelChannel(_OneClientPerPool, kombu_redis.SentinelChannel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


TRANSPORTS = {
    "redis": "owlai.broker:Transport",
    "rediss": "owlai.broker:Transport",
    "sentinel": "owlai.broker:SentinelTransport",
}
