"""Answer feedback: given (or changed) by the conversation's owner, on the
record; the attached conversation as an admin is shown it."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import ResourceKind
from chat.models import ACTIVE_TURN_STATUSES, Conversation, Message, Turn, TurnStatus
from chat.vault import DbVault
from feedback import event_types
from feedback.models import COMMENT_MAX_CHARS, TAGS, AnswerFeedback, Rating
from governance.pii.masking import mask_known_any


class FeedbackRefused(Exception):
    """The feedback cannot be taken; the message goes to the person."""


@transaction.atomic
def answer_feedback_give(
    *,
    conversation: Conversation,
    turn_id: int,
    rating: str,
    actor,
    tags: list[str] | None = None,
    comment: str = "",
    attach_conversation: bool = False,
    request=None,
) -> AnswerFeedback:
    """One feedback per person and answer: giving it again changes it."""
    if conversation.owner_id != actor.pk or conversation.deleted_at is not None:
        raise FeedbackRefused(_("Only the owner can rate the answers of this conversation."))
    turn = Turn.objects.filter(conversation=conversation, pk=turn_id).exclude(status__in=ACTIVE_TURN_STATUSES).first()
    if turn is None:
        raise FeedbackRefused(_("That answer is not an ended turn of this conversation."))
    if rating not in Rating.values:
        raise FeedbackRefused(_("Rate the answer up or down."))
    tags = sorted(set(tags or []))
    if any(tag not in TAGS for tag in tags):
        raise FeedbackRefused(_("Unknown tag."))
    comment = comment.strip()
    if len(comment) > COMMENT_MAX_CHARS:
        raise FeedbackRefused(_("The comment is too long (at most %(max)d characters).") % {"max": COMMENT_MAX_CHARS})
    feedback, created = AnswerFeedback.objects.update_or_create(
        user=actor,
        turn_ref=turn.pk,
        defaults={
            "conversation": conversation,
            "turn": turn,
            "rating": rating,
            "tags": tags,
            "comment": comment,
            "attach_conversation": attach_conversation,
        },
    )
    audit_event_write(
        kind=event_types.ANSWER_FEEDBACK_GIVEN,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.ANSWER_FEEDBACK,
        resource_id=feedback.pk,
        owner_id=actor.pk,
        owner_username=actor.get_username(),
        details={
            "rating": rating,
            "tags": tags,
            "comment_chars": len(comment),
            "attached": attach_conversation,
            "changed": not created,
        },
    )
    return feedback


def attached_conversation(feedback: AnswerFeedback) -> list[dict] | None:
    """The conversation as the model saw it, up to the rated answer: the
    model-facing messages (tool results masked as they were sent), with every
    value the vault knows as its token (a value the person typed included).
    None when nothing is attached, or the owner deleted the conversation."""
    if not feedback.attach_conversation or feedback.conversation_id is None:
        return None
    conversation = Conversation.objects.live().filter(pk=feedback.conversation_id).first()
    if conversation is None:
        return None
    known = DbVault(conversation.pk).known_values()
    rows = (
        Message.objects.filter(conversation=conversation, turn_id__lte=feedback.turn_ref)
        .filter(turn__status=TurnStatus.COMPLETED)
        .order_by("created_at", "id")
    )
    out = []
    for message in rows:
        entry = {"role": message.role, "content": mask_known_any(message.content, known)}
        if message.tool_calls:
            entry["tool_calls"] = mask_known_any(message.tool_calls, known)
        out.append(entry)
    return out
