"""Conversation retention: a conversation is purged one year after
its last activity, or thirty days after its owner deleted it. Purging removes
its turns, messages, token vault, URL references and spill files; the audit rows of what it
touched stay (they refer to it by value, and have their own, longer,
retention: audit.retention)."""

from __future__ import annotations

import logging
import shutil

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chat.executor import spill_folder
from chat.models import Conversation, UrlReference, VaultEntry

logger = logging.getLogger(__name__)

BATCH = 500


def conversations_purge(*, now=None) -> int:
    """Delete every conversation due for purge; returns how many went."""
    now = now or timezone.now()
    # Backstop: a vault row written for a deleted conversation (a worker
    # killed mid-turn skips the turn's own clean-up) goes today, not in 30 days.
    VaultEntry.objects.filter(conversation__deleted_at__isnull=False).delete()
    UrlReference.objects.filter(conversation__deleted_at__isnull=False).delete()
    purged = 0
    while True:
        with transaction.atomic():
            # Locked, and the due condition re-checked under the lock: a turn
            # that starts now holds the row (skipped today) or has made the
            # conversation active (no longer due). turn_start locks the same
            # row, so no turn can slip into a conversation being purged.
            ids = list(
                _due(now).select_for_update(skip_locked=True).order_by("pk").values_list("pk", flat=True)[:BATCH]
            )
            if not ids:
                break
            Conversation.objects.filter(pk__in=ids).delete()
        for conversation_id in ids:
            shutil.rmtree(spill_folder(conversation_id), ignore_errors=True)
        purged += len(ids)
    if purged:
        logger.info("conversation retention: purged %d conversation(s)", purged)
    return purged


def _due(now):
    return Conversation.objects.due_for_purge(
        now=now,
        idle_days=settings.OWLAI_CONVERSATION_IDLE_DAYS,
        deleted_days=settings.OWLAI_CONVERSATION_DELETED_DAYS,
    )
