"""Conversation actions: create, rename, delete, and the models a
conversation may use. A turn's life (its start, Stop, lifecycle, runner,
recovery, timeline) is in chat.turns."""

from __future__ import annotations

import logging
import re

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from chat import events
from chat.models import Conversation
from governance.models import LlmModel

logger = logging.getLogger(__name__)


TITLE_MAX_CHARS = 200


# A title taken from the first message: its first line, this long at most.
AUTO_TITLE_CHARS = 60


def conversation_create(*, owner: AbstractBaseUser, title: str = "", model: LlmModel | None = None) -> Conversation:
    return Conversation.objects.create(owner=owner, title=title[:TITLE_MAX_CHARS], model=model)


# Markdown a person does not read as words: a code fence line, and the
# marker at the start of a heading, quote or list item.
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINE_MARKER = re.compile(r"^\s*(?:#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+)")


def title_from_message(text: str) -> str:
    """The first line of the first message that is not a code fence, without
    its heading/quote/list marker, spaces collapsed, cut at a word boundary
    near AUTO_TITLE_CHARS with an ellipsis (a message that opens with a code
    block was titled "```")."""
    lines = [line for line in text.splitlines() if line.strip()]
    words = (_LINE_MARKER.sub("", line) for line in lines if not _FENCE.match(line))
    first = next((line for line in words if line.strip()), lines[0] if lines else "")
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
