"""Starting a run. A chat turn: the owner sends a message (`turn_start`:
validate, lock the conversation, record; the consumer then hands it to
chat.turns.dispatch). A run of another origin (`run_start`) gets a
conversation of its own, since the run core keeps a run's messages, events
and vault with a conversation; it is queued like any turn and handed over
through chat.turns.dispatch."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from accounts.language import language_from, user_language
from chat.approvals import tool_approvals_expire
from chat.models import ACTIVE_TURN_STATUSES, Conversation, Message, MessageRole, Turn, TurnStatus
from chat.services import TITLE_MAX_CHARS, title_from_message
from chat.turns import recovery
from chat.turns import statements as sql
from chat.turns.origins import RunOrigin
from owlai import prepared

logger = logging.getLogger(__name__)


class TurnRefused(Exception):
    """The consumer refuses to start a turn; the message goes to the user."""


@transaction.atomic
def turn_start(
    *, conversation: Conversation, user: AbstractBaseUser, text: str, model: str | None, supersedes: int | None = None
) -> Turn:
    """A new turn of `conversation` asking `text`. With `supersedes` (a
    turn id) it is a new version of the conversation's latest turn: that
    turn's answer regenerated (`text` empty: the same message again) or its
    message edited. Either way it is an ordinary turn from here on."""
    if conversation.owner_id != user.pk:
        raise TurnRefused(_("Only the owner can continue this conversation."))
    text = text.strip()
    if supersedes is not None and not text:
        text = _superseded_message(conversation, supersedes)
    if not text:
        raise TurnRefused(_("The message is empty."))
    if len(text) > settings.OWLAI_MAX_MESSAGE_CHARS:
        raise TurnRefused(
            _("The message is too long (at most %(max)d characters).") % {"max": settings.OWLAI_MAX_MESSAGE_CHARS}
        )
    # Lock the conversation so two sockets cannot start two turns at once;
    # everything below reads the locked row (the caller's copy may be stale:
    # renamed, deleted). The same statement reads the user's language.
    key = sql.conversation_key(conversation.pk)
    rows = prepared.fetchall(sql.lock(connection.features.has_select_for_update), [user.pk, key])
    locked = prepared.instances(Conversation, rows[0]) if rows else None
    if locked is None or locked.deleted_at is not None:
        raise TurnRefused(_("This conversation was deleted."))
    active, stored_language = rows[0][-2:]
    if active:  # a turn of it is queued, running or waiting for an approval
        # A turn whose worker died must not block the conversation until the
        # next recovery round (or forever, in the embedded profile without
        # beat); likewise an approval request left unanswered past its expiry
        # (the embedded profile runs no beat): its turn goes on.
        recovery.turns_recover(conversation_id=locked.pk, requeue=False)
        tool_approvals_expire(conversation_id=locked.pk)
        if Turn.objects.filter(conversation=locked, status=TurnStatus.WAITING_APPROVAL).exists():
            raise TurnRefused(_("A tool call in this conversation is waiting for your approval; answer it first."))
        if Turn.objects.filter(conversation=locked, status__in=ACTIVE_TURN_STATUSES).exists():
            raise TurnRefused(_("A turn is already running in this conversation."))
    if supersedes is not None:
        _check_supersedes(locked, supersedes)
    # The language the whole turn runs in: the user's choice, else what the
    # socket's browser asked for (the active language here), else the default.
    language = language_from(stored=stored_language, fallback=translation.get_language())
    turn = Turn(conversation=locked, requested_model=(model or "")[:300], language=language, supersedes_id=supersedes)
    message = Message(conversation=locked, turn=turn, role=MessageRole.USER, content=text)
    if not locked.title:
        locked.title = title_from_message(text)
    locked.updated_at = timezone.now()
    touch = [locked.title, connection.ops.adapt_datetimefield_value(locked.updated_at), key]
    if prepared.writes_in_with():
        # The turn, its message and the conversation's title and time in one
        # statement (data-modifying WITH): one round trip on the hot path.
        message_values = prepared.insert_values(message)
        del message_values[sql.message_turn_index()]  # the new turn's id, from the statement itself
        ((turn_pk, message_pk),) = prepared.fetchall(
            sql.start(), [*prepared.insert_values(turn), *message_values, *touch]
        )
        prepared.inserted(turn, turn_pk)
        message.turn = turn
        prepared.inserted(message, message_pk)
    else:
        prepared.insert(turn)
        message.turn = turn
        prepared.insert(message)
        prepared.fetchall(sql.touch(), touch)
    return turn


def _superseded_message(conversation: Conversation, turn_id: int) -> str:
    """The user message of the turn a regeneration replaces ("" if none)."""
    message = (
        Message.objects.filter(conversation_id=conversation.pk, turn_id=turn_id, role=MessageRole.USER)
        .values_list("content", flat=True)
        .first()
    )
    return message or ""


def _check_supersedes(conversation: Conversation, turn_id: int) -> None:
    """Only the latest turn gets a new version: an earlier one would need
    the turns after it to leave the history too (branches), which the page
    does not offer."""
    latest = Turn.objects.filter(conversation_id=conversation.pk).order_by("-created_at", "-id").first()
    if latest is None or latest.pk != turn_id:
        raise TurnRefused(_("Only the latest message can be edited or its answer regenerated."))


@transaction.atomic
def run_start(
    *,
    origin: RunOrigin,
    user,
    text: str,
    title: str,
    origin_ref: str = "",
    model: str = "",
    conversation: Conversation | None = None,
) -> Turn:
    """A queued run of `origin` for `user` asking `text` (its reference
    `origin_ref` goes on every audit row it writes). The caller validates
    `text`; the run is governed exactly as a chat turn of `user` is.
    `conversation`: a run continuing one its origin started before (of the
    same owner; e.g. the next step of a multi-step run), else a new one."""
    conversation = _run_conversation(conversation, user, title)
    turn = Turn.objects.create(
        conversation=conversation,
        requested_model=model[:300],
        language=language_from(stored=user_language(user=user), fallback=settings.LANGUAGE_CODE),
        origin=origin.name,
        origin_ref=origin_ref[:100],
    )
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.USER, content=text)
    return turn


@transaction.atomic
def calls_run_start(
    *,
    origin: RunOrigin,
    user,
    calls: list[dict],
    model,
    title: str,
    origin_ref: str = "",
    conversation: Conversation | None = None,
) -> Turn:
    """A queued run of given tool calls ({"id", "name", "arguments"}), no
    model call: an origin's fixed tool step. It goes through the same claim,
    executor (visibility, checks, approval gate, audit, masking) and
    lifecycle as any run; `model` (an LlmModel) only fixes the run's tier and
    what a resumed run checks is still usable."""
    from chat.agent import LoopState

    conversation = _run_conversation(conversation, user, title)
    return Turn.objects.create(
        conversation=conversation,
        requested_model=str(model)[:300],
        model_name=model.name,
        provider_name=model.provider.name,
        tier=model.provider.tier,
        language=language_from(stored=user_language(user=user), fallback=settings.LANGUAGE_CODE),
        origin=origin.name,
        origin_ref=origin_ref[:100],
        loop_state=LoopState.of_calls(calls).as_json(),
    )


def _run_conversation(conversation: Conversation | None, user, title: str) -> Conversation:
    if conversation is None:
        return Conversation.objects.create(owner=user, title=title[:TITLE_MAX_CHARS])
    if conversation.owner_id != user.pk:
        raise TurnRefused(_("Only the owner can continue this conversation."))
    return conversation
