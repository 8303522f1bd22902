"""Starting a run of an origin other than a chat turn (chat turns start in
chat.services.turn_start, which locks the conversation and titles it). The
run gets a conversation of its own, since the run core keeps a run's
messages, events and vault with a conversation; it is then queued like any
turn and handed over through chat.turns.dispatch."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from accounts.language import language_from, user_language
from chat.models import Conversation, Message, MessageRole, Turn
from chat.turns.origins import RunOrigin

TITLE_MAX_CHARS = 200


@transaction.atomic
def run_start(*, origin: RunOrigin, user, text: str, title: str, origin_ref: str = "", model: str = "") -> Turn:
    """A queued run of `origin` for `user` asking `text` (its reference
    `origin_ref` goes on every audit row it writes). The caller validates
    `text`; the run is governed exactly as a chat turn of `user` is."""
    language = language_from(stored=user_language(user=user), fallback=settings.LANGUAGE_CODE)
    conversation = Conversation.objects.create(owner=user, title=title[:TITLE_MAX_CHARS])
    turn = Turn.objects.create(
        conversation=conversation,
        requested_model=model[:300],
        language=language,
        origin=origin.name,
        origin_ref=origin_ref[:100],
    )
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.USER, content=text)
    return turn
