"""The match stage: format detectors for personal data (PII) in free text.

The public API, what is detected and the decisions on ambiguous formats are
written in the package's docstring (governance.pii.detect). The prefilter
(stage 1) is governance.pii.detect.prefilter, the format patterns
governance.pii.detect.patterns, the rules that judge a candidate
governance.pii.detect.rules, the e-mail finder governance.pii.detect.emails;
this module runs them.

How it works (speed matters: every tool result cell goes through here):
stage 1 is one regex search for a run of 9+ digits and separators (ASCII
classes; in non-ASCII text the same search also stops at a character that
normalisation changes, or at a slash/underscore between digits, and then the
text is normalised and searched again; ASCII text is tested for a slash or
underscore between digits first, with two substring tests), plus ``"@" in
text`` and a passport-label substring test; names, amounts, times and short
codes stop there, and bare dates are skipped inside the search. A cell that
is exactly one phone, UUID, date/timestamp, e-mail address or stage-1 region
is settled by one fullmatch. Each stage-1 region is first matched whole
against each format (the usual DB cell holds exactly one value); otherwise
one "master" regex collects every candidate of every kind in the region.
Python validates candidates (dates, Luhn, layouts, context words, hex
tokens) and resolves overlaps. Costs are counted in interpreter steps:
every call and regex call matters, so the hot paths skip the regexes that
cannot match.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass

from governance.pii.detect.emails import _find_emails
from governance.pii.detect.patterns import (
    _CARD_RX,
    _CHAIN_RX,
    _DATE_CELL,
    _DOMESTIC_RX,
    _EMAIL_CELL,
    _MASTER,
    _PASSPORT_RX,
    _PHONE_HEAD,
    _PHONE_RX,
    _PLAIN_CHAIN,
    _PLAIN_PHONE_RX,
    _RRN_RX,
    _UUID_CELL,
)
from governance.pii.detect.prefilter import (
    _DIGIT_SEP,
    _PASSPORT_LABEL,
    _SLASHED_RUN,
    _STAGE1,
    _STAGE1_RAW,
    NORMALISABLE_BMP,
    _ascii_hint,
    _near_digit,
    _normalised,
    _odd_separators,
    _original_offset,
    _slashed_run,
)
from governance.pii.detect.rules import (  # what a candidate is judged by
    _HEX_CHARS,
    _UUID,
    _card_confidence,
    _chain_candidate,
    _Context,
    _context,
    _overlaps,
    _phone_confidence,
    _reads_as_decimal,
    _rrn_candidate,
    _spaced_account,
    opaque_runs,
)
from governance.pii.kinds import NORMALISERS, OVERLAP_RANK, PiiKind
from governance.pii.textforms import digits_only

__all__ = [
    "KIND_BY_ID",
    "NORMALISABLE_BMP",
    "Detection",
    "PiiKind",
    "detect_normalised",
    "detect_spans",
    "detection",
    "normalise",
    "opaque_runs",
    "resolve",
]


# The kinds are defined once, in governance.pii.kinds (re-exported here).

# The machine ids as plain ``str`` constants: the hot path (detection here,
# token lookup in governance.pii.masking) works on these, never on Enum attributes
# (``PiiKind.PHONE.value`` is a descriptor call). ``PiiKind`` is a ``str``
# enum, so ``PiiKind.PHONE == _PHONE`` and both hash alike.
_RRN = PiiKind.RRN.value
_FRN = PiiKind.FOREIGNER_RN.value
_PHONE = PiiKind.PHONE.value
_EMAIL = PiiKind.EMAIL.value
_CARD = PiiKind.CARD.value
_ACCOUNT = PiiKind.ACCOUNT.value
_PASSPORT = PiiKind.PASSPORT.value
_LICENCE = PiiKind.DRIVER_LICENSE.value
KIND_BY_ID = {kind.value: kind for kind in PiiKind}

# Tie-break between overlapping candidates of the same length: the more
# specific, better validated format wins (an RRN is also a 13-digit "account").
_PRIORITY = OVERLAP_RANK  # governance.pii.kinds


@dataclass(frozen=True)
class Detection:
    kind: PiiKind
    start: int
    end: int
    value: str  # text[start:end]
    confidence: float  # 0..1


# Candidate: (kind id, start, end, confidence). Detection objects are built
# only for the survivors of overlap resolution, and only by detect().
_Candidate = tuple[str, int, int, float]


# ==========================================================================
# Finders
# ==========================================================================


# Every phone starts with 0, "(0", "+82", "0082", "82" or 15xx/16xx/18xx.
_PHONE_START = frozenset("0(+81")
# A separator before an RRN's back half, after a card's 4th digit.
_RRN_SEPS = frozenset(" \t-.")


def _whole_region(text: str, start: int, end: int, ctx: _Context) -> _Candidate | None:
    """Fast path: is text[start:end] exactly one value (the usual DB cell)?

    The order is free: a whole phone (<= 12 digits) is never a whole RRN or
    card (13+), and the chain rules only run when those failed. Phones first:
    they are the most common.
    """
    first = text[start]
    if first == "0" and (m := _PLAIN_PHONE_RX.fullmatch(text, start, end) or _DOMESTIC_RX.match(text, start)):
        if m.end() == end:
            return _PHONE, start, end, (0.95 if text.startswith("01", start) else 0.75 if m.group().isdigit() else 0.9)
    elif first in _PHONE_START:
        m = _PHONE_RX.match(text, start)
        if m is not None and m.end() == end:
            if m.group("biz"):
                return _PHONE, start, end, 0.6
            return _PHONE, start, end, _phone_confidence(m.group(), False)
    length = end - start
    if length >= 13:
        # Skip the regexes that cannot match: an RRN is 13 digits, bare or
        # with a separator after the 6th; a card has a separator after the
        # 4th digit, or is bare and starts like a card (see _card_confidence).
        bare = text[start:end].isdigit()
        # An RRN ends in its 7-digit back half set apart by a separator (a
        # card's or an account's last group is shorter or has no such one).
        if (length == 13 and bare) or (
            not bare and length <= 22 and text[end - 8] in _RRN_SEPS and text[end - 7 : end].isdigit()
        ):
            m = _RRN_RX.match(text, start)
            if (
                m is not None
                and m.end() == end
                and (hit := _rrn_candidate(m.group(), ctx, start))
                and not _reads_as_decimal(ctx, start, end)
            ):
                return hit[0], start, end, hit[1]
        if bare:
            card_like = first in "34569" or "22" <= text[start : start + 2] <= "27"
        else:
            card_like = text[start + 4] in _RRN_SEPS
        if card_like:
            m = _CARD_RX.match(text, start)
            if m is not None and m.end() == end and (conf := _card_confidence(m.group())) is not None:
                return _CARD, start, end, conf
    m = _CHAIN_RX.match(text, start)
    if m is not None and m.end() == end:
        return _chain_candidate(text, start, end, start, ctx)
    return None


def _scan_region(text: str, lo: int, hi: int, out: list[_Candidate], ctx: _Context) -> None:
    """Collect every numeric candidate in text[lo:hi] (lookbehinds still see before `lo`)."""
    for m in _MASTER.finditer(text, lo, hi):
        start = m.start()
        rrn, card, phone, chain, spaced = m.group("rrn", "card", "phone", "chain", "spaced")
        taken = start  # end of the longest candidate found at this start
        if rrn and (hit := _rrn_candidate(rrn, ctx, start)) and not _reads_as_decimal(ctx, start, start + len(rrn)):
            taken = start + len(rrn)
            out.append((hit[0], start, taken, hit[1]))
        if card:
            conf = _card_confidence(card)
            card16 = m.group("card16")
            if conf is None and card16 and card16 != card:  # 4-4-4-4 followed by 3 digits of noise?
                card, conf = card16, _card_confidence(card16)
            if conf is not None:
                taken = max(taken, start + len(card))
                out.append((_CARD, start, start + len(card), conf))
        if phone:
            taken = max(taken, start + len(phone))
            out.append((_PHONE, start, start + len(phone), _phone_confidence(phone, bool(m.group("biz")))))
        if chain and (hit := _chain_candidate(text, start, start + len(chain), taken, ctx)):
            taken = hit[2]
            out.append(hit)
        if spaced and start + len(spaced) > taken and _spaced_account(text, start, start + len(spaced), ctx):
            out.append((_ACCOUNT, start, start + len(spaced), 0.7))


def _find_numbers(text: str, start: int, end: int, out: list[_Candidate], ctx: _Context) -> None:
    """Candidates in one stage-1 region text[start:end]."""
    if text[end : end + 1] == ":":
        # "2024-01-15 12:34": a 1-2 digit hour is not part of the number before it.
        space = text.rfind(" ", start, end)
        if space > start and end - space <= 3:
            end = start + len(text[start:space].rstrip(" \t-.()+"))
    region = text[start:end]
    # Upper bound of the digit count: every format has 9+ digits except
    # 15xx-xxxx business numbers (8). Dates (8 digits) stop here.
    n_digits = end - start
    bare = region.isdigit()
    if not bare:
        n_digits -= region.count("-") + region.count(" ") + region.count(".")
        if n_digits < 9 and not (n_digits == 8 and region[0] == "1"):
            return
    elif n_digits < 9:
        return
    # A "+" or "(" just before belongs to a phone: "+82 10-...", "(02)123-4567".
    lead = start - 1 if start and text[start - 1] in "+(" else start
    hit = (lead < start and _whole_region(text, lead, end, ctx)) or _whole_region(text, start, end, ctx)
    # Without a whole value: in a plain hyphen/dot chain, a candidate can only
    # be a phone starting at a phone-like group (later groups never start a
    # chain, see _CHAIN_BEFORE), or an RRN/card, which needs 13+ digits and so
    # would have been the whole region unless there are 14+. Without those
    # ("ORD-2024-000123", "10.0.19045.2965") the full scan is skipped. In a
    # bare digit run every format must span the whole run, which
    # _whole_region has just tried, except "+ 82..." (a "+" two chars before).
    if (
        not hit
        and ((bare and (start < 2 or text[start - 2] != "+")) or (n_digits < 14 and not _PHONE_HEAD.search(region)))
        and _PLAIN_CHAIN.fullmatch(region)
    ):
        return
    # Could a hex token (UUID, hash) reach into the region? It must touch one
    # of its ends (the region itself has no letters), except an all-digit
    # UUID, which is a whole region of its own.
    runs = None
    if (
        (start and text[start - 1] in _HEX_CHARS)
        or text[end : end + 1] in _HEX_CHARS
        or (end - start >= 36 and _UUID.search(text, start, end) is not None)
    ):
        runs = ctx[1]
        if runs is None:
            runs = ctx[1] = opaque_runs(text)
        for s, e in runs:
            if s <= start and end <= e:
                return  # wholly inside one: "9a65bf25-1897-4809-...", "...-cf0532182727"
    if hit:
        if not (runs and _overlaps(runs, hit[1], hit[2])):
            out.append(hit)
            return
        if _PLAIN_CHAIN.fullmatch(region) and (bare or (n_digits < 14 and not _PHONE_HEAD.search(region))):
            return
    # 2 chars before for "+ 82" / "(02", 3 after for the trailing guards.
    if not runs:
        _scan_region(text, max(0, start - 2), min(len(text), end + 3), out, ctx)
        return
    found: list[_Candidate] = []
    _scan_region(text, max(0, start - 2), min(len(text), end + 3), found, ctx)
    out.extend(c for c in found if not _overlaps(runs, c[1], c[2]))


def _passport_label_in(text: str) -> bool:
    """The passport-label gate for non-ASCII text.

    There lower() and a case-insensitive search cost several times more than
    substring tests (every ASCII needle is widened first), so the raw text is
    tested for the usual spellings (passport, Passport, PASSPORT).
    A label in another mixed case is still found in ASCII text (lower() is
    cheap there) and in text that goes through normalisation."""
    return "여권" in text or "ssport" in text or "SSPORT" in text


def _find_passports(text: str, out: list[_Candidate]) -> None:
    """Passport-shaped tokens alone are product codes: only within 25 chars after
    a label (여권, passport in any case), or 12 before one ("M12345678 (여권)")."""
    for label in _PASSPORT_LABEL.finditer(text):
        # Bounded windows (a token is at most 10 chars, +1 for its lookaround),
        # so many labels without a number cost linear time.
        for m in _PASSPORT_RX.finditer(text, label.end(), label.end() + 36):
            if m.start() - label.end() <= 25:
                out.append((_PASSPORT, m.start(), m.end(), 0.9))
        for m in _PASSPORT_RX.finditer(text, max(0, label.start() - 23), label.start()):
            if label.start() - m.end() <= 12:
                out.append((_PASSPORT, m.start(), m.end(), 0.9))


def _resolve_key(c: _Candidate) -> tuple[int, int, float, int]:
    return (c[1] - c[2], -_PRIORITY[c[0]], -c[3], c[1])


def resolve(candidates: list[_Candidate]) -> list[_Candidate]:
    """Keep a non-overlapping subset: longest first, then priority, then confidence."""
    if len(candidates) == 1:
        return candidates
    ranked = sorted(candidates, key=_resolve_key)
    starts: list[int] = []  # kept spans, sorted by start (and so by end: they never overlap)
    kept: list[_Candidate] = []
    for cand in ranked:
        i = bisect_left(starts, cand[1])
        if (i > 0 and kept[i - 1][2] > cand[1]) or (i < len(kept) and kept[i][1] < cand[2]):
            continue
        starts.insert(i, cand[1])
        kept.insert(i, cand)
    return kept


# ==========================================================================
# Public API
# ==========================================================================


def _find_all_numbers(scan: str, region: re.Match[str], stage1: re.Pattern[str], found: list[_Candidate]) -> bool:
    """Candidates of `region` and every later stage-1 region of `scan`.

    With _STAGE1_RAW, stops at a character to normalise and returns False:
    the text must be normalised and searched again."""
    ctx = _context(scan)
    # Room left for another match: a region has 9+ characters, a normalisable 1.
    room = 9 if stage1 is _STAGE1 else 1
    last = len(scan) - room
    while True:
        start, end = region.span()
        if end - start > 1:
            if stage1 is _STAGE1_RAW and _odd_separators(scan, start, end):
                return False
            _find_numbers(scan, start, end, found, ctx)
        elif scan[start] not in "/_" or _near_digit(scan, start):
            # A slash or underscore by a digit (spaces between): a separator the fold reads.
            return False
        if end > last or (region := stage1.search(scan, end)) is None:
            return True


def detect_spans(text: str, hinted: Callable[[str], list[_Candidate]] | None = None) -> list[_Candidate]:
    """detect() as plain tuples ``(kind id, start, end, confidence)``, for hot paths.

    The kind id is the ``str`` value of the PiiKind (``"phone"``); no Detection
    objects are built. Non-overlapping, sorted by start; ``[]`` when none.

    `hinted` reads the text instead when stage 1 stops at a character to
    normalise or a hint (see _STAGE1_RAW); by default, the normalised copy."""
    n = len(text)
    if n < 6:
        return []  # the shortest value is an e-mail like a@b.kr; numbers need 9+ chars
    if text.isascii():
        # Whole cells first: one value that starts like a phone (or a 2000s
        # RRN), then a UUID (an opaque token) or a date/timestamp (nothing).
        # The general path below finds the same for such cells, only later.
        if text[0] in "0(+" and (hit := _whole_region(text, 0, n, [text, None])) is not None:
            return [hit]
        if (n == 36 or n == 38) and _UUID_CELL.fullmatch(text):
            return []
        if (n == 14 or (n >= 10 and text[4] in "-./")) and _DATE_CELL.fullmatch(text):
            return []
        # A slash or underscore between digits (010/1234/5678, 900101_1234567):
        # two substring tests are much cheaper than any change to _STAGE1 (an
        # alternation there costs several times more at every digit).
        if ("/" in text or "_" in text) and _DIGIT_SEP.search(text):
            return (hinted or detect_normalised)(text)
        region = _STAGE1.search(text)
        if region is None:
            if "@" in text and _EMAIL_CELL.fullmatch(text):
                return [(_EMAIL, 0, n, 0.99)]  # the cell is one address
            if hinted is not None and n >= 8 and _ascii_hint(text):  # the shortest hidden value: YUBiLmty
                return hinted(text)
            if "@" not in text and "assport" not in text.lower():  # cheap for ASCII
                return []  # the common case: names, amounts, times, codes, plain text
            found: list[_Candidate] = []
        else:
            if region.end() == n and region.start() == 0 and (hit := _whole_region(text, 0, n, [text, None])):
                return [hit]  # the cell is one value (what _find_numbers would find first)
            if hinted is not None and _ascii_hint(text):
                return hinted(text)
            found = []
            _find_all_numbers(text, region, _STAGE1, found)
        passport = "assport" in text.lower()
        if "@" in text:
            _find_emails(text, found, True)
    else:
        region = _STAGE1_RAW.search(text)
        if region is None:
            # No digit region and nothing to normalise.
            if "@" not in text and not _passport_label_in(text):
                return []  # names, addresses, amounts, memos without numbers
            found = []
        else:
            found = []
            if not _find_all_numbers(text, region, _STAGE1_RAW, found):
                # Full-width or compatibility forms, odd spaces, dots or dashes,
                # invisible characters, hints of a hidden value: start over.
                return (hinted or detect_normalised)(text)
        passport = _passport_label_in(text)
        if "@" in text:
            _find_emails(text, found)
    if passport:
        _find_passports(text, found)
    if len(found) < 2:
        return found
    return resolve(found)


def detect_normalised(text: str) -> list[_Candidate]:
    """detect_spans on the normalised copy of `text`; spans index `text` itself.

    Numbers are read in a copy where slashes and underscores between digits
    are separators (same offsets); e-mails and passports in the normalised
    copy, where "/" and "_" are address characters."""
    if text.isascii():
        scan, moves = text, None
    else:
        scan, moves = _normalised(text)
    numbers = scan
    if ("/" in scan or "_" in scan) and _DIGIT_SEP.search(scan):
        numbers = _SLASHED_RUN.sub(_slashed_run, scan)
    found: list[_Candidate] = []
    region = _STAGE1.search(numbers)
    if region is not None:
        _find_all_numbers(numbers, region, _STAGE1, found)
    if "@" in scan:
        _find_emails(scan, found)
    if "여권" in scan or "assport" in scan.lower():
        _find_passports(scan, found)
    if len(found) > 1:
        found = resolve(found)
    if moves is None or not found:
        return found
    offset = _original_offset
    return [(kind, offset(moves, s, False), offset(moves, e - 1, True), c) for kind, s, e, c in found]


_new_object = object.__new__
_set_attribute = object.__setattr__


def detection(kind: PiiKind, start: int, end: int, value: str, confidence: float) -> Detection:
    # Equal to Detection(...), about twice as fast: the frozen dataclass
    # __init__ makes one object.__setattr__ call per field, this makes one.
    det = _new_object(Detection)
    _set_attribute(
        det, "__dict__", {"kind": kind, "start": start, "end": end, "value": value, "confidence": confidence}
    )
    return det


def normalise(kind: PiiKind, value: str) -> str:
    """Canonical form of a value, so the same value always maps to the same token."""
    return NORMALISERS.get(kind, digits_only)(value)
