"""Credentialed URLs behind per-conversation references.

A URL that may carry a secret reaches the model only as `[URL-n]`: the
model needs to know that a link exists, never the secret in it. Which URLs
are shown as they are is an allowlist (`url_is_plain`, below): a doubt is
a reference. The URL itself is kept in this
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
import html
import re
import urllib.parse
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils.translation import gettext_lazy

from audit.events import audit_event_write
from audit.models import EventKind
from chat.models import Conversation, UrlReference
from governance.connectors.spelling import normalised_text
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

    def prefetch(self, urls) -> None:
        """Resolve many URLs at once (a result with a link per row): one
        query for the known ones, one insert for the new ones. Anything
        that goes wrong leaves the rest to `reference_for`, one by one."""
        from chat.vault import _lock_open_conversation

        wanted = {_digest(self.conversation_id, url): url for url in urls}
        wanted = {digest: url for digest, url in wanted.items() if digest not in self._seen}
        if not wanted:
            return
        rows = UrlReference.objects.filter(conversation_id=self.conversation_id, digest__in=list(wanted))
        for digest, number in rows.values_list("digest", "number"):
            self._seen[digest] = format_reference(number)
        missing = [digest for digest in wanted if digest not in self._seen]
        if not missing:
            return
        try:
            with transaction.atomic():
                _lock_open_conversation(self.conversation_id)
                top = UrlReference.objects.filter(conversation_id=self.conversation_id).aggregate(top=Max("number"))
                start = (top["top"] or 0) + 1
                created = UrlReference.objects.bulk_create(
                    UrlReference(
                        conversation_id=self.conversation_id,
                        number=start + offset,
                        digest=digest,
                        ciphertext=encrypt_text(wanted[digest]),
                    )
                    for offset, digest in enumerate(missing)
                )
        except IntegrityError:
            return  # another worker allocated some of them first: one by one then
        for entry in created:
            self._seen[entry.digest] = format_reference(entry.number)

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


# --- Which URLs may be shown as they are -------------------------------------------
#
# A URL is shown only when it provably carries no secret; anything else (a
# doubt included) becomes a reference. Provably harmless means, every part:
#
# * no user information (user:password@) and no fragment (tokens of OAuth
#   implicit flows and of many share links live there; any fragment counts);
# * each query parameter's name on QUERY_NAMES (paging, search, language,
#   sorting, analytics tags), its value plain words or short numbers. Every
#   other name is a doubt, so signature and token parameters of any cloud
#   (X-Amz-Signature, sig/se, Signature + Key-Pair-Id, refresh_token,
#   client_secret, ...) need no list of their own, nor do HTML-escaped
#   separators ("&amp;token=" names a parameter "amp;token");
# * each path segment and host label plain words, short numbers, or short
#   words with a number ("v2", "page-3"): a long random-looking piece (an id
#   of a webhook, a capability link's key, a hash, a UUID, base64) is a
#   doubt, and so is a segment naming a secret ("hooks", "token", "reset").
#
# A URL shown is shown percent-decoded, so the detectors and the known values
# read what it says (an e-mail written "%40" is an e-mail).

# A URL with a scheme, an opaque URI (mailto:, tel:, data:, ...: always a
# doubt, it has no host to judge), a host-like name followed by a path, or a
# percent-encoded URL inside text (always a doubt: it is an argument of
# something else). A URL ends at a blank, a quote or an angle bracket.
_URL_END = r"[^\s\"'<>\\`]*"
URL_PATTERN = re.compile(
    # At the start of a scheme's letters ("_https://" and "1https://" too).
    r"(?<![a-z+.-])[a-z][a-z0-9+.-]{0,30}(?:://|%3a%2f%2f)" + _URL_END + r"|"
    r"(?<![a-z0-9])(?:mailto|tel|sms|urn|data|javascript):" + _URL_END + r"|"
    # At the start of a name (one start per word: linear time), with user
    # information if it has any.
    r"(?<![\w.%+-])(?:[\w.%+-]{1,64}(?::[^\s/@\"'<>\\`]{0,64})?@)?"
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}(?::\d{1,5})?[/?#]" + _URL_END + r"|"
    # An authority with a password and nothing after it (a DSN without its
    # scheme: "admin:S3cret@db.internal", "app:pw@10.0.0.5:5432"): the part
    # before the colon is an ASCII name, so a label in Korean before an
    # e-mail ("이메일:kim@example.com") is not one. Not after a slash: that is
    # a URL's authority, read whole with its scheme (also once its escaped
    # slashes are read, `references_in_text`).
    r"(?<![\w.%+/\\-])[a-z0-9._%+-]{1,64}:[^\s/@\"'<>\\`]{1,128}@"
    r"(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?::\d{1,5})?",
    re.IGNORECASE,
)
# What every match of URL_PATTERN contains (cheap first tests: substring
# tests run in C, an alternation of words at every position does not).
_OPAQUE_SCHEMES = ("mailto:", "tel:", "sms:", "urn:", "data:", "javascript:")
_DOT_NAME = re.compile(r"\.[a-z]{2,63}(?::\d|[/?#])", re.IGNORECASE)


def _maybe_url(text: str) -> bool:
    if "://" in text:
        return True
    if ":" in text and "@" in text:
        return True  # user information, perhaps a password
    if "%" in text or ":" in text:
        lowered = text.lower()
        if "%3a%2f%2f" in lowered or any(scheme in lowered for scheme in _OPAQUE_SCHEMES):
            return True
    return "." in text and _DOT_NAME.search(text) is not None


# Closing punctuation a sentence puts after a link is not part of it.
_TRAILING = ".,;:!?)]}"

QUERY_NAMES = frozenset(
    """page per_page perpage page_size pagesize limit offset start count size
    id p q query search keyword keywords term lang language locale hl sort sortby sort_by order orderby order_by
    dir direction view tab format type category tag tags mode theme
    year month day date from to since until version utm_source utm_medium utm_campaign utm_term utm_content""".split()
)
# Words in a path or host that name what a link is for when it is a secret.
SECRET_WORDS = frozenset(
    """hook hooks webhook webhooks token tokens secret secrets key keys apikey api-key api_key sig signature signed
    reset invite invitation magic oauth callback confirm verify verification activate activation unsubscribe
    password passwd session sso private capability""".split()
)
_PIECE_SPLIT = re.compile(r"[-._~() ,:@+]+")
_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}", re.IGNORECASE)
_CAMEL = re.compile(r"[a-z]+(?:[A-Z][a-z]+)*|[A-Z][a-z]+(?:[A-Z][a-z]+)*|[A-Z]{1,8}|[a-z]{1,8}")
_WORD_NUMBER = re.compile(r"([A-Za-z]{1,12})\d{1,4}|\d{1,4}([A-Za-z]{1,3})")
_VOWELS = frozenset("aeiouyAEIOUY")
_CONSONANT_RUN = re.compile(r"[b-df-hj-np-tv-xzB-DF-HJ-NP-TV-XZ]{5,}")


def _plain_piece(piece: str) -> bool:
    """A piece between separators that reads as a word or a short number."""
    if not piece:
        return True
    if piece.isdigit():
        return len(piece) <= 12
    if all(ch.isalpha() and not ch.isascii() for ch in piece):
        return len(piece) <= 30  # Hangul and other scripts: words
    if piece.isascii() and piece.isalpha():
        # Random letters in mixed case look camel-cased only with many capitals.
        capitals = sum(ch.isupper() for ch in piece)
        if len(piece) > 30 or not _CAMEL.fullmatch(piece) or (capitals > 1 + len(piece) / 4 and not piece.isupper()):
            return False
        if len(piece) >= 10:
            vowels = sum(ch in _VOWELS for ch in piece) / len(piece)
            return 0.25 <= vowels <= 0.7 and not _CONSONANT_RUN.search(piece)
        return True
    match = _WORD_NUMBER.fullmatch(piece)
    return match is not None and _plain_piece(match.group(1) or match.group(2))


def _plain_text(text: str, *, allowed: str) -> bool:
    """Every character a letter, a digit or one of `allowed`, and every
    piece plain; no UUID; no word naming a secret."""
    if any(not (ch.isalnum() or ch in allowed) for ch in text) or _UUID.search(text):
        return False
    pieces = _PIECE_SPLIT.split(text)
    return all(_plain_piece(p) for p in pieces) and not any(p.lower() in SECRET_WORDS for p in pieces)


@functools.lru_cache(maxsize=4096)  # the same link in every row of a result
def url_is_plain(url: str) -> bool:
    """True only when nothing in `url` can be a secret (see above). Fails
    closed: a URL that does not parse or decode is a doubt."""
    try:
        return _url_is_plain(url)
    except Exception:
        return False


def _url_is_plain(url: str) -> bool:
    parts = urllib.parse.urlsplit(url if "://" in url else "//" + url)  # a host/path without a scheme
    host = parts.hostname or ""
    parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
    if "%" in parts.netloc or "@" in parts.netloc or "#" in url or "\\" in url:
        return False  # an encoded host, user information, a fragment
    if host and not _host_is_plain(host):
        return False
    for segment in parts.path.split("/"):
        decoded = urllib.parse.unquote(segment, errors="strict")
        if not _plain_text(decoded, allowed="-._~()+ "):
            return False
    if parts.query:
        for field in parts.query.split("&"):
            name, _, value = field.partition("=")
            if name.lower() not in QUERY_NAMES:
                return False
            decoded = urllib.parse.unquote_plus(value, errors="strict")
            # "@": a search for an e-mail is shown, and the e-mail then masked.
            if not _plain_text(decoded, allowed="-._~(),:@ "):
                return False
    return True


def _host_is_plain(host: str) -> bool:
    if host.replace(".", "").isdigit() or ":" in host:
        return True  # an IPv4 or IPv6 address
    return all(_plain_text(label, allowed="-") for label in host.split("."))


def url_for_model(url: str) -> str:
    """A plain URL as the model is shown it: percent-decoded, so the masking
    that follows reads its values (an e-mail as `a%40b.com` is found)."""
    return urllib.parse.unquote(url) if "%" in url else url


def _split_trailing(found: str) -> tuple[str, str]:
    url = found.rstrip(_TRAILING)
    # A closing bracket that opens inside the URL belongs to it (wiki titles).
    while found[len(url) : len(url) + 1] == ")" and url.count("(") > url.count(")"):
        url += ")"
    return url, found[len(url) :]


# Spellings a reader takes for a URL's separators that the pattern below does
# not: JSON escapes (`https:\/\/…`, `\u002f`: PHP's json_encode writes every
# slash so, and such text lands in database columns and documents as it is),
# HTML character references (`&#47;`, `&sol;`), full-width forms (NFKC) and
# slashes that only look like one.
_RESPELLED = re.compile(r"[\\&\uff00-\uffef\u2044\u2215\u2571\u29f8\u200b-\u200f\u2060\ufeff\u00ad]")
_LOOKALIKE_SLASHES = str.maketrans({"\u2044": "/", "\u2215": "/", "\u2571": "/", "\u29f8": "/"})


def _url_spelling(text: str) -> str:
    """`text` with the spellings above read as what they stand for (the same
    object when there are none)."""
    if _RESPELLED.search(text) is None:
        return text
    spelled = normalised_text(text)
    if "&" in spelled:
        spelled = html.unescape(spelled)
    return spelled.translate(_LOOKALIKE_SLASHES)


def references_in_text(text: str, reference_for) -> str:
    """`text` with every URL that is not plain replaced by
    `reference_for(url)`, and every plain one percent-decoded. A URL that is
    not plain once its separators are read as a reader reads them (see
    `_url_spelling`) counts too: then the text is shown in that spelling,
    with the reference (the URLs found as written keep their spelling).
    A secret-named parameter outside any URL is a reference too
    (`_secret_pairs`)."""
    shown = _references(text, reference_for)
    spelled = _url_spelling(shown)
    if spelled is not shown:
        found = _references(spelled, reference_for)
        if found != spelled:
            shown = found
    return _secret_pairs(shown, reference_for)


# A query parameter cut off its URL (by a no-break or ideographic space, a
# line break, a copy-paste) or written on its own, whose name says it holds
# a secret: "token=abc", "&X-Amz-Signature=...", "client_secret=...". Shown as
# a reference, name and value together, like the URL it came from. The URL
# shapes above decide by an allowlist; a bare name=value has no URL to judge,
# so here the name decides (a doubt about other names stays with the
# detectors and the known values).
_SECRET_NAME = (
    r"[a-z0-9_.-]{0,40}(?:token|secret|password|passwd|pwd|apikey|api[_-]key|"
    r"sig|signature|credentials?|auth|code_verifier|session[_-]?id)"
)
_SECRET_PAIR = re.compile(rf"(?<![\w.-])[&?;]?{_SECRET_NAME}=[^\s&\"'<>\\`]{{3,}}", re.IGNORECASE)


def _secret_pairs(text: str, reference_for) -> str:
    if "=" not in text:
        return text
    return _SECRET_PAIR.sub(lambda m: reference_for(m.group().lstrip("&?;")), text)


def _references(text: str, reference_for) -> str:
    # No URL can be in it (the usual cell): substring tests, then one scan.
    if "/" not in text and ":" not in text and "?" not in text and "#" not in text and "%" not in text:
        return text
    if not _maybe_url(text):
        return text

    pieces: list[str] = []
    position = 0
    for match in URL_PATTERN.finditer(text):
        start, end = match.span()
        if start < position:
            continue  # inside the URL before it (an apostrophe's continuation)
        if text[end : end + 1] == "'" and text[start - 1 : start] != "'":
            # An apostrophe inside a URL that no quote opened: it goes on
            # ("https://x.example/it's?token=..."), to the next blank.
            end = _AFTER_APOSTROPHE.match(text, end).end()
        url, tail = _split_trailing(text[start:end])
        pieces.append(text[position:start])
        pieces.append((url_for_model(url) if url_is_plain(url) else reference_for(url)) + tail if url else tail)
        position = end
    if not pieces:
        return text
    pieces.append(text[position:])
    return "".join(pieces)


_AFTER_APOSTROPHE = re.compile(r"[^\s\"<>\\`]*")
