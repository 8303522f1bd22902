"""What every websocket of the product shares: session sign-in re-checked
from the database, refusals as close codes on an accepted socket, and the
channel-layer groups it follows (chat.consumers for a conversation,
playbooks.consumers for a playbook run).

A subclass sets `groups_joined` before `_join()`; `_leave()` empties it, so
a socket closed for any reason follows nothing more."""

from __future__ import annotations

import functools
import logging

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from accounts.sessions import session_signs_in

logger = logging.getLogger(__name__)

# Each database call of a socket is one self-contained unit (no transaction
# spans two calls), so it may run on any thread of the loop's pool. The
# default (thread_sensitive=True) runs every socket's calls of this process
# one after the other on a single thread: with 50 users pressing send at
# once, the last waited for the 49 turn starts before it.
off_loop = functools.partial(database_sync_to_async, thread_sensitive=False)


class SessionSocket(AsyncWebsocketConsumer):
    groups_joined: tuple[str, ...] = ()
    # Set once the socket is being closed: nothing more is sent.
    closing = False

    async def dispatch(self, message: dict) -> None:
        """Upstream first closes stale database connections of the process's
        one synchronous thread, a hop to that thread before every message.
        These sockets touch the database only through `off_loop`, which
        closes its own connection before and after each call, so a relayed
        turn event costs no thread hop."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def _refuse(self, code: int) -> None:
        """Accept, then close with `code`: nothing is read or sent between."""
        self.closing = True
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def _join(self) -> bool:
        try:
            for group in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
        except Exception as exc:
            logger.warning("could not join %s: %s", self.groups_joined, exc)
            return False
        return True

    async def _leave(self) -> None:
        for group in self.groups_joined:
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception as exc:  # the membership expires on its own
                logger.warning("could not leave %s: %s", group, exc)
        self.groups_joined = ()

    async def _close(self, code: int) -> None:
        self.closing = True
        await self._leave()
        await self.close(code=code)

    @off_loop
    def _session_alive(self) -> bool:
        return self._session_alive_now()

    def _session_alive_now(self) -> bool:
        """The socket was authenticated when it opened; a session that has
        ended since (logout, expiry, a password change) must not start, stop
        or read anything. Read afresh from the database, as a request would."""
        session = self.scope.get("session")
        return session_signs_in(session_key=getattr(session, "session_key", None), user_id=self.scope["user"].pk)
