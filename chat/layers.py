"""Channel layers that make dropped messages visible and survive Redis restarts.

Production uses Redis pub/sub: a group send is one PUBLISH, a socket's
messages arrive on its process's one subscribed connection, and nothing of
the layer is stored in Redis (memberships are the process's subscriptions,
so a Redis restart loses none). Turn events are stored before they are sent
(chat.events), so a message the layer loses costs the user nothing: the page
sees the gap in `seq` and resyncs. But a loss must be seen:

- a socket's local queue holds at most `capacity` messages; past that a
  message is dropped, counted (`DROPS`) and logged at WARNING (upstream's
  queue is unbounded, and the in-memory layer drops silently);
- when the subscribed connection comes back after an outage (a restart, the
  network), every socket of the process gets a synthetic `layer.recovered`
  message: frames published meanwhile are gone, so it sends its client the
  state from the database.

Workers and views publish from synchronous code with `group_send_blocking`:
one PUBLISH on a shared connection pool, no event loop made per message.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter

import redis
from asgiref.sync import async_to_sync
from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer as _InMemoryChannelLayer
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer, RedisSingleShardConnection
from channels_redis.utils import _consistent_hash, _wrap_close, decode_hosts
from redis.asyncio.client import PubSub

from chat.protocol import LayerMessage

logger = logging.getLogger(__name__)

RECOVERED = {"type": LayerMessage.LAYER_RECOVERED.value}


class DropCounter:
    """Process-wide count of messages the layer refused, by group or channel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_target: Counter[str] = Counter()

    def add(self, target: str, n: int = 1) -> None:
        with self._lock:
            self.by_target[target] += n
            total = self.total
        logger.warning(
            "channel layer full: %d message(s) to %s dropped (%d dropped in this process); "
            "clients resync from the database, raise OWLAI_CHANNEL_CAPACITY if this repeats",
            n,
            target,
            total,
        )

    @property
    def total(self) -> int:
        return sum(self.by_target.values())

    def reset(self) -> None:
        with self._lock:
            self.by_target.clear()


DROPS = DropCounter()


class InMemoryChannelLayer(_InMemoryChannelLayer):
    async def send(self, channel, message):
        try:
            await super().send(channel, message)
        except ChannelFull:
            DROPS.add(channel)
            raise

    # Upstream's group_send calls send() per member and swallows ChannelFull:
    # counted above.


class RedisChannelLayer(RedisPubSubChannelLayer):
    """channels-redis's pub/sub layer with a bounded, counted queue per
    socket, a `layer.recovered` message after an outage, and a blocking
    group send for synchronous code."""

    def __init__(self, *args, capacity: int = 1000, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.capacity = capacity
        self._clients: list[redis.Redis] | None = None
        self._clients_lock = threading.Lock()

    def _get_layer(self):
        # Upstream's proxy, making our loop layer (one per event loop).
        loop = asyncio.get_running_loop()
        try:
            return self._layers[loop]
        except KeyError:
            layer = _LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            self._layers[loop] = layer
            _wrap_close(self, loop)
            return layer

    def group_send_blocking(self, group: str, message: dict) -> None:
        """The group send of synchronous code (a worker's turn, a view):
        one PUBLISH, as the async layer would send it. Raises on a Redis
        error; callers decide whether that matters."""
        name = f"{self._kwargs.get('prefix', 'asgi')}__group__{group}"
        clients = self._sync_clients()
        clients[_consistent_hash(name, len(clients))].publish(name, self.serialize(message))

    def _sync_clients(self) -> list[redis.Redis]:
        with self._clients_lock:
            if self._clients is None:
                self._clients = [_sync_client(host) for host in decode_hosts(self._kwargs.get("hosts"))]
            return self._clients


def _sync_client(host: dict) -> redis.Redis:
    """A thread-safe client for one shard, as channels-redis's create_pool
    reads a host entry. Short timeouts: publishing is best effort (the
    events are stored), a Redis outage must not hold a turn."""
    host = dict(host)
    timeouts = {"socket_connect_timeout": 2.0, "socket_timeout": 2.0}
    if "address" in host:
        return redis.Redis.from_url(host.pop("address"), **{**timeouts, **host})
    master_name = host.pop("master_name", None)
    if master_name is not None:
        sentinel = redis.sentinel.Sentinel(host.pop("sentinels"), sentinel_kwargs=host.pop("sentinel_kwargs", None))
        return sentinel.master_for(master_name, **{**timeouts, **host})
    return redis.Redis(**{**timeouts, **host})


class _LoopLayer(RedisPubSubLoopLayer):
    def __init__(self, *args, channel_layer: RedisChannelLayer, **kwargs) -> None:
        super().__init__(*args, channel_layer=channel_layer, **kwargs)
        self._shards = [_Shard(shard.host, self) for shard in self._shards]

    async def _subscribe_to_channel(self, channel):
        self.channels[channel] = asyncio.Queue(maxsize=self.channel_layer.capacity)
        await self._get_shard(channel).subscribe(channel)


class _CountingPubSub(PubSub):
    """Counts the connection's connects: a second one is a reconnection
    (redis-py subscribes again on its own; what was published between is lost)."""

    connects = 0

    async def on_connect(self, connection) -> None:
        await super().on_connect(connection)
        self.connects += 1


class _Shard(RedisSingleShardConnection):
    def _ensure_redis(self):
        if self._redis is None:
            super()._ensure_redis()
            self._pubsub = _CountingPubSub(self._redis.connection_pool)

    async def _do_receiving(self):
        seen_connects = None  # connects of the subscribed connection when first seen
        delay = 0.25
        failing = False
        while True:
            try:
                pubsub = self._pubsub
                if pubsub is not None and pubsub.subscribed:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
                    if failing:
                        logger.warning("channel layer reachable again; this process's sockets resync")
                    failing, delay = False, 0.25
                    if seen_connects is not None and pubsub.connects > seen_connects:
                        self._recovered()
                    seen_connects = pubsub.connects
                    self._receive_message(message)
                else:
                    await asyncio.sleep(0.1)
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:
                if not failing:
                    logger.warning("channel layer unreachable (%s); retrying", exc)
                failing = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _receive_message(self, message):
        if message is None:
            return
        name = message["channel"]
        if isinstance(name, bytes):
            name = name.decode()
        layer = self.channel_layer
        targets = [name] if name in layer.channels else layer.groups.get(name, ())
        for channel in targets:
            queue = layer.channels.get(channel)
            if queue is None:
                continue
            try:
                queue.put_nowait(message["data"])
            except asyncio.QueueFull:
                DROPS.add(channel)

    def _recovered(self) -> None:
        """Every socket of this process hears it, even one whose queue is
        full: the state it then sends replaces whatever was waiting."""
        recovered = self.channel_layer.channel_layer.serialize(RECOVERED)
        for queue in list(self.channel_layer.channels.values()):
            while queue.full():
                queue.get_nowait()
            queue.put_nowait(recovered)


def group_send_now(group: str, message: dict) -> None:
    """Send to a group from synchronous code (a worker thread, a view)."""
    layer = get_channel_layer()
    blocking = getattr(layer, "group_send_blocking", None)
    if blocking is not None:
        blocking(group, message)
    else:
        async_to_sync(layer.group_send)(group, message)
