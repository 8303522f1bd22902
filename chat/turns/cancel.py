"""Stop: the owner ends the conversation's active turn, whatever state it is in
(chat.turns.lifecycle has the transitions)."""

from __future__ import annotations

import logging

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils.translation import gettext as _

from chat.approvals import tool_approvals_withdraw
from chat.models import ACTIVE_TURN_STATUSES, Conversation, Turn, TurnStatus
from chat.turns import lifecycle

logger = logging.getLogger(__name__)


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
