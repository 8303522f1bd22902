"""Starting a turn for a token's user, exactly as the websocket starts one:
chat.turns.start.turn_start (ownership, the one-turn-at-a-time lock, the
model asked for, the language), then chat.turns.dispatch. The model and tier
rules are the run core's: the model asked for must be enabled, and once a
conversation's tier is pinned (by its first answer) a model of another tier
is rejected by the runner (`turn.rejected`), as on the page."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _

from chat.models import Conversation, Turn
from chat.services import conversation_create, models_for_conversation
from chat.turns import dispatch
from chat.turns.model_choice import lookup_model
from chat.turns.start import TurnRefused, turn_start
from governance.models import LlmModel


class ConversationNotFound(Exception):
    """Not the user's, deleted, or no such conversation (one answer for all)."""


def owned_conversation(*, user, conversation_id) -> Conversation:
    conversation = Conversation.objects.live().filter(pk=conversation_id, owner_id=user.pk).first()
    if conversation is None:
        raise ConversationNotFound
    return conversation


def visible_model(*, ref: str, conversation: Conversation | None) -> LlmModel | None:
    """The enabled model `ref` names (id, provider/name or a unique name)
    among those the conversation may pick (its tier once pinned), or None."""
    model = lookup_model(ref)
    if model is None:
        return None
    allowed = {m.pk for m in models_for_conversation(conversation=conversation)}
    return model if model.pk in allowed else None


def agent_turn_start(*, user, text: str, conversation_id=None, model: str | None = None) -> Turn:
    """A turn of `user` asking `text` in their conversation `conversation_id`
    (a new one when None), handed to a worker once stored. Raises
    ConversationNotFound, or TurnRefused with the reason for the user."""
    if model:
        conversation = (
            None if conversation_id is None else owned_conversation(user=user, conversation_id=conversation_id)
        )
        if visible_model(ref=model, conversation=conversation) is None:
            raise TurnRefused(_("No such model for this conversation: %(model)s") % {"model": model[:100]})
    with transaction.atomic():
        if conversation_id is None:
            conversation = conversation_create(owner=user)
        else:
            conversation = owned_conversation(user=user, conversation_id=conversation_id)
        turn = turn_start(conversation=conversation, user=user, text=text, model=model or None)
    hand_over(turn.pk)
    return turn


def hand_over(turn_id: int) -> None:
    """To a worker (with a broker); in the embedded profile it runs in this
    process, on the server's event loop when there is one, as the socket
    runs its turns (chat.turns.dispatch.resume_soon does exactly that for a
    queued turn, which is what a started one is)."""
    if dispatch.in_process():
        dispatch.resume_soon(turn_id)
    else:
        dispatch.send_after_start(turn_id)
