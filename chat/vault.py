"""The per-conversation token vault in the database.

Originals are encrypted at rest (Fernet, `governance.field_crypto`) and found
by a keyed digest of the normalised value, so the table never holds a value
in the clear and the digest cannot be reversed by guessing without the key.
Numbers count per kind within a conversation; another conversation numbers
independently, so tokens cannot link a person across conversations.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max

from chat.models import VaultEntry
from governance.field_crypto import SecretUnavailable, decrypt_text, encrypt_text
from governance.pii.known_values import EMPTY, KnownValues
from governance.pii.masking import format_token, normalised_value
from owlai import prepared


@functools.cache
def _digest_key(secret: str) -> bytes:
    return hashlib.sha256(("owlai-vault-digest:" + secret).encode()).digest()


def _digest(conversation_id: uuid.UUID, kind: str, value: str) -> str:
    key = _digest_key(settings.OWLAI_FIELD_KEY or settings.SECRET_KEY)
    message = f"{conversation_id}\x00{kind}\x00{normalised_value(kind, value)}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


# The digest of an entry for a COMPUTED value (DbVault.derived_tokens): random,
# so no other value's lookup ever finds it, and marked, so the known values
# never search for it. 64 characters like a keyed digest (the column's size).
DERIVED_DIGEST_PREFIX = "derived-"


def _derived_digest() -> str:
    return DERIVED_DIGEST_PREFIX + secrets.token_hex((64 - len(DERIVED_DIGEST_PREFIX)) // 2)


# Tokens known to be committed, by digest (which binds conversation, kind and
# value), shared by every DbVault of this process: a token, once committed,
# never means another value (unique per conversation; deleted only when the
# conversation is deleted, after which nothing is allocated in it again, see
# _lock_open_conversation; conversation ids are never reused). Filled only
# after commit, so a rolled-back allocation can never be served. The bound
# keeps memory flat.
_COMMITTED_TOKENS: dict[str, str] = {}
_COMMITTED_TOKENS_MAX = 50_000


def _remember_committed(tokens: dict[str, str]) -> None:
    def remember() -> None:
        if len(_COMMITTED_TOKENS) + len(tokens) > _COMMITTED_TOKENS_MAX:
            _COMMITTED_TOKENS.clear()
        _COMMITTED_TOKENS.update(tokens)

    transaction.on_commit(remember)


class _KnownCache:
    """Per process: the decrypted originals of recently used conversations and
    the automaton over them, extended with the rows added since the last
    refresh (vault rows are never changed, only added, and deleted with the
    whole conversation). Bounded: the least recently used conversation goes
    first.

    Refreshed from the database once per turn: a turn runs in one worker
    process, and a conversation runs one turn at a time, so within a turn
    only this process adds to the vault, and what it adds is noted here as
    soon as it commits (`note`). A call without a turn refreshes every time."""

    MAX_CONVERSATIONS = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # conversation id -> (last row id read, turn of that read, matcher)
        self._entries: OrderedDict[uuid.UUID, tuple[int, int | None, KnownValues]] = OrderedDict()

    def matcher(self, conversation_id: uuid.UUID, turn_id: int | None = None) -> KnownValues:
        with self._lock:
            last_id, read_in_turn, matcher = self._entries.get(conversation_id, (0, None, EMPTY))
        if turn_id is not None and read_in_turn == turn_id:
            return matcher
        triples = []
        for row_id, kind, number, digest, ciphertext in prepared.fetchall(
            _rows_since_sql(), [_db_conversation_id(conversation_id), last_id]
        ):
            last_id = max(last_id, row_id)
            if digest.startswith(DERIVED_DIGEST_PREFIX):
                continue  # a computed value: never searched for (see DbVault.derived_tokens)
            try:
                original = decrypt_text(ciphertext)
            except SecretUnavailable:
                continue  # cannot be read back: cannot be searched for either; detectors still run
            triples.append((original, kind, format_token(kind, number)))
        with self._lock:
            # Notes that arrived meanwhile are kept: extended() ignores repeats.
            current = self._entries.get(conversation_id, (0, None, EMPTY))[2]
            matcher = (current if current.size >= matcher.size else matcher).extended(triples)
            self._entries[conversation_id] = (last_id, turn_id, matcher)
            self._entries.move_to_end(conversation_id)
            while len(self._entries) > self.MAX_CONVERSATIONS:
                self._entries.popitem(last=False)
        return matcher

    def note(self, conversation_id: uuid.UUID, triples: list[tuple[str, str, str]]) -> None:
        """Originals this process just committed to the conversation's vault."""
        with self._lock:
            entry = self._entries.get(conversation_id)
            if entry is not None:
                self._entries[conversation_id] = (entry[0], entry[1], entry[2].extended(triples))

    def forget(self, conversation_id: uuid.UUID) -> None:
        with self._lock:
            self._entries.pop(conversation_id, None)


@functools.cache
def _rows_since_sql() -> str:
    table = VaultEntry._meta.db_table
    return (
        f'SELECT "id", "kind", "number", "digest", "ciphertext" FROM "{table}" '
        'WHERE "conversation_id" = %s AND "id" > %s ORDER BY "id"'
    )


def _db_conversation_id(conversation_id: uuid.UUID):
    """The id as the database column holds it (SQLite: 32 hex characters), for raw SQL."""
    from django.db import connection

    field = VaultEntry._meta.get_field("conversation").target_field
    return field.get_db_prep_value(conversation_id, connection)


def _note_committed(conversation_id: uuid.UUID, triples: list[tuple[str, str, str]]) -> None:
    if triples:
        transaction.on_commit(lambda: _KNOWN.note(conversation_id, triples))


_KNOWN = _KnownCache()


def forget_known_values(conversation_id: uuid.UUID) -> None:
    """Drop a conversation's decrypted originals from this process (its vault is gone)."""
    _KNOWN.forget(conversation_id)


class VaultClosed(Exception):
    """The conversation was deleted: no new originals may be stored for it."""


def _lock_open_conversation(conversation_id: uuid.UUID) -> None:
    """Inside an allocation transaction: lock the conversation row (so a
    deletion cannot commit in between) and refuse a deleted conversation.
    A deleted conversation's vault stays empty, and token numbers can never
    start again from 1 for other values."""
    from chat.models import Conversation

    if not Conversation.objects.select_for_update().filter(pk=conversation_id, deleted_at__isnull=True).exists():
        raise VaultClosed(f"conversation {conversation_id} is deleted")


class DbVault:
    """Vault of one conversation; caches what it has seen during one tool call."""

    def __init__(self, conversation_id: uuid.UUID) -> None:
        self.conversation_id = conversation_id
        self._tokens: dict[str, str] = {}

    def token_for(self, kind: str, value: str) -> str:
        digest = _digest(self.conversation_id, kind, value)
        cached = self._tokens.get(digest) or _COMMITTED_TOKENS.get(digest)
        if cached is not None:
            return cached
        number = self._number_for(kind, digest, value)
        token = self._tokens[digest] = format_token(kind, number)
        _remember_committed({digest: token})
        _note_committed(self.conversation_id, [(value, kind, token)])
        return token

    def prefetch(self, values: Iterable[tuple[str, str]]) -> None:
        """Make `token_for` answer every (kind, value) of a result without a
        query each: known tokens in one query, new ones allocated per kind in
        one transaction. Anything left (a concurrent writer took a number)
        falls back to `token_for`'s one-by-one path."""
        wanted: dict[str, tuple[str, str]] = {}
        requested: dict[str, tuple[str, str]] = {}
        for kind, value in values:
            digest = _digest(self.conversation_id, kind, value)
            requested[digest] = (kind, value)
            if digest in self._tokens:
                continue
            committed = _COMMITTED_TOKENS.get(digest)
            if committed is not None:
                self._tokens[digest] = committed
            else:
                wanted[digest] = (kind, value)
        if not wanted:
            return
        found: dict[str, str] = {}
        # kind__in lets the (conversation, kind, digest) unique index find
        # the rows instead of scanning the whole conversation's vault.
        for digest, kind, number in VaultEntry.objects.filter(
            conversation_id=self.conversation_id,
            kind__in={kind for kind, _ in wanted.values()},
            digest__in=list(wanted),
        ).values_list("digest", "kind", "number"):
            if digest in wanted:
                found[digest] = format_token(kind, number)
                del wanted[digest]
        by_kind: dict[str, list[tuple[str, str]]] = {}
        for digest, (kind, value) in wanted.items():
            by_kind.setdefault(kind, []).append((digest, value))
        for kind, items in by_kind.items():
            try:
                top = self._insert_numbered(kind, items)
            except IntegrityError:
                continue  # raced with another worker: token_for() sorts these out one by one
            for offset, (digest, _value) in enumerate(items, 1):
                found[digest] = format_token(kind, top + offset)
        self._tokens.update(found)
        _remember_committed(found)
        _note_committed(self.conversation_id, [(requested[d][1], requested[d][0], token) for d, token in found.items()])

    def derived_tokens(self, values: list[tuple[str, str]]) -> list[str]:
        """Tokens for cells a statement COMPUTED from personal data (lineage
        masked them, and they are not a column passed on unchanged), one per
        (kind, value) in order: each a NEW token (its own entry, under a
        random digest no lookup finds), never a known value.

        A computed value can be made to equal any value the model chooses:
        ``ascii(substr(CASE WHEN id = 1 THEN name ELSE chr(g) END, 1, 1))``.
        Were its token the value's usual one, equal tokens would say which g
        is the code; as a known value it would be masked wherever the model
        writes it (``lpad(g::text, 4, '0')`` over 0..9999 finds
        ``substr(phone, 5, 4)``); and reusing a token the vault already has
        would too, since the detectors give model-written phones their
        tokens (``'010-' || lpad(g::text, 4, '0') || '-0000'``). So no
        reuse at all: ``SELECT '[이름-1]'`` returns a new token."""
        tokens: list[str] = [""] * len(values)
        fresh: dict[str, list[int]] = {}
        for position, (kind, _value) in enumerate(values):
            fresh.setdefault(kind, []).append(position)
        for kind, positions in fresh.items():
            top = self._allocate_derived(kind, [values[position][1] for position in positions])
            for offset, position in enumerate(positions, 1):
                tokens[position] = format_token(kind, top + offset)
        return tokens

    def _allocate_derived(self, kind: str, originals: list[str]) -> int:
        """New entries numbered top+1, top+2, ... for `originals`; returns top."""
        for _attempt in range(5):
            try:
                return self._insert_numbered(kind, [(_derived_digest(), original) for original in originals])
            except IntegrityError:
                continue  # another worker took a number meanwhile: count again
        raise RuntimeError("could not allocate token numbers")

    def _insert_numbered(self, kind: str, items: list[tuple[str, str]]) -> int:
        """New entries of `kind` for (digest, original) `items`, numbered
        top+1, top+2, ... in one transaction; returns top. Raises
        IntegrityError when another writer took a number or digest first."""
        with transaction.atomic():
            _lock_open_conversation(self.conversation_id)
            found = VaultEntry.objects.filter(conversation_id=self.conversation_id, kind=kind)
            top = found.aggregate(top=Max("number"))["top"] or 0
            VaultEntry.objects.bulk_create(
                VaultEntry(
                    conversation_id=self.conversation_id,
                    kind=kind,
                    number=top + offset,
                    digest=digest,
                    ciphertext=encrypt_text(original),
                )
                for offset, (digest, original) in enumerate(items, 1)
            )
            return top

    def is_derived(self, kind: str, number: int) -> bool:
        """Is this token's entry a computed value's (see derived_tokens)?"""
        digest = (
            VaultEntry.objects.filter(conversation_id=self.conversation_id, kind=kind, number=number)
            .values_list("digest", flat=True)
            .first()
        )
        return bool(digest) and digest.startswith(DERIVED_DIGEST_PREFIX)

    def _number_for(self, kind: str, digest: str, value: str) -> int:
        existing = VaultEntry.objects.filter(conversation_id=self.conversation_id, kind=kind, digest=digest).first()
        if existing is not None:
            return existing.number
        # Two workers may mask in the same conversation at once: the unique
        # constraints decide, and the loser reads the winner's number.
        for _attempt in range(5):
            try:
                with transaction.atomic():
                    _lock_open_conversation(self.conversation_id)
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

    def known_values(self, turn_id: int | None = None) -> KnownValues:
        """Every original this conversation's vault holds, as one matcher
        (read from the database at most once per turn, see _KnownCache)."""
        return _KNOWN.matcher(self.conversation_id, turn_id)

    def original_for(self, kind: str, number: int) -> str | None:
        entry = VaultEntry.objects.filter(conversation_id=self.conversation_id, kind=kind, number=number).first()
        if entry is None:
            return None
        try:
            return decrypt_text(entry.ciphertext)
        except SecretUnavailable:
            return None
