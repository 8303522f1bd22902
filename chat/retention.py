"""Conversation retention (seed 003): a conversation is purged one year after
its last activity, or thirty days after its owner deleted it. Purging removes
its turns, messages, token vault and spill files; the audit rows of what it
touched stay (they refer to it by value, and have their own, longer,
retention: audit.retention)."""

from __future__ import annotations

import logging
import shutil

from django.conf import settings
from django.utils import timezone

from chat.executor import spill_folder
from chat.models import Conversation

logger = logging.getLogger(__name__)

BATCH = 500


def conversations_purge(*, now=None) -> int:
    """Delete every conversation due for purge; returns how many went."""
    now = now or timezone.now()
    due = Conversation.objects.due_for_purge(
        now=now,
        idle_days=settings.OWLAI_CONVERSATION_IDLE_DAYS,
        deleted_days=settings.OWLAI_CONVERSATION_DELETED_DAYS,
    )
    purged = 0
    while True:
        ids = list(due.values_list("pk", flat=True)[:BATCH])
        if not ids:
            break
        # Re-checked in the DELETE itself: a turn that started since the ids
        # were read has made the conversation active again, and it stays.
        due.filter(pk__in=ids).delete()
        kept = set(Conversation.objects.filter(pk__in=ids).values_list("pk", flat=True))
        gone = [conversation_id for conversation_id in ids if conversation_id not in kept]
        for conversation_id in gone:
            shutil.rmtree(spill_folder(conversation_id), ignore_errors=True)
        purged += len(gone)
        if not gone:
            break  # nothing would move on the next round either
    if purged:
        logger.info("conversation retention: purged %d conversation(s)", purged)
    return purged
