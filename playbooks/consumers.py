"""The websocket of one playbook run: /ws/playbook-runs/<run id>/.

One way: the server sends, the client sends nothing (a frame it sends is
ignored). The socket only wakes the run page (playbooks.live): on connect
and after a channel-layer outage it is sent the run's `run.changed` as the
database has it, then every `run.changed` of the run and the cut-down step
events of its conversation; the page reads the run itself from the run API.

Authentication, origin check and refusals as the chat socket's
(chat.sockets, chat.consumers, owlai.asgi): the session; an accepted socket closed with
4401 (not signed in, or the session has ended since it opened) or 4403 (a
run this person may not watch, or none: the same answer) before anything
is sent. Who may watch is `playbooks.runs.runs_visible_to`, as for the run
API. Frames are few and small (no streamed text), so the chat socket's rate
limits and send-buffer cap have nothing to guard here.
"""

from __future__ import annotations

import json

from chat.consumers import CLOSE_FORBIDDEN, CLOSE_TRY_AGAIN_LATER, CLOSE_UNAUTHENTICATED
from chat.events import conversation_group
from chat.sockets import SessionSocket, off_loop
from playbooks import live
from playbooks.runs import runs_visible_to, shows_contents


class RunConsumer(SessionSocket):
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

    async def receive(self, text_data=None, bytes_data=None) -> None:
        pass  # one way: nothing a client sends is read

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

    @off_loop
    def _visible_run(self):
        return runs_visible_to(self.scope["user"]).filter(pk=self.run_id).first()
