"""Values that only a label makes personal, read on decoded, folded text.

* RRN halves named apart: ``주민번호 앞자리 900101, 뒷자리 1234567``, ``주민등록번호
  뒷번호: 1234567``, ``RRN first half 900101``, ``900101(앞자리)``. A front half
  is a valid YYMMDD, a back half a gender/century digit 1-8 and six more. They
  are looked for only when an RRN word is in the text (주민, 외국인등록, RRN,
  resident): "앞자리" alone names many things.
* Passports, more layouts than the match stage's: one or two letters and 7-8
  digits with spaces or hyphens inside, in up to three groups (``M 1234 5678``,
  ``M-12345678``, ``AB 1234567``, ``AB 123 4567``), the 2020 layout
  ``M123A4567``, and nine digits (the US layout), within 25 characters after a label (여권, passport, 旅券, 护照,
  pasaporte, passeport, reisepass) or 12 before one.
* Values cut into pieces (see `pieces`): a phone, an RRN or a bank-layout
  account whose groups are set apart by quotes, bars, commas or brackets.
* Driver's licences with any separators (after folding, mixed ones are
  spaces): ``11 12 345678 90``, ``서울 12 345678 90``, within 25 characters after
  a licence label or 10 before one."""

from __future__ import annotations

import re
from collections.abc import Callable

from governance.pii.detect.prefilter import _PIECE_SEP
from governance.pii.kinds import PiiKind

_PHONE, _RRN, _FRN, _ACCOUNT, _CARD = (
    k.value for k in (PiiKind.PHONE, PiiKind.RRN, PiiKind.FOREIGNER_RN, PiiKind.ACCOUNT, PiiKind.CARD)
)

_RRN_WORDS = re.compile(r"주민|외국인\s*등록|rrn|resident", re.IGNORECASE)
_YYMMDD = r"[0-9][0-9](?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
_BACK = r"[1-8][0-9]{6}"
_FRONT_LABEL = r"(?:앞\s*(?:자리|번호|부분|6\s*자리)?|생년월일|front(?:\s*half)?|first\s*(?:half|part|six))"
_BACK_LABEL = (
    r"(?:뒤\s*(?:자리|번호|부분|7\s*자리)|뒷\s*(?:자리|번호|부분)?"
    r"|back(?:\s*half)?|second\s*(?:half|part)|last\s*seven)"
)
_GAP = r"[\s:=#)\]\-은는이가]{0,6}"
_HALVES = re.compile(
    rf"{_FRONT_LABEL}{_GAP}(?<![0-9])(?P<front>{_YYMMDD})(?![0-9])"
    rf"|{_BACK_LABEL}{_GAP}(?<![0-9])(?P<back>{_BACK})(?![0-9])"
    rf"|(?<![0-9])(?P<front_before>{_YYMMDD})\s*[(\[]?\s*{_FRONT_LABEL}"
    rf"|(?<![0-9])(?P<back_before>{_BACK})\s*[(\[]?\s*{_BACK_LABEL}",
    re.IGNORECASE,
)

_PASSPORT_LABEL = re.compile(r"여권|passport|旅券|护照|護照|pasaporte|passeport|reisepass", re.IGNORECASE)
_PASSPORT = re.compile(
    r"(?<![A-Za-z0-9])"
    r"(?:[A-Za-z]{1,2}[ -]?[0-9]{2,5}(?:[ -]?[0-9]{2,5}){0,2}|[A-Za-z][0-9]{3}[A-Za-z][0-9]{4}|[0-9]{9})"
    r"(?![A-Za-z0-9])",
    re.ASCII,
)
_LICENCE_LABEL = re.compile(r"면허|licen[cs]e|driver|운전", re.IGNORECASE)
_LICENCE = re.compile(
    r"(?<![0-9])(?:[0-9]{2}[ .-]?)?[0-9]{2}[ .-]?[0-9]{6}[ .-]?[0-9]{2}(?![0-9])",
    re.ASCII,
)


def rrn_halves(text: str) -> list[tuple[int, int]]:
    if _RRN_WORDS.search(text) is None:
        return []
    spans = []
    for m in _HALVES.finditer(text):
        for group in ("front", "back", "front_before", "back_before"):
            if m.group(group):
                spans.append(m.span(group))
    return spans


def passports(text: str) -> list[tuple[int, int]]:
    return _labelled(text, _PASSPORT_LABEL, _PASSPORT, _passport_ok)


def licences(text: str) -> list[tuple[int, int]]:
    return _labelled(text, _LICENCE_LABEL, _LICENCE, _licence_ok)


def _passport_ok(value: str, gap: int) -> bool:
    """7-9 digits; nine bare digits (the US layout) only right by the label."""
    digits = sum(ch.isdigit() for ch in value)
    return 7 <= digits <= 9 and (not value.isdigit() or gap <= 12)


def _licence_ok(value: str, gap: int) -> bool:
    """Spaced layouts only: the match stage reads bare, hyphenated and dotted ones
    (and leaves a bare number to a nearer identifier label)."""
    return " " in value


def _labelled(
    text: str, label: re.Pattern[str], value: re.Pattern[str], ok: Callable[[str, int], bool]
) -> list[tuple[int, int]]:
    spans = []
    for m in label.finditer(text):
        for v in value.finditer(text, m.end(), m.end() + 25 + 16):
            gap = v.start() - m.end()
            if gap <= 25 and ok(v.group(), gap):
                spans.append(v.span())
        for v in value.finditer(text, max(0, m.start() - 12 - 16), m.start()):
            gap = m.start() - v.end()
            if gap <= 12 and ok(v.group(), gap):
                spans.append(v.span())
    return spans


# Values cut into pieces: digit groups set apart by quotes, bars, commas,
# semicolons or brackets (prefilter._PIECE_SEP), as adjacent cells or list items read
# out (전화 "010" "1234" "5678", 연락처 010 | 1234 | 5678, phone: ['010',
# '1234', '5678'], 주민번호 900101, 1234567). The pieces must fall where the
# value's own groups do: a phone's prefix, exchange and line, an RRN's
# halves, an account's groups, a card's groups (and its Luhn digit). A
# label of the kind must be near, except for a mobile number (01X, 3-4
# digits, 4 digits): that layout is a phone's alone.
_PIECES = re.compile(rf"(?<![0-9])[0-9]{{2,7}}(?:{_PIECE_SEP}[0-9]{{2,7}}){{1,3}}(?![0-9])")
_PIECE_GROUP = re.compile(r"[0-9]+")
_PHONE_PIECES = re.compile(r"0(?:1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|[678]0|50[0-9])", re.ASCII)
_PHONE_LABEL = re.compile(r"전화|연락처|휴대|핸드폰|폰|phone|tel|mobile|cell|contact", re.IGNORECASE)
_ACCOUNT_LABEL = re.compile(r"계좌|입금|송금|이체|통장|은행|뱅크|account|acct|bank", re.IGNORECASE)
_FRONT_HALF, _BACK_HALF = re.compile(_YYMMDD), re.compile(_BACK)
_CARD_LABEL = re.compile(r"카드|card|visa|master|amex", re.IGNORECASE)
_CARD_LAYOUTS = {(4, 4, 4, 4), (4, 6, 5), (4, 6, 4)}


def pieces(text: str) -> list[tuple[str, int, int]]:
    """(kind id, start, end) of each value written in pieces, as above."""
    found = []
    for m in _PIECES.finditer(text):
        groups = _PIECE_GROUP.findall(m.group())
        kind = _piece_kind(groups, text, m.start(), m.end())
        if kind is not None:
            found.append((kind, m.start(), m.end()))
    return found


def _piece_kind(groups: list[str], text: str, start: int, end: int) -> str | None:
    layout = tuple(map(len, groups))
    before, after = text[max(0, start - 20) : start], text[end : end + 10]

    def named(label: re.Pattern[str]) -> bool:
        return label.search(before) is not None or label.search(after) is not None

    if len(groups) == 3 and _PHONE_PIECES.fullmatch(groups[0]) and 3 <= layout[1] <= 4 and layout[2] == 4:
        if groups[1][0] != "0" and (groups[0].startswith("01") or named(_PHONE_LABEL)):
            return _PHONE
    if layout == (6, 7) and _FRONT_HALF.fullmatch(groups[0]) and _BACK_HALF.fullmatch(groups[1]):
        if named(_RRN_WORDS):
            return _FRN if groups[1][0] in "5678" else _RRN
    if 3 <= len(layout) <= 4 and 10 <= sum(layout) <= 14 and max(layout) <= 7 and named(_ACCOUNT_LABEL):
        return _ACCOUNT  # an account's layout (rule (a) of the match stage) next to its word
    if layout in _CARD_LAYOUTS and named(_CARD_LABEL) and _luhn_ok("".join(groups)):
        return _CARD
    return None


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0
