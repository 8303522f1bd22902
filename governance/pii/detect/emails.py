"""E-mail addresses in the text as it is (after the match stage's
normalisation), found around each "@": the local part is the run of allowed
characters right before it, the domain matched right after it (the patterns
are governance.pii.detect.patterns'; obfuscated spellings are
governance.pii.detect.obfuscated's)."""

from __future__ import annotations

from governance.pii.detect.patterns import _EMAIL_DOMAIN, _EMAIL_DOMAIN_ASCII, _EMAIL_LOCAL, _EMAIL_LOCAL_ASCII
from governance.pii.kinds import PiiKind

_EMAIL = PiiKind.EMAIL.value
_Candidate = tuple[str, int, int, float]


def _find_emails(text: str, out: list[_Candidate], ascii_text: bool = False) -> None:
    at = text.find("@")
    email_domain = _EMAIL_DOMAIN_ASCII if ascii_text else _EMAIL_DOMAIN
    while at != -1:
        domain = email_domain.match(text, at + 1)
        local = domain and _EMAIL_LOCAL_ASCII.search(text, max(0, at - 64), at)
        if domain and (
            local is None
            or (local.start() and not text[local.start() - 1].isascii() and not text[local.start()].isalpha())
        ):
            # A Unicode local part (홍길동@, 홍길동123@, 홍길동.kim@). Where an ASCII
            # letter meets a non-ASCII one the address starts anyway (문의hong@),
            # so the ASCII run is the answer then.
            local = _EMAIL_LOCAL.search(text, max(0, at - 64), at) or local
        if local:
            start = _local_part_start(text, local.start(), at)
            if start < at:
                out.append((_EMAIL, start, domain.end(), 0.99))
        at = text.find("@", at + 1)


def _local_part_start(text: str, start: int, at: int) -> int:
    """Where the local part text[start:at] really starts.

    Quotes and dots around an address are punctuation: a local part does not
    start with a dot (RFC) or, in practice, a quote, and ``key='a@b.kr'``
    holds the address after the quote. Where Hangul (or another non-Latin
    script) meets Latin letters, the address starts at the change
    (``문의hong@x.com``): a Korean word runs into an address written after it.
    A change between letters and digits is no boundary (``홍길동123@x.com``)."""
    while start < at and text[start] in ".'`":
        start += 1
    local = text[start:at]
    if "'" in local or "`" in local:
        cut = max(local.rfind("='"), local.rfind("=`"))
        if cut != -1:
            start += cut + 2
    if not local.isascii():
        for i in range(at - 1, start, -1):
            a, b = text[i - 1], text[i]
            if a.isalpha() and b.isalpha() and a.isascii() != b.isascii():
                return i
    return start
