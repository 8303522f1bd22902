"""Credentialed URLs behind per-conversation references.

A URL that carries a credential (user:password@, a signed or token query
parameter) reaches the model only as `[URL-n]`: the model needs to know that
a link exists, never the secret in it. The URL itself is kept in this
conversation's table (chat.models.UrlReference), encrypted at rest and found
by a keyed digest, so the same URL gets the same reference within the
conversation and `n` means nothing in any other conversation.

Who can turn a reference back into its URL (decided here, fail closed):

* the conversation's owner, in the UI (`url_reference_resolve`, behind
  POST api/conversations/<id>/url-references/), and only with a role that may
  view raw personal data: a signed link is at least as sensitive as a masked
  value, and it often carries one. Every attempt is an audit event (who,
  when, which conversation) without the URL;
* nobody else. In particular the server never substitutes a reference the
  model writes back into a tool's arguments: the credential never travels
  through the model, and no tool can be steered to a secret link by it.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils.translation import gettext_lazy

from audit.events import audit_event_write
from audit.models import EventKind
from chat.models import Conversation, UrlReference
from governance.field_crypto import SecretUnavailable, decrypt_text, encrypt_text

REFERENCE_PATTERN = re.compile(r"\[URL-(\d{1,9})\]")


def format_reference(number: int) -> str:
    return f"[URL-{number}]"


def parse_reference(text: str) -> int | None:
    match = REFERENCE_PATTERN.fullmatch(text.strip())
    return int(match.group(1)) if match else None


@functools.cache
def _digest_key(secret: str) -> bytes:
    return hashlib.sha256(("owlai-url-reference-digest:" + secret).encode()).digest()


def _digest(conversation_id: uuid.UUID, url: str) -> str:
    key = _digest_key(settings.OWLAI_FIELD_KEY or settings.SECRET_KEY)
    return hmac.new(key, f"{conversation_id}\x00{url}".encode(), hashlib.sha256).hexdigest()


class InMemoryUrlReferences:
    """For a call outside any conversation: references for this call only
    (nothing can resolve them later, which is the safe direction)."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}

    def reference_for(self, url: str) -> str:
        number = self._numbers.setdefault(url, len(self._numbers) + 1)
        return format_reference(number)


class DbUrlReferences:
    """The references of one conversation."""

    def __init__(self, conversation_id: uuid.UUID) -> None:
        self.conversation_id = conversation_id
        self._seen: dict[str, str] = {}

    def reference_for(self, url: str) -> str:
        digest = _digest(self.conversation_id, url)
        cached = self._seen.get(digest)
        if cached is None:
            cached = self._seen[digest] = format_reference(self._number_for(digest, url))
        return cached

    def _number_for(self, digest: str, url: str) -> int:
        from chat.vault import _lock_open_conversation

        existing = UrlReference.objects.filter(conversation_id=self.conversation_id, digest=digest).first()
        if existing is not None:
            return existing.number
        # Two workers may shape results of one conversation at once: the
        # unique constraints decide, and the loser reads the winner's number.
        for _attempt in range(5):
            try:
                with transaction.atomic():
                    # A deleted conversation stores nothing new (VaultClosed).
                    _lock_open_conversation(self.conversation_id)
                    top = UrlReference.objects.filter(conversation_id=self.conversation_id).aggregate(
                        top=Max("number")
                    )["top"]
                    return UrlReference.objects.create(
                        conversation_id=self.conversation_id,
                        number=(top or 0) + 1,
                        digest=digest,
                        ciphertext=encrypt_text(url),
                    ).number
            except IntegrityError:
                existing = UrlReference.objects.filter(conversation_id=self.conversation_id, digest=digest).first()
                if existing is not None:
                    return existing.number
        raise RuntimeError("could not allocate a URL reference")

    def url_for(self, number: int) -> str | None:
        entry = UrlReference.objects.filter(conversation_id=self.conversation_id, number=number).first()
        if entry is None:
            return None
        try:
            return decrypt_text(entry.ciphertext)
        except SecretUnavailable:
            return None


def url_references_for(conversation_id: uuid.UUID | None) -> DbUrlReferences | InMemoryUrlReferences:
    return DbUrlReferences(conversation_id) if conversation_id else InMemoryUrlReferences()


# The refusal reasons as recorded in the audit event, and what the person is told.
REFUSAL_MESSAGES = {
    "not permitted": gettext_lazy(
        "You may not see the URL behind a reference: only members of a role that may reveal personal data can. "
        "An admin grants it on the role."
    ),
    "not a reference": gettext_lazy("This is not a URL reference."),
    "unknown reference": gettext_lazy("This reference does not belong to this conversation."),
}


@dataclass(frozen=True)
class ResolveResult:
    allowed: bool
    url: str | None = None
    reason: str = ""  # recorded in the audit event; `message` is for the person

    @property
    def message(self) -> str:
        return str(REFUSAL_MESSAGES.get(self.reason, self.reason))


@transaction.atomic
def url_reference_resolve(*, conversation: Conversation, user, reference: str, request=None) -> ResolveResult:
    """The URL behind `reference` in `conversation`, for its owner with a
    role that may view raw personal data; audited either way (never the URL)."""
    from chat.reveal import may_reveal

    number = parse_reference(reference)
    if conversation.owner_id != user.pk or conversation.deleted_at is not None or not may_reveal(user=user):
        result = ResolveResult(allowed=False, reason="not permitted")
    elif number is None:
        result = ResolveResult(allowed=False, reason="not a reference")
    else:
        url = DbUrlReferences(conversation.pk).url_for(number)
        result = ResolveResult(allowed=url is not None, url=url, reason="" if url else "unknown reference")
    # Same transaction: a resolution that cannot be recorded raises, and the
    # caller shows nothing.
    audit_event_write(
        kind=EventKind.URL_REVEAL if result.allowed else EventKind.URL_REVEAL_REFUSED,
        request=request,
        actor=user,
        resource_kind="conversation",
        resource_id=conversation.pk,
        owner_id=conversation.owner_id,
        details={"reference": format_reference(number) if number is not None else "", "reason": result.reason}
        if not result.allowed
        else {"reference": format_reference(number)},
    )
    return result
