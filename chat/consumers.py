"""Websocket endpoint for one conversation: /ws/chat/<conversation id>/.

Thin: validate frames, start turns through `chat.services`, relay turn events
from the conversation's group. A bad frame gets an `error` event and the
socket stays open.
"""

from __future__ import annotations

import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _

from chat import events
from chat.models import Conversation
from chat.services import TurnRefused, turn_start
from chat.tasks import enqueue_turn

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


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
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

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
        await enqueue_turn(turn.pk)

    async def conversation_deleted(self, message: dict) -> None:
        """The owner deleted the conversation (chat.services.conversation_delete):
        nothing more is sent on this socket."""
        await self.close(code=CLOSE_FORBIDDEN)

    async def turn_event(self, message: dict) -> None:
        await self.send(text_data=json.dumps(message["event"], ensure_ascii=False))

    async def _error(self, code: str, message: str) -> None:
        await self.send(
            text_data=json.dumps({"type": events.ERROR, "code": code, "message": message}, ensure_ascii=False)
        )

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
