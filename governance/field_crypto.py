"""Encryption of secrets kept in the database (stored DSNs).

Fernet (AES-128-CBC + HMAC) from `cryptography`: authenticated, so a tampered
value fails to decrypt instead of yielding a wrong secret.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretUnavailable(Exception):
    """A stored secret cannot be decrypted (wrong key or tampered value)."""


@lru_cache(maxsize=4)
def _fernet(key_material: str) -> Fernet:
    if key_material:
        return Fernet(key_material.encode())
    # Derive a stable key from SECRET_KEY when no dedicated key is configured.
    digest = hashlib.sha256(("owlai-field-key:" + settings.SECRET_KEY).encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def encrypt_text(plaintext: str) -> str:
    return _fernet(settings.OWLAI_FIELD_KEY).encrypt(plaintext.encode()).decode()


def decrypt_text(token: str) -> str:
    try:
        return _fernet(settings.OWLAI_FIELD_KEY).decrypt(token.encode()).decode()
    except (InvalidToken, ValueError) as exc:
        raise SecretUnavailable("stored secret cannot be decrypted with the configured key") from exc
