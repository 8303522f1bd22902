"""Websocket endpoint for one conversation: /ws/chat/<conversation id>/.

Thin: validate frames, start turns through `chat.services`, relay turn events
from the conversation's group. A bad frame gets an `error` event and the
socket stays open.

The database is the truth: on connect, on request (`sync`) and after a
channel-layer outage, the client gets the conversation's state and stored
events from the database; live frames are only the fast path. A transient
channel-layer error (Redis restarting) never closes the socket with 1011.
"""

from __future__ import annotations

import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _

from chat import events
from chat.models import Conversation
from chat.services import TurnRefused, conversation_state, turn_events_after, turn_start
from chat.tasks import enqueue_turn

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
# The channel layer is unreachable: the client reconnects with backoff.
CLOSE_TRY_AGAIN_LATER = 1013


class ChatConsumer(AsyncWebsocketConsumer):
    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        conversation_id = self.scope["url_route"]["kwargs"]["conversation_id"]
        self.conversation = await self._owned_conversation(conversation_id, user.pk)
        if self.conversation is None:
            # Same answer for "not yours" and "does not exist".
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.language = self._language()
        self.group = self.conversation.group_name
        joined = await self._join()
        await self.accept()
        if not joined:
            await self.close(code=CLOSE_TRY_AGAIN_LATER)
            return
        # Joined first, then read: whatever is stored after this read also
        # reaches this socket live (or shows up as a gap and is synced).
        await self._send_state()

    async def disconnect(self, code: int) -> None:
        if self.group:
            try:
                await self.channel_layer.group_discard(self.group, self.channel_name)
            except Exception as exc:  # the membership expires on its own
                logger.warning("could not leave %s: %s", self.group, exc)

    async def _join(self) -> bool:
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
        except Exception as exc:
            logger.warning("could not join %s: %s", self.group, exc)
            return False
        return True

    async def layer_recovered(self, message: dict) -> None:
        """The channel layer was unreachable (chat.layers): memberships may
        be gone with Redis and frames may be lost. Join again and send the
        state from the database."""
        if await self._join():
            await self._send_state()

    async def _send_state(self) -> None:
        await self._send_json(await self._state())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        with translation.override(self.language):
            if text_data is None:
                await self._error("bad_frame", _("Binary frames are not supported; send JSON text."))
                return
            if len(text_data.encode("utf-8")) > settings.OWLAI_WS_MAX_FRAME_BYTES:
                await self._error("frame_too_large", _("The frame is too large."))
                return
            try:
                payload = json.loads(text_data)
            except ValueError:
                await self._error("malformed_json", _("The frame is not valid JSON."))
                return
            if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
                await self._error("bad_event", _("An event must be a JSON object with a string 'type'."))
                return
            if payload["type"] == "turn.start":
                await self._turn_start(payload)
            elif payload["type"] == "sync":
                await self._sync_frame(payload)
            else:
                await self._error("unknown_type", _("Unknown event type: %(type)s") % {"type": payload["type"][:50]})

    async def _turn_start(self, payload: dict) -> None:
        text = payload.get("text")
        model = payload.get("model")
        if not isinstance(text, str):
            await self._error("bad_event", _("'text' must be a string."))
            return
        if model is not None and not isinstance(model, (str, int)):
            await self._error("bad_event", _("'model' must be a model id or name."))
            return
        try:
            turn = await self._start(text, None if model in (None, "") else str(model))
        except TurnRefused as refused:
            await self._error("turn_refused", str(refused))
            return
        try:
            await enqueue_turn(turn.pk)
        except Exception as exc:
            # The broker is away (Redis restarting). The turn is stored as
            # queued; the recovery job enqueues it again (chat.services).
            logger.warning("turn %s stored but not enqueued: %s", turn.pk, exc)

    async def _sync_frame(self, payload: dict) -> None:
        """{"type": "sync", "turn_id": N, "after_seq": K}: the stored events of
        turn N after K; without turn_id, the whole state as on connect."""
        turn_id, after_seq = payload.get("turn_id"), payload.get("after_seq", 0)
        if turn_id is None:
            await self._send_state()
            return
        if not _is_count(turn_id) or not _is_count(after_seq):
            await self._error("bad_event", _("'turn_id' and 'after_seq' must be non-negative integers."))
            return
        frames = await self._events_after(turn_id, after_seq)
        if frames is None:
            await self._error("bad_event", _("No such turn in this conversation."))
            return
        for frame in frames:
            await self._send_json(frame)

    async def conversation_deleted(self, message: dict) -> None:
        """The owner deleted the conversation (chat.services.conversation_delete):
        nothing more is sent on this socket."""
        await self.close(code=CLOSE_FORBIDDEN)

    async def turn_event(self, message: dict) -> None:
        await self._send_json(message["event"])

    async def _send_json(self, frame: dict) -> None:
        await self.send(text_data=json.dumps(frame, ensure_ascii=False))

    async def _error(self, code: str, message: str) -> None:
        await self._send_json({"type": events.ERROR, "code": code, "message": message})

    @database_sync_to_async
    def _state(self) -> dict:
        return conversation_state(conversation=self.conversation)

    @database_sync_to_async
    def _events_after(self, turn_id: int, after_seq: int) -> list[dict] | None:
        return turn_events_after(conversation=self.conversation, turn_id=turn_id, after_seq=after_seq)

    @database_sync_to_async
    def _start(self, text: str, model: str | None):
        with translation.override(self.language):
            conversation = Conversation.objects.filter(pk=self.conversation.pk).first()
            if conversation is None:  # purged while the socket was open
                raise TurnRefused(_("This conversation was deleted."))
            return turn_start(conversation=conversation, user=self.scope["user"], text=text, model=model)

    @database_sync_to_async
    def _owned_conversation(self, conversation_id: str, user_id: int) -> Conversation | None:
        return Conversation.objects.live().filter(pk=conversation_id, owner_id=user_id).first()

    def _language(self) -> str:
        cookie = self.scope.get("cookies", {}).get(settings.LANGUAGE_COOKIE_NAME, "")
        return cookie if cookie in dict(settings.LANGUAGES) else settings.LANGUAGE_CODE


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
