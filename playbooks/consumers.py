"""The websocket of one playbook run: /ws/playbook-runs/<run id>/.

One way: the server sends, the client sends nothing (a frame it sends is
ignored). The socket only wakes the run page (playbooks.live): on connect
and after a channel-layer outage it is sent the run's `run.changed` as the
database has it, then every `run.changed` of the run and the cut-down step
events of its conversation; the page reads the run itself from the run API.

Authentication, origin check and refusals as the chat socket's
(chat.consumers, owlai.asgi): the session; an accepted socket closed with
4401 (not signed in, or the session has ended since it opened) or 4403 (a
run this person may not watch, or none: the same answer) before anything
is sent. Who may watch is `playbooks.runs.runs_visible_to`, as for the run
API. Frames are few and small (no streamed text), so the chat socket's rate
limits and send-buffer cap have nothing to guard here.
"""

from __future__ import annotations

import json
import logging

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer

from accounts.sessions import session_signs_in
from chat.consumers import CLOSE_FORBIDDEN, CLOSE_TRY_AGAIN_LATER, CLOSE_UNAUTHENTICATED, off_loop
from chat.events import conversation_group
from playbooks import live
from playbooks.runs import runs_visible_to, shows_contents

logger = logging.getLogger(__name__)


class RunConsumer(AsyncWebsocketConsumer):
    groups_joined: tuple[str, ...] = ()
    closing = False

    async def dispatch(self, message: dict) -> None:
        """As chat's consumer: no hop to the synchronous thread before
        every message (the database is reached only through `off_loop`),
        since the conversation's every streamed delta arrives here too."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        run = await self._visible_run()
        if run is None:
            await self._refuse(CLOSE_FORBIDDEN)
            return
        groups = [live.run_group(run.pk)]
        # The steps' tool lines only for the run's person: the playbook's
        # owner watching someone else's run is told its status and reasons,
        # not what that person's access is doing (playbooks.runs.shows_contents).
        if run.conversation_id and shows_contents(run, user):
            groups.append(conversation_group(run.conversation_id.hex))
        self.groups_joined = tuple(groups)
        joined = await self._join()
        await self.accept()
        if not joined:
            await self.close(code=CLOSE_TRY_AGAIN_LATER)
            return
        # Joined first, then read: a change committed after this read
        # reaches this socket as a frame.
        await self._send_current()

    async def _refuse(self, code: int) -> None:
        """Accept, then close with `code`: nothing is read or sent between."""
        self.closing = True
        await self.accept()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        await self._leave()

    async def receive(self, text_data=None, bytes_data=None) -> None:
        pass  # one way: nothing a client sends is read

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

    async def _send_current(self) -> None:
        if not await self._session_alive():
            await self._close(CLOSE_UNAUTHENTICATED)
            return
        run = await self._visible_run()
        if run is None:  # gone meanwhile
            await self._close(CLOSE_FORBIDDEN)
            return
        await self.send(text_data=json.dumps(live.changed_frame(run)))

    async def turn_event(self, message: dict) -> None:
        await self._relay([message["event"]])

    async def turn_events(self, message: dict) -> None:
        await self._relay(message["events"])

    async def _relay(self, frames: list[dict]) -> None:
        if self.closing:
            return
        kept = [f for f in (live.step_frame(frame) for frame in frames) if f is not None]
        if not kept:
            return  # streamed text and the like: no database read for them
        # The socket was authenticated when it opened; a session that has
        # ended since (logout, expiry, a password change) gets nothing more.
        if not await self._session_alive():
            await self._close(CLOSE_UNAUTHENTICATED)
            return
        for frame in kept:
            await self.send(text_data=json.dumps(frame, ensure_ascii=False))

    async def layer_recovered(self, message: dict) -> None:
        """The channel layer was unreachable (chat.layers): frames may be
        lost and memberships gone. Join again and send the run as stored."""
        if self.closing or not self.groups_joined:
            return
        if await self._join():
            await self._send_current()

    async def conversation_deleted(self, message: dict) -> None:
        await self._close(CLOSE_FORBIDDEN)

    async def _close(self, code: int) -> None:
        self.closing = True
        await self._leave()
        await self.close(code=code)

    @off_loop
    def _visible_run(self):
        return runs_visible_to(self.scope["user"]).filter(pk=self.run_id).first()

    @off_loop
    def _session_alive(self) -> bool:
        return self._session_alive_now()

    def _session_alive_now(self) -> bool:
        session = self.scope.get("session")
        return session_signs_in(session_key=getattr(session, "session_key", None), user_id=self.scope["user"].pk)
