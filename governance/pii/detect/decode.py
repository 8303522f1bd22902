"""Decode: the text as a reader sees it, before any folding.

Character entities (``&#48;``, ``&#x30;``, ``&ndash;``, ``&commat;``) become
their characters, markup tags vanish (``010<b>-</b>1234-5678``), percent
escapes (``hong%40naver.com``) and JSON ``\\uXXXX`` escapes are decoded.
Each decoded character stands for its whole escape in the offset map.

Base64 and JWT segments are not decoded in place (their bytes do not line up
with characters): `encoded_segments` lists the runs that decode to readable
text, and the pipeline scans that text on its own; a value found in it masks
the whole segment."""

from __future__ import annotations

import base64
import binascii
import html
import re

from governance.pii.detect.offsets import Builder, Mapped

_ESCAPE = re.compile(
    r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?"  # character entities
    r"|<(?:[A-Za-z/!?][^<>]{0,500})>"  # markup tags, comments, declarations
    r"|(?:%[0-9A-Fa-f]{2})+"  # percent escapes (a run decodes as UTF-8 together)
    r"|(?:\\u[0-9A-Fa-f]{4})+",  # JSON escapes (surrogate pairs together)
    re.ASCII,
)


def decode(text: str) -> Mapped | None:
    """The decoded text with its offset map, or None when nothing decodes."""
    out = Builder()
    pos = 0
    changed = False
    for m in _ESCAPE.finditer(text):
        replacement = _decoded(m.group())
        if replacement is None:
            continue
        out.copy(text, pos, m.start())
        out.put(replacement, m.start(), m.end())
        pos = m.end()
        changed = True
    if not changed:
        return None
    out.copy(text, pos, len(text))
    return out.build()


def _decoded(escape: str) -> str | None:
    first = escape[0]
    if first == "&":
        replacement = html.unescape(escape)
        return None if replacement == escape else replacement
    if first == "<":
        return ""
    if first == "%":
        raw = bytes.fromhex(escape.replace("%", ""))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("latin-1")
    try:
        return escape.encode("ascii").decode("unicode_escape").encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError:
        return None


# A base64 (standard or URL-safe) run long enough to hold a value: 8
# characters are 6 bytes (the shortest address, a@b.kr). JWTs are three such runs
# joined by dots; each is a segment of its own.
_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{8,}={0,2}", re.ASCII)
_PRINTABLE_SHARE = 0.9


def encoded_segments(text: str) -> list[tuple[int, int, str]]:
    """(start, end, decoded text) of each base64 run that decodes to readable text.

    A run of digits, or of lowercase letters and digits (hex ids, hashes),
    is skipped unread. Capitals and digits alone are read: base64 of digits
    often is (``NTA0ODU3NTE4MTM5NDU=``); an order code does not decode to text."""
    found = []
    for m in _BASE64_RUN.finditer(text):
        run = m.group()
        if run.isdigit() or run.islower():
            continue
        decoded = _base64_text(run)
        if decoded is not None:
            found.append((m.start(), m.end(), decoded))
    return found


def _base64_text(run: str) -> str | None:
    body = run.rstrip("=")
    padded = body + "=" * (-len(body) % 4)
    try:
        if "-" in body or "_" in body:
            raw = base64.urlsafe_b64decode(padded)
        else:
            raw = base64.b64decode(padded, validate=True)
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if not decoded:
        return None
    printable = sum(ch.isprintable() or ch in "\n\r\t" for ch in decoded)
    return decoded if printable >= _PRINTABLE_SHARE * len(decoded) else None
