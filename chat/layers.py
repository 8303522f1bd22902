"""Channel layers that make dropped messages visible and survive Redis restarts.

Upstream channels-redis drops a group message for a channel that is full
(capacity) with an INFO line, and the in-memory layer drops it silently.
Turn events are stored before they are sent (chat.events), so a drop costs
the user nothing (the page sees the gap in `seq` and resyncs), but it must be
seen: every drop is counted (`DROPS`) and logged at WARNING.

A consumer's `receive` that fails because Redis went away (restart, network)
is retried with backoff instead of killing the consumer (which would close
the socket with 1011). When Redis answers again the consumer gets a
synthetic `layer.recovered` message: group memberships may have died with
Redis, so it joins again and sends its client the state from the database.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer as _InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer as _RedisChannelLayer

logger = logging.getLogger(__name__)

RECOVERED = {"type": "layer.recovered"}


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


def _is_connection_error(exc: BaseException) -> bool:
    import redis.exceptions

    return isinstance(exc, (ConnectionError, OSError, TimeoutError, redis.exceptions.ConnectionError))


class RedisChannelLayer(_RedisChannelLayer):
    async def send(self, channel, message):
        try:
            await super().send(channel, message)
        except ChannelFull:
            DROPS.add(channel)
            raise

    async def group_send(self, group, message):
        """Upstream's group_send, counting the members that were over capacity
        (upstream only logs them at INFO)."""
        assert self.require_valid_group_name(group), "Group name not valid"
        key = self._group_key(group)
        connection = self.connection(self.consistent_hash(group))
        await connection.zremrangebyscore(key, min=0, max=int(time.time()) - self.group_expiry)
        channel_names = [x.decode("utf8") for x in await connection.zrange(key, 0, -1)]
        to_connection, to_message, to_capacity = self._map_channel_keys_to_connection(channel_names, message)
        for connection_index, channel_keys in to_connection.items():
            connection = self.connection(connection_index)
            pipe = connection.pipeline()
            for channel_key in channel_keys:
                pipe.zremrangebyscore(channel_key, min=0, max=int(time.time()) - int(self.expiry))
            await pipe.execute()
            args = [to_message[k] for k in channel_keys] + [to_capacity[k] for k in channel_keys]
            args += [time.time(), self.expiry]
            over = await connection.eval(_GROUP_SEND_LUA, len(channel_keys), *channel_keys, *args)
            if over:
                DROPS.add(group, int(over))

    async def receive(self, channel):
        delay = 0.25
        failed = False
        while True:
            try:
                if failed:
                    # Redis answers again: tell the consumer before anything
                    # else, it has to join its groups again.
                    await self.connection(self.consistent_hash(channel)).ping()
                    logger.warning("channel layer reachable again; %s resyncs", channel)
                    return dict(RECOVERED)
                return await super().receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                if not failed:
                    logger.warning("channel layer unreachable (%s); %s retries", exc, channel)
                failed = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)


# channels-redis 4.x's group_send script: add to each member channel under
# its capacity; return how many were over.
_GROUP_SEND_LUA = """
    local over_capacity = 0
    local current_time = ARGV[#ARGV - 1]
    local expiry = ARGV[#ARGV]
    for i=1,#KEYS do
        if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[i + #KEYS]) then
            redis.call('ZADD', KEYS[i], current_time, ARGV[i])
            redis.call('EXPIRE', KEYS[i], expiry)
        else
            over_capacity = over_capacity + 1
        end
    end
    return over_capacity
"""
