"""Format detectors for personal data (PII) in free text.

Before a tool result (an SQL cell, a memo written in Korean, a JSON string)
reaches the model, personal data is masked by deterministic rules: no NLP, no
LLM. This module is the *format* layer: it finds PII by the shape of the value
anywhere in a string. Another module replaces each span with a per-conversation
token such as ``[전화번호-3]``; :func:`normalise` gives it the canonical form
so that the same value always maps to the same token. The policy prefers
masking too much over too little. Pure Python, stdlib ``re`` only, no Django.

Public API
----------
``PiiKind``
    ``str`` enum of stable machine ids (``"rrn"``, ``"phone"``, ...);
    ``kind.label`` is the Korean label (``"전화번호"``). ``NAME`` and
    ``ADDRESS`` are never detected here (no format); column classification
    elsewhere uses them.
``Detection(kind, start, end, value, confidence)``
    frozen dataclass; ``value == text[start:end]``; ``confidence`` in 0..1.
``detect(text) -> list[Detection]``
    non-overlapping, sorted by ``start``. When candidates overlap, the longer
    span wins, then the higher-priority kind (RRN/FRN > card > passport/licence
    > phone > email > account), then the higher confidence.
``normalise(kind, value) -> str``
    canonical form: digits only for numeric kinds, phones in domestic form
    (``+82 10-1234-5678`` -> ``01012345678``), e-mail lowercased, passport
    uppercased without separators, names/addresses casefolded with single
    spaces.
``mask_text(text, replace) -> str``
    replaces every detection with ``replace(detection)``.

What is detected (and the decisions on ambiguous formats)
---------------------------------------------------------
* Numbers are delimited with digit lookarounds, never ``\\b``: Hangul is a word
  character for ``re``, so ``전화010-1234-5678로`` would otherwise be missed.
* Full-width forms (``０１０－１２３４``) and Unicode dashes are folded to ASCII
  before scanning (one code point each, so offsets do not move).
* RRN / foreigner RN: ``YYMMDD-GNNNNNN`` (hyphen, space or nothing), gender
  digit 1-4 (RRN) or 5-8 (FRN), month/day must be a real date (Feb 29 always
  allowed). The old checksum only raises confidence: numbers issued since
  Oct 2020 no longer satisfy it. Corporate registration numbers (법인등록번호)
  share the layout and are masked too (we cannot tell them apart).
* Phones: mobile 010/011/016-019, Seoul 02, area codes 031-033, 041-044,
  051-055, 061-064, 050X, 060/070/080, with hyphen, dot, space or no
  separator, ``(02)123-4567`` and ``02)123-4567``, and ``+82`` / ``0082`` /
  ``82-`` international forms (with or without ``(0)``/trunk 0). The middle
  group never starts with 0 (no Korean exchange does), which keeps ``02 010-...``
  from being read as one number. Business numbers 15xx/16xx/18xx-xxxx are
  detected (low confidence) only when hyphenated and not followed by 원/년
  (``1500-2000원`` is a price range): they identify companies, but masking them
  costs little and bare 8-digit runs are too often IDs.
* E-mail: practical RFC subset (ASCII local part with ``. _ % + -``, so
  subaddressing ``a+b@x.com`` works; dotted domain with a 2+ letter or punycode
  TLD, so ``.co.kr`` works). Internationalised (Hangul) addresses are not.
* Cards: 13-19 digits, Luhn-valid only; grouped 4-4-4-4(-3), 4-6-5 / 4-6-4
  (Amex, Diners) with spaces or hyphens, or bare. Bare runs must also start
  with a card industry digit (2-6 or 9, 9 = Korean domestic brands): with
  Luhn alone one random long ID in ten would be masked as a card.
* Accounts: (a) 3-4 hyphen-separated groups totalling 10-14 digits, without
  context; (b) any 10-16 digit run (bare, or groups joined by hyphens/dots)
  when an account word (계좌, 입금, 은행, 국민, 신한, 우리, 하나, 농협, 기업,
  카카오, 토스, account, bank, ...) is within ~20 chars before or ~10 after.
  Two-group numbers (``10000-20000``, ``2024-000123``) are overwhelmingly ranges
  and serials and no major bank prints accounts in two groups, so they need
  context. Rule (a) skips runs glued to letters (``ORD-2024-000123``), runs that
  start with a date (``2024-01-15-0001``) and the 3-2-5 layout: business
  registration numbers (``123-45-67890``) identify companies, not people.
  With an account word nearby 3-2-5 is masked anyway (unless 사업자/business is
  also nearby), as is a Luhn-invalid 16-digit run. Rule (b) skips amounts
  (followed by 원) and YYYYMMDD[hhmm[ss]] timestamps.
* Passport (``M12345678``, ``M123A4567``, also foreign 1-2 letters + 7-8
  digits) and driver's licence (``11-12-345678-90``, ``서울 12-345678-90``)
  only with a label (여권/passport, 면허/licence/license/driver) shortly
  before. An unlabelled licence number is still masked by account rule (a).
* Never masked: dates, times, amounts, UUIDs, IP addresses, versions, order or
  product codes with letters, zip codes, short numbers, business registration
  numbers, Luhn-invalid 16-digit runs without an account word.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

__all__ = ["Detection", "PiiKind", "detect", "mask_text", "normalise"]


class PiiKind(str, Enum):
    RRN = "rrn"
    FOREIGNER_RN = "frn"
    PHONE = "phone"
    EMAIL = "email"
    CARD = "card"
    ACCOUNT = "account"
    PASSPORT = "passport"
    DRIVER_LICENSE = "driver_license"
    NAME = "name"
    ADDRESS = "address"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    PiiKind.RRN: "주민등록번호",
    PiiKind.FOREIGNER_RN: "외국인등록번호",
    PiiKind.PHONE: "전화번호",
    PiiKind.EMAIL: "이메일",
    PiiKind.CARD: "카드번호",
    PiiKind.ACCOUNT: "계좌번호",
    PiiKind.PASSPORT: "여권번호",
    PiiKind.DRIVER_LICENSE: "운전면허번호",
    PiiKind.NAME: "이름",
    PiiKind.ADDRESS: "주소",
}

# Tie-break when two candidates of the same length overlap: the more specific,
# better validated format wins (an RRN-shaped run is also a 13-digit "card").
_PRIORITY = {
    PiiKind.RRN: 9,
    PiiKind.FOREIGNER_RN: 9,
    PiiKind.CARD: 8,
    PiiKind.PASSPORT: 7,
    PiiKind.DRIVER_LICENSE: 7,
    PiiKind.PHONE: 6,
    PiiKind.EMAIL: 5,
    PiiKind.ACCOUNT: 4,
}


@dataclass(frozen=True, slots=True)
class Detection:
    kind: PiiKind
    start: int
    end: int
    value: str
    confidence: float


# --------------------------------------------------------------------------
# Pre-processing
# --------------------------------------------------------------------------

# Full-width ASCII (U+FF01..U+FF5E), the ideographic space and Unicode dashes
# map to one ASCII character each, so a folded copy keeps every offset and the
# detectors below can be written for ASCII only.
_FOLD = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}
_FOLD.update(dict.fromkeys((0x2010, 0x2011, 0x2012, 0x2013, 0x2014, 0x2015, 0x2212, 0xFE63), 0x2D))
_FOLD[0x3000] = 0x20
_DASHES = "\u2010-\u2015\u2212\ufe63\uff0d"

# Stage 1: ONE pass over the raw text finds "clusters", the only regions where
# a numeric format can be: >= 9 digits chained by separators (no Korean phone,
# RRN, card, account or licence number has fewer), a 15xx-xxxx business
# number, or a passport-shaped token. Dates (8 digits), amounts (commas),
# times and short numbers never form a cluster, so most cells cost one pass.
# `\d` is Unicode here on purpose: full-width digits must form clusters too.
_CLUSTER = re.compile(
    rf"""
    (?P<num>
        \d(?:[-.()+ \t\u3000\uff08\uff09\uff0b\uff0e{_DASHES}]{{0,3}}\d){{8,}}
      | 1[568]\d\d[ \t]?[-{_DASHES}][ \t]?\d{{4}}
    )
    | (?P<pp>(?<![A-Za-z0-9])(?:[A-Za-z]{{1,2}}\d{{7,8}}|[A-Za-z]\d{{3}}[A-Za-z]\d{{4}})(?![A-Za-z0-9]))
    """,
    re.VERBOSE,
)

# --------------------------------------------------------------------------
# Stage 2 patterns: run only inside a cluster's window, on folded (ASCII) text
# --------------------------------------------------------------------------

# Separator inside a phone / RRN / licence: hyphen or dot (optionally spaced)
# or a single space.
_SEP = r"(?:[ \t]?[-.][ \t]?|[ \t])"
# Card separator: no dots (1.2.3 style runs are versions, not cards).
_CSEP = r"(?:[ \t]?-[ \t]?|[ \t])"

# National significant prefixes (without the trunk 0), longest first.
_NAT = r"(?:50\d|1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|[678]0)"

_PHONE = re.compile(
    rf"""
    (?<!\d)
    (?:
        (?:
            (?:\+[ \t]?82|00[ \t]?82|82(?=[ \t.-]))    # +82, 0082, or 82 followed by a separator
            {_SEP}?(?:\(0\)[ \t]?)?0?{_NAT}\)?
          | \(0{_NAT}\)                                 # (02)123-4567
          | 0{_NAT}\)?                                  # 02-..., 02)123-4567 (common Korean style)
        )
        {_SEP}?[1-9]\d{{2,3}}{_SEP}?\d{{4}}             # an exchange never starts with 0
      | (?P<biz>1[568]\d\d[ \t]?-[ \t]?\d{{4}})(?![ \t]*[원년])   # 1500-2000원 is a price range
    )
    (?!\d)
    """,
    re.ASCII | re.VERBOSE,
)

_RRN = re.compile(
    r"(?<!\d)(\d\d)(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?P<sep>[ \t]?-[ \t]?|[ \t])?([1-8])\d{6}(?!\d)",
    re.ASCII,
)

_CARD = re.compile(
    rf"""
    (?<!\d)
    (?:
        \d{{4}}(?:{_CSEP}\d{{4}}){{3}}(?:{_CSEP}\d{{1,3}})?   # 4-4-4-4, 4-4-4-4-3
      | \d{{4}}{_CSEP}\d{{6}}{_CSEP}\d{{4,5}}                 # Amex 4-6-5, Diners 4-6-4
      | (?P<bare>(?<![A-Za-z])\d{{13,19}})
    )
    (?!\d)
    """,
    re.ASCII | re.VERBOSE,
)

# A digit run glued to letters by "-", "_" or "/" is part of a code
# (ORD-2024-000123, a716-446655440000), not an account.
_CODE_BEFORE = r"(?<![A-Za-z0-9_])(?<![A-Za-z0-9_][-_/])"
_CODE_AFTER = r"(?![A-Za-z0-9_])(?![-_/][A-Za-z0-9])"
_TEN_DIGITS_AHEAD = r"(?=(?:[ \t]?[-.]?[ \t]?\d){10})"  # cheap pre-filter, the count is checked again

_ACCOUNT_GROUPED = re.compile(
    rf"{_CODE_BEFORE}{_TEN_DIGITS_AHEAD}\d{{2,6}}(?:[ \t]?-[ \t]?\d{{1,7}}){{2,3}}{_CODE_AFTER}",
    re.ASCII,
)
# With an account word nearby: bare runs, or groups joined by hyphens/dots.
# (Not spaces: "입금 1234567890 2024-01-15" must not become one 18-digit run.)
_ACCOUNT_LOOSE = re.compile(
    rf"{_CODE_BEFORE}{_TEN_DIGITS_AHEAD}\d+(?:[ \t]?[-.][ \t]?\d+){{0,4}}{_CODE_AFTER}",
    re.ASCII,
)
# Searched in a lowercased window, hence no IGNORECASE (which makes `re` slow).
_ACCOUNT_CONTEXT = re.compile(
    "계좌|입금|송금|이체|환불|예금|통장|은행|뱅크|국민|신한|우리|하나|농협|기업|카카오|토스|"
    "우체국|새마을|신협|수협|축협|account|acct|a/c|bank|iban"
)
_BUSINESS_CONTEXT = re.compile("사업자|business|brn")
_AMOUNT_AFTER = re.compile(r"[ \t]*(?:원|won|krw)", re.IGNORECASE)

# Well-known bank layouts (group lengths) get a higher confidence.
_BANK_LAYOUTS = frozenset(
    {
        (6, 2, 6),  # 국민, 우체국, 농협(축협)
        (3, 3, 6),  # 신한, 케이뱅크
        (4, 3, 6),  # 우리
        (3, 6, 5),  # 하나
        (3, 4, 4, 2),  # 농협, 부산
        (3, 6, 2, 3),  # 기업
        (4, 2, 7),  # 카카오뱅크
        (4, 4, 4),  # 토스뱅크, 수협
        (3, 2, 6),  # SC제일, 대구
        (3, 6, 3),  # 씨티
        (4, 4, 4, 1),  # 새마을금고
        (3, 2, 4, 3),  # 국민(구)
    }
)

_PASSPORT_LABEL = re.compile("여권|passport")
_LICENSE_LABEL = re.compile("면허|licen[cs]e|driver")
_LICENSE = re.compile(rf"(?<!\d)(?:\d\d{_SEP}?)?\d\d{_SEP}?\d{{6}}{_SEP}?\d\d(?!\d)", re.ASCII)

# E-mail. Local part and domain are bounded (64 chars / 8 labels) so a long
# run of letters or dots costs linear time, never quadratic.
_EMAIL = re.compile(
    r"""
    (?<![A-Za-z0-9_%+-])
    [A-Za-z0-9_%+-](?:[A-Za-z0-9_%+.-]{0,62}[A-Za-z0-9_%+-])?
    @
    (?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.){1,8}
    (?:[A-Za-z]{2,24}|xn--[A-Za-z0-9-]{1,59})
    (?![A-Za-z0-9-])
    """,
    re.ASCII | re.VERBOSE,
)

_NON_DIGIT = re.compile(r"\D", re.ASCII)
_DIGIT_GROUP = re.compile(r"\d+", re.ASCII)
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_RRN_WEIGHTS = (2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5)

# Candidate tuple: (kind, start, end, confidence). Detection objects are built
# only for the survivors of overlap resolution.
_Candidate = tuple[PiiKind, int, int, float]


# --------------------------------------------------------------------------
# Validators
# --------------------------------------------------------------------------


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i & 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _rrn_checksum_ok(digits: str, foreigner: bool) -> bool:
    total = sum((ord(c) - 48) * w for c, w in zip(digits, _RRN_WEIGHTS, strict=False))
    base = 13 if foreigner else 11
    return (base - total % 11) % 10 == ord(digits[12]) - 48


def _is_date(year4: str, month: str, day: str) -> bool:
    """YYYY MM DD with a plausible year (1900-2099)."""
    if len(year4) != 4 or year4[:2] not in ("19", "20") or len(month) != 2 or len(day) != 2:
        return False
    m, d = int(month), int(day)
    return 1 <= m <= 12 and 1 <= d <= _DAYS_IN_MONTH[m]


def _starts_with_date(groups: list[str]) -> bool:
    """2024-01-15-0001 or 20240115123000: timestamps and date-based serials."""
    if len(groups) >= 3 and _is_date(groups[0], groups[1], groups[2]):
        return True
    first = groups[0]
    return len(first) >= 8 and _is_date(first[:4], first[4:6], first[6:8])


def _near(label: re.Pattern[str], text: str, start: int, end: int, before: int, after: int = 0) -> bool:
    """Does `label` occur within `before` chars before the span (or `after` chars after)?"""
    if label.search(text[max(0, start - before) : start].lower()):
        return True
    return after > 0 and label.search(text[end : end + after].lower()) is not None


# --------------------------------------------------------------------------
# Finders: each appends (kind, start, end, confidence) candidates to `out`,
# scanning text[lo:hi] (lookbehinds still see the text before `lo`).
# --------------------------------------------------------------------------


def _find_rrn(text: str, lo: int, hi: int, out: list[_Candidate]) -> None:
    for m in _RRN.finditer(text, lo, hi):
        month, day = int(m.group(2)), int(m.group(3))
        if day > _DAYS_IN_MONTH[month]:
            continue
        digits = _NON_DIGIT.sub("", m.group())
        foreigner = m.group(5) in "5678"
        if _rrn_checksum_ok(digits, foreigner):
            conf = 0.99
        else:  # numbers issued since Oct 2020 are random: keep them, a bit less sure
            conf = 0.9 if m.group("sep") else 0.8
        out.append((PiiKind.FOREIGNER_RN if foreigner else PiiKind.RRN, m.start(), m.end(), conf))


def _find_phones(text: str, lo: int, hi: int, out: list[_Candidate]) -> None:
    for m in _PHONE.finditer(text, lo, hi):
        if m.group("biz"):
            conf = 0.6
        elif _normalise_phone(m.group()).startswith("01"):
            conf = 0.95  # mobile
        else:
            conf = 0.75 if m.group().isdigit() else 0.9  # bare landlines look like IDs more often
        out.append((PiiKind.PHONE, m.start(), m.end(), conf))


def _find_cards(text: str, lo: int, hi: int, out: list[_Candidate]) -> None:
    for m in _CARD.finditer(text, lo, hi):
        bare = m.group("bare")
        digits = bare or _NON_DIGIT.sub("", m.group())
        if not 13 <= len(digits) <= 19 or not _luhn_ok(digits):
            continue
        if bare and digits[0] not in "234569":  # card industry digits; 9 = Korean domestic brands
            continue
        out.append((PiiKind.CARD, m.start(), m.end(), 0.85 if bare else 0.95))


def _find_grouped_accounts(text: str, lo: int, hi: int, out: list[_Candidate]) -> None:
    for m in _ACCOUNT_GROUPED.finditer(text, lo, hi):
        groups = _DIGIT_GROUP.findall(m.group())
        layout = tuple(len(g) for g in groups)
        # 3-2-5 is the business registration number layout: companies, not people.
        if not 10 <= sum(layout) <= 14 or layout == (3, 2, 5) or _starts_with_date(groups):
            continue
        out.append((PiiKind.ACCOUNT, m.start(), m.end(), 0.85 if layout in _BANK_LAYOUTS else 0.6))


def _find_context_accounts(text: str, lo: int, hi: int, out: list[_Candidate], first: int) -> None:
    """10-16 digit runs that no other rule took, when an account word is near."""
    for m in _ACCOUNT_LOOSE.finditer(text, lo, hi):
        start, end = m.span()
        if any(c[1] <= start and end <= c[2] for c in out[first:]):
            continue
        groups = _DIGIT_GROUP.findall(m.group())
        n_digits = sum(len(g) for g in groups)
        if not 10 <= n_digits <= 16 or _starts_with_date(groups) or _AMOUNT_AFTER.match(text, end):
            continue
        if not _near(_ACCOUNT_CONTEXT, text, start, end, 20, 10):
            continue
        if len(groups) == 3 and n_digits == 10 and _near(_BUSINESS_CONTEXT, text, start, end, 25, 10):
            continue  # 123-45-67890 next to 사업자: a business registration number
        out.append((PiiKind.ACCOUNT, start, end, 0.7))


def _find_licences(text: str, lo: int, hi: int, out: list[_Candidate]) -> None:
    for m in _LICENSE.finditer(text, lo, hi):
        # 25 chars: room for "운전면허번호: 서울 " between the label and the digits.
        if _near(_LICENSE_LABEL, text, m.start(), m.end(), 25):
            out.append((PiiKind.DRIVER_LICENSE, m.start(), m.end(), 0.9))


def _scan_numeric_cluster(text: str, start: int, end: int, out: list[_Candidate]) -> None:
    # Window: 2 chars before for "+ 82" / "(02", 3 after for the trailing guards.
    lo, hi = max(0, start - 2), min(len(text), end + 3)
    first = len(out)
    size = end - start
    if size >= 13:  # RRN and card numbers have >= 13 digits
        _find_rrn(text, lo, hi, out)
        _find_cards(text, lo, hi, out)
    _find_phones(text, lo, hi, out)
    if size >= 10:
        _find_grouped_accounts(text, lo, hi, out)
        _find_context_accounts(text, lo, hi, out, first)
        _find_licences(text, lo, hi, out)


def _find_emails(text: str, out: list[_Candidate]) -> None:
    # Start just before the first "@": a local part is at most 64 chars.
    for m in _EMAIL.finditer(text, max(0, text.find("@") - 64)):
        out.append((PiiKind.EMAIL, m.start(), m.end(), 0.99))


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def _resolve(candidates: list[_Candidate]) -> list[_Candidate]:
    """Keep a non-overlapping subset: longest first, then priority, then confidence."""
    if len(candidates) == 1:
        return candidates
    ranked = sorted(candidates, key=lambda c: (c[1] - c[2], -_PRIORITY[c[0]], -c[3], c[1]))
    kept: list[_Candidate] = []
    for cand in ranked:
        if all(cand[2] <= k[1] or cand[1] >= k[2] for k in kept):
            kept.append(cand)
    kept.sort(key=lambda c: c[1])
    return kept


def detect(text: str) -> list[Detection]:
    """Find PII by value format; non-overlapping detections sorted by start."""
    if not text:
        return []
    clusters = list(_CLUSTER.finditer(text))
    has_at = "@" in text
    scan = text
    if not text.isascii() and (
        any(not m.group().isascii() for m in clusters) or (not has_at and "\uff20" in text)  # full-width digits/@
    ):
        scan = text.translate(_FOLD)
        clusters = list(_CLUSTER.finditer(scan))
        has_at = "@" in scan
    if not clusters and not has_at:
        return []

    found: list[_Candidate] = []
    if has_at:
        _find_emails(scan, found)
    for m in clusters:
        if m.group("pp") is None:
            _scan_numeric_cluster(scan, m.start(), m.end(), found)
        elif _near(_PASSPORT_LABEL, scan, m.start(), m.end(), 25):
            found.append((PiiKind.PASSPORT, m.start(), m.end(), 0.9))
    if not found:
        return []
    return [Detection(kind, s, e, text[s:e], conf) for kind, s, e, conf in _resolve(found)]


def _ascii_digits(value: str) -> str:
    if value.isascii():
        return _NON_DIGIT.sub("", value)
    return "".join(str(int(ch)) for ch in value if ch.isdecimal())


def _normalise_phone(value: str) -> str:
    digits = _ascii_digits(value)
    if digits.startswith("0082"):
        digits = digits[2:]
    if digits.startswith("82"):  # no domestic number starts with 82: it is the country code
        digits = digits[2:]
        if not digits.startswith("0"):
            digits = "0" + digits
    return digits


def normalise(kind: PiiKind, value: str) -> str:
    """Canonical form of a value, so the same value always maps to the same token."""
    if kind is PiiKind.PHONE:
        return _normalise_phone(value)
    if kind is PiiKind.EMAIL:
        return value.translate(_FOLD).strip().lower()
    if kind is PiiKind.PASSPORT:
        return "".join(ch for ch in value.translate(_FOLD).upper() if ch.isalnum())
    if kind in (PiiKind.NAME, PiiKind.ADDRESS):
        return " ".join(value.translate(_FOLD).split()).casefold()
    return _ascii_digits(value)  # RRN, FRN, card, account, driver's licence


def mask_text(text: str, replace: Callable[[Detection], str]) -> str:
    """Return `text` with every detection replaced by `replace(detection)`."""
    detections = detect(text)
    if not detections:
        return text
    pieces: list[str] = []
    pos = 0
    for det in detections:
        pieces.append(text[pos : det.start])
        pieces.append(replace(det))
        pos = det.end
    pieces.append(text[pos:])
    return "".join(pieces)
