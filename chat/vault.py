"""The per-conversation token vault in the database (seed 000).

Originals are encrypted at rest (Fernet, `governance.field_crypto`) and found
by a keyed digest of the normalised value, so the table never holds a value
in the clear and the digest cannot be reversed by guessing without the key.
Numbers count per kind within a conversation; another conversation numbers
independently, so tokens cannot link a person across conversations.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from chat.masking import format_token, normalised_value
from chat.models import VaultEntry
from governance.field_crypto import SecretUnavailable, decrypt_text, encrypt_text


def _digest(conversation_id: uuid.UUID, kind: str, value: str) -> str:
    key = hashlib.sha256(("owlai-vault-digest:" + (settings.OWLAI_FIELD_KEY or settings.SECRET_KEY)).encode()).digest()
    message = f"{conversation_id}\x00{kind}\x00{normalised_value(kind, value)}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


class DbVault:
    """Vault of one conversation; caches what it has seen during one tool call."""

    def __init__(self, conversation_id: uuid.UUID) -> None:
        self.conversation_id = conversation_id
        self._tokens: dict[str, str] = {}

    def token_for(self, kind: str, value: str) -> str:
        digest = _digest(self.conversation_id, kind, value)
        cached = self._tokens.get(digest)
        if cached is not None:
            return cached
        number = self._number_for(kind, digest, value)
        token = self._tokens[digest] = format_token(kind, number)
        return token

    def _number_for(self, kind: str, digest: str, value: str) -> int:
        existing = VaultEntry.objects.filter(conversation_id=self.conversation_id, kind=kind, digest=digest).first()
        if existing is not None:
            return existing.number
        # Two workers may mask in the same conversation at once: the unique
        # constraints decide, and the loser reads the winner's number.
        for _attempt in range(5):
            try:
                with transaction.atomic():
                    top = VaultEntry.objects.filter(conversation_id=self.conversation_id, kind=kind).aggregate(
                        top=Max("number")
                    )["top"]
                    entry = VaultEntry.objects.create(
                        conversation_id=self.conversation_id,
                        kind=kind,
                        number=(top or 0) + 1,
                        digest=digest,
                        ciphertext=encrypt_text(value),
                    )
                    return entry.number
            except IntegrityError:
                existing = VaultEntry.objects.filter(
                    conversation_id=self.conversation_id, kind=kind, digest=digest
                ).first()
                if existing is not None:
                    return existing.number
        raise RuntimeError("could not allocate a token number")

    def original_for(self, kind: str, number: int) -> str | None:
        entry = VaultEntry.objects.filter(conversation_id=self.conversation_id, kind=kind, number=number).first()
        if entry is None:
            return None
        try:
            return decrypt_text(entry.ciphertext)
        except SecretUnavailable:
            return None
