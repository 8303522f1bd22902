"""Revealing a token's original to a person allowed to see it.

Only the conversation's owner, and only with a role that may view raw
personal data; every attempt is an audit event with who, when, which
conversation and the token's kind — never the value.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils.translation import gettext_lazy as _

from audit.events import audit_event_write
from audit.models import EventKind
from chat.models import Conversation
from chat.vault import DbVault
from governance.models import Role
from governance.pii.masking import parse_token

# The refusal reasons as recorded in the audit event, and what the person is told.
REFUSAL_MESSAGES = {
    "not permitted": _(
        "You may not reveal personal data: only members of a role that may reveal personal data can. "
        "An admin grants it on the role."
    ),
    "not a token": _("This is not a masked token."),
    "unknown token": _("This token does not belong to this conversation."),
}


@dataclass(frozen=True)
class RevealResult:
    allowed: bool
    original: str | None = None
    reason: str = ""  # recorded in the audit event; `message` is for the person

    @property
    def message(self) -> str:
        return str(REFUSAL_MESSAGES.get(self.reason, self.reason))


def may_reveal(*, user) -> bool:
    return Role.objects.filter(users=user, can_view_raw_pii=True).exists()


@transaction.atomic
def token_reveal(*, conversation: Conversation, user, token: str, request=None) -> RevealResult:
    parsed = parse_token(token.strip())
    kind = parsed[0] if parsed else ""
    if conversation.owner_id != user.pk or not may_reveal(user=user):
        result = RevealResult(allowed=False, reason="not permitted")
    elif parsed is None:
        result = RevealResult(allowed=False, reason="not a token")
    else:
        original = DbVault(conversation.pk).original_for(*parsed)
        result = RevealResult(
            allowed=original is not None, original=original, reason="" if original else "unknown token"
        )
    # Written in the same transaction; a reveal that cannot be recorded raises
    # and the caller shows nothing.
    audit_event_write(
        kind=EventKind.PII_REVEAL if result.allowed else EventKind.PII_REVEAL_REFUSED,
        request=request,
        actor=user,
        resource_kind="conversation",
        resource_id=conversation.pk,
        owner_id=conversation.owner_id,
        details={"token_kind": kind, **({"reason": result.reason} if not result.allowed else {})},
    )
    return result
