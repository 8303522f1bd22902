"""Share links: create, revoke, open, reveal through one. Each change is
an audit event written in the same transaction; the fork is in sharing.fork.

Who may open a link: any signed-in, active member of the installation who has
its address (never anonymous: a snapshot holds tokens and resource names).
What a viewer may reveal: only under the viewer's own reveal permission,
only tokens the snapshot shows, against the owner's vault; the event names
both (actor: the viewer, owner: the conversation's owner).
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import EventKind, ResourceKind
from chat.models import ACTIVE_TURN_STATUSES, Conversation, Turn
from chat.reveal import RevealResult, may_reveal
from chat.vault import DbVault
from governance.pii.masking import parse_token
from sharing import event_types
from sharing.models import ShareLink
from sharing.snapshot import shared_tokens, snapshot_items

# How long a link may stay open, in days (the owner picks one; the default first).
EXPIRY_DAYS = (7, 1, 30, 90)


class ShareRefused(Exception):
    """The owner's request cannot be done; the message goes to the person."""


class ShareLinkUnavailable(Exception):
    """No such open link for this viewer (revoked, expired, deleted, or the
    viewer may not open links): answered as "not found", whichever it is."""


def _ended_turn(conversation: Conversation, turn_id: int | None) -> Turn | None:
    turns = Turn.objects.filter(conversation=conversation).exclude(status__in=ACTIVE_TURN_STATUSES)
    if turn_id is not None:
        turns = turns.filter(pk=turn_id)
    return turns.order_by("-created_at", "-id").first()


@transaction.atomic
def share_link_create(
    *, conversation: Conversation, actor, up_to_turn_id: int | None = None, expires_in_days: int = 7, request=None
) -> ShareLink:
    if conversation.owner_id != actor.pk or conversation.deleted_at is not None:
        raise ShareRefused(_("Only the owner can share this conversation."))
    if expires_in_days not in EXPIRY_DAYS:
        raise ShareRefused(_("Choose how long the link stays open."))
    turn = _ended_turn(conversation, up_to_turn_id)
    if turn is None:
        raise ShareRefused(
            _("There is nothing to share yet: a link shows answered messages.")
            if up_to_turn_id is None
            else _("That message is not an ended turn of this conversation.")
        )
    link = ShareLink.objects.create(
        conversation=conversation,
        owner=actor,
        up_to_turn=turn,
        expires_at=timezone.now() + timedelta(days=expires_in_days),
    )
    audit_event_write(
        kind=event_types.SHARE_LINK_CREATED,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.SHARE_LINK,
        resource_id=link.pk,
        owner_id=actor.pk,
        owner_username=actor.get_username(),
        details={
            "conversation": str(conversation.pk),
            "up_to_turn": turn.pk,
            "expires_at": link.expires_at.isoformat(),
        },
    )
    return link


@transaction.atomic
def share_link_revoke(*, link: ShareLink, actor, request=None) -> ShareLink:
    """The owner (or an admin: the admin's action) closes a link for good."""
    if link.owner_id != actor.pk and not actor.is_staff:
        raise ShareRefused(_("Only the owner can revoke this link."))
    now = timezone.now()
    if not ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(revoked_at=now):
        link.refresh_from_db()
        return link  # revoked already: nothing changed, nothing to record
    link.revoked_at = now
    audit_event_write(
        kind=event_types.SHARE_LINK_REVOKED,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.SHARE_LINK,
        resource_id=link.pk,
        owner_id=link.owner_id,
        owner_username=link.owner.get_username(),
        details={"conversation": str(link.conversation_id)},
    )
    return link


def may_open_links(user) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)


def share_link_open(*, key: str, viewer) -> ShareLink:
    """The open link with this address, for this viewer; ShareLinkUnavailable otherwise."""
    if not may_open_links(viewer):
        raise ShareLinkUnavailable(key)
    link = ShareLink.objects.open().select_related("conversation", "owner").filter(key=key).first()
    if link is None or not link.owner.is_active:
        # A deactivated owner's links close with the account.
        raise ShareLinkUnavailable(key)
    return link


def shared_items(*, link: ShareLink) -> list[dict]:
    return snapshot_items(conversation=link.conversation, up_to_turn_id=link.up_to_turn_id)


def link_tokens(*, link: ShareLink) -> set[tuple[str, int]]:
    """(kind, number) of the tokens a viewer may reveal through the link."""
    return shared_tokens(conversation=link.conversation, up_to_turn=link.up_to_turn, items=shared_items(link=link))


@transaction.atomic
def shared_token_reveal(*, link: ShareLink, token: str, actor, request=None) -> RevealResult:
    """A viewer (`actor`) reveals a token of the snapshot under the viewer's
    own permission (the owner's does not travel with the link)."""
    viewer = actor
    parsed = parse_token(token.strip())
    kind = parsed[0] if parsed else ""
    if not may_open_links(viewer) or not may_reveal(user=viewer):
        result = RevealResult(allowed=False, reason="not permitted")
    elif parsed is None:
        result = RevealResult(allowed=False, reason="not a token")
    elif parsed not in link_tokens(link=link):
        # A token of the conversation's vault beyond what was shared (a later
        # turn's, even where a shared text spells it) is not part of the link.
        result = RevealResult(allowed=False, reason="unknown token")
    else:
        original = DbVault(link.conversation_id).original_for(*parsed)
        result = RevealResult(
            allowed=original is not None, original=original, reason="" if original else "unknown token"
        )
    details = {"token_kind": kind, "share_link": str(link.pk)}
    if not result.allowed:
        details["reason"] = result.reason
    # Same transaction: a reveal that cannot be recorded raises, nothing is shown.
    audit_event_write(
        kind=EventKind.PII_REVEAL if result.allowed else EventKind.PII_REVEAL_REFUSED,
        request=request,
        actor=viewer,
        resource_kind=ResourceKind.CONVERSATION,
        resource_id=link.conversation_id,
        owner_id=link.owner_id,
        owner_username=link.owner.get_username(),
        details=details,
    )
    return result
