"""Conversation actions: create, rename, delete; the owner starts a
turn (`turn_start`: validate, record; the consumer then hands it to
chat.turns.dispatch) or stops one (`turn_cancel`).

A turn's life after its start is in chat.turns (lifecycle, runner,
recovery, timeline).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from accounts.language import language_from
from chat import events
from chat.approvals import (
    tool_approvals_expire,
    tool_approvals_withdraw,
)
from chat.models import ACTIVE_TURN_STATUSES, Conversation, Message, MessageRole, Turn, TurnStatus
from chat.turns import lifecycle, recovery
from chat.turns import statements as sql
from governance.models import LlmModel
from owlai import prepared

logger = logging.getLogger(__name__)


class TurnRefused(Exception):
    """The consumer refuses to start a turn; the message goes to the user."""


TITLE_MAX_CHARS = 200


# A title taken from the first message: its first line, this long at most.
AUTO_TITLE_CHARS = 60


def conversation_create(*, owner: AbstractBaseUser, title: str = "", model: LlmModel | None = None) -> Conversation:
    return Conversation.objects.create(owner=owner, title=title[:TITLE_MAX_CHARS], model=model)


def title_from_message(text: str) -> str:
    """The first line of the first message, spaces collapsed, cut at a word
    boundary near AUTO_TITLE_CHARS with an ellipsis."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    first = " ".join(first.split())
    if len(first) <= AUTO_TITLE_CHARS:
        return first
    cut = first[:AUTO_TITLE_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > AUTO_TITLE_CHARS // 2 else cut).rstrip() + "…"


class ConversationRenameRefused(Exception):
    """The new title is unusable; the message goes to the user."""


def conversation_rename(*, conversation: Conversation, title: str, actor: AbstractBaseUser) -> Conversation:
    """The owner renames their conversation. The title is the owner's own
    content (never shown to admins), so this is not an audit event."""
    if conversation.owner_id != actor.pk:
        raise ConversationRenameRefused(_("Only the owner can rename this conversation."))
    title = " ".join(title.split())
    if not title:
        raise ConversationRenameRefused(_("The title is empty."))
    if len(title) > TITLE_MAX_CHARS:
        raise ConversationRenameRefused(
            _("The title is too long (at most %(max)d characters).") % {"max": TITLE_MAX_CHARS}
        )
    if not Conversation.objects.live().filter(pk=conversation.pk).update(title=title, updated_at=timezone.now()):
        raise ConversationRenameRefused(_("This conversation was deleted."))
    conversation.title = title
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """The owner deletes a conversation: it disappears from their
    list and API at once, and its token vault (the originals behind its
    tokens) is deleted at once; messages and spill files stay until the
    purge `OWLAI_CONVERSATION_DELETED_DAYS` later (chat.retention). Audit
    rows never go with it (they name it by value only)."""
    from chat.models import UrlReference, VaultEntry

    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk, deleted_at__isnull=True).update(deleted_at=timezone.now())
        VaultEntry.objects.filter(conversation_id=conversation.pk).delete()
        # The URLs behind its references hold credentials: they go at once too.
        UrlReference.objects.filter(conversation_id=conversation.pk).delete()
    # Open sockets of this conversation close (a running turn stops at its
    # next step, and its vault allocations are refused: chat.vault).
    events.notify_conversation_deleted(group=conversation.group_name)


def models_for_conversation(*, conversation: Conversation | None) -> list[LlmModel]:
    """Enabled models a user may pick; once a conversation is pinned, only its tier."""
    qs = LlmModel.objects.select_related("provider").filter(enabled=True, in_config=True, provider__in_config=True)
    if conversation is not None and conversation.tier:
        qs = qs.filter(provider__tier=conversation.tier)
    return list(qs.order_by("provider__name", "name"))


@transaction.atomic
def turn_start(*, conversation: Conversation, user: AbstractBaseUser, text: str, model: str | None) -> Turn:
    if conversation.owner_id != user.pk:
        raise TurnRefused(_("Only the owner can continue this conversation."))
    text = text.strip()
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
    # The language the whole turn runs in: the user's choice, else what the
    # socket's browser asked for (the active language here), else the default.
    language = language_from(stored=stored_language, fallback=translation.get_language())
    turn = Turn(conversation=locked, requested_model=(model or "")[:300], language=language)
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


class TurnCancelRefused(Exception):
    """Nothing to stop; the message goes to the user."""


def turn_cancel(*, conversation: Conversation, actor: AbstractBaseUser, turn_id: int | None = None) -> str:
    """The owner presses Stop on the conversation's active turn (or `turn_id`).

    A queued turn no worker has claimed is cancelled at once (the worker's
    claim then finds it no longer queued). A running turn gets
    `cancel_requested_at`; its worker reads that before its next model or
    tool call and ends the turn `cancelled`, keeping what already ran (and
    its audit rows). Returns "cancelled" or "requested"."""
    if conversation.owner_id != actor.pk:
        raise TurnCancelRefused(_("Only the owner can stop this conversation's turn."))
    turns = Turn.objects.filter(conversation=conversation, status__in=ACTIVE_TURN_STATUSES)
    if turn_id is not None:
        turns = turns.filter(pk=turn_id)
    turn = turns.order_by("-created_at", "-id").first()
    if turn is None:
        raise TurnCancelRefused(_("No turn is running in this conversation."))
    if lifecycle.cancel_queued(turn):
        return "cancelled"
    if lifecycle.request_cancel(turn):
        return "requested"
    with transaction.atomic():
        # Waiting for an approval, the turn holds no worker to notice: it ends
        # here, its pending call denied by the Stop (an `approval_denied` event).
        waiting = Turn.objects.select_for_update().filter(pk=turn.pk, status=TurnStatus.WAITING_APPROVAL).first()
        if waiting is not None:
            tool_approvals_withdraw(turn=waiting, actor=actor)
            waiting.conversation = conversation
            if lifecycle.cancel_waiting(waiting):
                return "cancelled"
    # It finished between the read and the update: nothing left to stop.
    raise TurnCancelRefused(_("No turn is running in this conversation."))
