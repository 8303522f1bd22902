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
# Stage 1: one cheap pass over the raw text
# --------------------------------------------------------------------------

# Dash-like characters accepted between digit groups in the raw text.
_DASHES = "\u2010-\u2015\u2212\ufe63\uff0d"

# Finds the only regions where a format can be: >= 9 digits chained by
# separators (no Korean phone, RRN, card, account or licence number has fewer),
# a 15xx-xxxx business number, or a passport label. Dates (8 digits), amounts
# (commas), times and short numbers never match, so most cells cost this one
# pass. It starts with a character class, which lets `re` skip the other
# characters in C. `\d` is Unicode on purpose: full-width digits count too.
_STAGE1 = re.compile(
    rf"""
      \d(?:[-.()+ \t\u3000\uff08\uff09\uff0b\uff0e{_DASHES}]{{0,3}}\d){{8,}}
    | 1[568]\d\d[ \t]?[-{_DASHES}][ \t]?\d{{4}}
    | (?P<passport>여권|[Pp]assport|PASSPORT)
    """,
    re.VERBOSE,
)

# Full-width ASCII (U+FF01..U+FF5E), the ideographic space and Unicode dashes
# map to one ASCII character each: a folded copy keeps every offset, so stage 2
# can be written for ASCII only and spans still index the original text.
_FOLD = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)}
_FOLD.update(dict.fromkeys((0x2010, 0x2011, 0x2012, 0x2013, 0x2014, 0x2015, 0x2212, 0xFE63), 0x2D))
_FOLD[0x3000] = 0x20
_FOLDABLE = re.compile(f"[\uff01-\uff5e\u3000{_DASHES}]")

# --------------------------------------------------------------------------
# Stage 2: one "master" regex per stage-1 region, on folded (ASCII) text
# --------------------------------------------------------------------------
#
# At every position that does not continue a digit run, each format is tried
# in its own optional lookahead and captured if it matches; a final
# conditional drops positions where nothing matched. One pass in C thus yields
# every candidate of every kind, overlapping ones included, and Python only
# validates them (dates, Luhn, layouts) and resolves overlaps.

# Separator inside a phone / RRN / licence: hyphen or dot (optionally spaced)
# or one space. Cards: no dots (1.2.3-style runs are versions, not cards).
_SEP = r"(?:[ \t]?[-.][ \t]?|[ \t])"
_CSEP = r"(?:[ \t]?-[ \t]?|[ \t])"

# National significant prefixes without the trunk 0, longest first: mobile
# 10-19, Seoul 2, area codes 31-33/41-44/51-55/61-64, 050X, 060/070/080.
_NAT = r"(?:50\d|1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|[678]0)"

_PHONE_BODY = rf"""
    (?:
        (?:\+[ \t]?82|00[ \t]?82|82(?=[ \t.-])){_SEP}?(?:\(0\)[ \t]?)?0?{_NAT}\)?   # +82 / 0082 / "82-"
      | \(0{_NAT}\)                                                               # (02)123-4567
      | 0{_NAT}\)?                                                                # 02-..., 02)123-4567
    )
    {_SEP}?[1-9]\d{{2,3}}{_SEP}?\d{{4}}(?!\d)      # no exchange starts with 0: "02 010-..." is not one number
  | (?P<biz>1[568]\d\d[ \t]?-[ \t]?\d{{4}}(?!\d)(?![ \t]*[원년]))   # not "1500-2000원" (a price range)
"""

# Date-valid YYMMDD (day-in-month is checked in Python), gender/century digit
# 1-8 (5-8: foreigners). Hyphen, space or nothing.
_RRN_BODY = r"\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])(?:[ \t]?-[ \t]?|[ \t])?[1-8]\d{6}(?!\d)"

_CARD_BODY = rf"""
    (?P<card16>\d{{4}}(?:{_CSEP}\d{{4}}){{3}})(?:{_CSEP}\d{{3}})?(?!\d)   # 4-4-4-4, 4-4-4-4-3
  | \d{{4}}{_CSEP}\d{{6}}{_CSEP}\d{{4,5}}(?!\d)                          # Amex 4-6-5, Diners 4-6-4
  | (?<![A-Za-z])\d{{13,19}}(?!\d)                                      # bare, not glued to a code
"""

# A digit run glued to letters by "-", "_" or "/" is part of a code
# (ORD-2024-000123, a716-446655440000), never an account.
_CODE_BEFORE = r"(?<![A-Za-z0-9_])(?<![A-Za-z0-9_][-_/])"
_CODE_AFTER = r"(?![A-Za-z0-9_])(?![-_/][A-Za-z0-9])"
_TEN_DIGITS_AHEAD = r"(?=(?:[ \t]?[-.]?[ \t]?\d){10})"  # cheap pre-filter; Python counts exactly

# Bank layouts: 3-4 hyphenated groups (2-6 digits first). Totals checked in Python.
_ACCOUNT_BODY = rf"{_CODE_BEFORE}{_TEN_DIGITS_AHEAD}\d{{2,6}}(?:[ \t]?-[ \t]?\d{{1,7}}){{2,3}}{_CODE_AFTER}"
# Only used with an account word nearby: bare runs, or groups joined by
# hyphens/dots. Not spaces: "입금 1234567890 2024-01-15" is two numbers.
_LOOSE_BODY = rf"{_CODE_BEFORE}{_TEN_DIGITS_AHEAD}\d+(?:[ \t]?[-.][ \t]?\d+){{0,4}}{_CODE_AFTER}"
# Driver's licence: [region 2] year 2, serial 6, check 2. Needs a label.
_LICENSE_BODY = rf"(?:\d\d{_SEP}?)?\d\d{_SEP}?\d{{6}}{_SEP}?\d\d(?!\d)"

_MASTER = re.compile(
    rf"""
    (?<![0-9])
    (?:(?=(?P<rrn>{_RRN_BODY})))?
    (?:(?=(?P<card>{_CARD_BODY})))?
    (?:(?=(?P<phone>{_PHONE_BODY})))?
    (?:(?=(?P<account>{_ACCOUNT_BODY})))?
    (?:(?=(?P<loose>{_LOOSE_BODY})))?
    (?:(?=(?P<licence>{_LICENSE_BODY})))?
    (?(rrn)|(?(card)|(?(phone)|(?(account)|(?(loose)|(?(licence)|(?!)))))))
    """,
    re.ASCII | re.VERBOSE,
)
_MASTER_GROUPS = ("rrn", "card", "phone", "account", "loose", "licence")

_PASSPORT = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z]{1,2}\d{7,8}|[A-Za-z]\d{3}[A-Za-z]\d{4})(?![A-Za-z0-9])",
    re.ASCII,
)

# E-mail. Local part and domain are bounded (64 chars / 8 labels), so a long
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

# Context words, searched in a short lowercased window (IGNORECASE makes `re`
# much slower). Short bank names are included on purpose: "국민 1234567890123"
# is how people write it, and over-masking is the safe side.
_ACCOUNT_CONTEXT = re.compile(
    "계좌|입금|송금|이체|환불|예금|통장|은행|뱅크|국민|신한|우리|하나|농협|기업|카카오|토스|"
    "우체국|새마을|신협|수협|축협|account|acct|a/c|bank|iban"
)
_BUSINESS_CONTEXT = re.compile("사업자|business|brn")
_LICENSE_LABEL = re.compile("면허|licen[cs]e|driver")
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

_NON_DIGIT = re.compile(r"\D", re.ASCII)
_DIGIT_GROUP = re.compile(r"\d+", re.ASCII)
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_RRN_WEIGHTS = (2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5)

# Candidate: (kind, start, end, confidence). Detection objects are built only
# for the survivors of overlap resolution.
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
    return ((13 if foreigner else 11) - total % 11) % 10 == ord(digits[12]) - 48


def _is_date(year4: str, month: str, day: str) -> bool:
    """YYYY MM DD with a plausible year (1900-2099)."""
    if len(year4) != 4 or year4[:2] not in ("19", "20") or len(month) != 2 or len(day) != 2:
        return False
    m = int(month)
    return 1 <= m <= 12 and 1 <= int(day) <= _DAYS_IN_MONTH[m]


def _starts_with_date(groups: list[str]) -> bool:
    """2024-01-15-0001, 20240115-0001, 20240115123000: timestamps and date-based serials."""
    if len(groups) >= 3 and _is_date(groups[0], groups[1], groups[2]):
        return True
    first = groups[0]
    return len(first) >= 8 and _is_date(first[:4], first[4:6], first[6:8])


def _near(label: re.Pattern[str], text: str, start: int, end: int, before: int, after: int = 0) -> bool:
    """Does `label` occur within `before` chars before the span (or `after` chars after it)?"""
    if label.search(text[max(0, start - before) : start].lower()):
        return True
    return after > 0 and label.search(text[end : end + after].lower()) is not None


# --------------------------------------------------------------------------
# Candidate rules: (kind, confidence) for a captured value, or None
# --------------------------------------------------------------------------


def _rrn_candidate(value: str) -> tuple[PiiKind, float] | None:
    digits = _NON_DIGIT.sub("", value)
    month, day = int(digits[2:4]), int(digits[4:6])
    if day > _DAYS_IN_MONTH[month]:  # Feb 29 is always allowed (no century known for sure)
        return None
    foreigner = digits[6] in "5678"
    kind = PiiKind.FOREIGNER_RN if foreigner else PiiKind.RRN
    if _rrn_checksum_ok(digits, foreigner):
        return kind, 0.99
    # Numbers issued since Oct 2020 are random: the checksum never rejects.
    return kind, (0.9 if len(value) > 13 else 0.8)


def _card_confidence(value: str) -> float | None:
    if value.isdigit():
        # Bare runs also need a card industry digit (2-6, or 9 for Korean
        # domestic brands): with Luhn alone one random long ID in ten would
        # be masked as a card.
        return 0.85 if value[0] in "234569" and _luhn_ok(value) else None
    return 0.95 if _luhn_ok(_NON_DIGIT.sub("", value)) else None


def _phone_confidence(value: str, business: bool) -> float:
    if business:
        return 0.6
    if _normalise_phone(value).startswith("01"):
        return 0.95  # mobile
    return 0.75 if value.isdigit() else 0.9  # bare landlines look like IDs more often


def _account_confidence(value: str) -> float | None:
    groups = _DIGIT_GROUP.findall(value)
    layout = tuple(len(g) for g in groups)
    # 3-2-5 is the business registration number layout: companies, not people.
    if not 10 <= sum(layout) <= 14 or layout == (3, 2, 5) or _starts_with_date(groups):
        return None
    return 0.85 if layout in _BANK_LAYOUTS else 0.6


def _loose_account_ok(text: str, start: int, end: int) -> bool:
    """A 10-16 digit run no other rule took: an account only next to an account word."""
    groups = _DIGIT_GROUP.findall(text, start, end)
    n_digits = sum(len(g) for g in groups)
    if not 10 <= n_digits <= 16 or _starts_with_date(groups) or _AMOUNT_AFTER.match(text, end):
        return False
    if not _near(_ACCOUNT_CONTEXT, text, start, end, 20, 10):
        return False
    # 123-45-67890 next to 사업자 stays a business registration number.
    return not (len(groups) == 3 and n_digits == 10 and _near(_BUSINESS_CONTEXT, text, start, end, 25, 10))


# --------------------------------------------------------------------------
# Finders
# --------------------------------------------------------------------------


def _scan_region(text: str, lo: int, hi: int, out: list[_Candidate]) -> None:
    """Collect numeric candidates in text[lo:hi] (lookbehinds still see before `lo`)."""
    for m in _MASTER.finditer(text, lo, hi):
        start = m.start()
        rrn, card, phone, account, loose, licence = m.group(*_MASTER_GROUPS)
        taken = 0  # end of the longest validated candidate at this start
        if rrn and (hit := _rrn_candidate(rrn)):
            taken = start + len(rrn)
            out.append((hit[0], start, taken, hit[1]))
        if card:
            conf = _card_confidence(card)
            card16 = m.group("card16")
            if conf is None and card16 and card16 != card:  # 19 digits invalid: maybe 16 + noise
                card, conf = card16, _card_confidence(card16)
            if conf is not None:
                taken = max(taken, start + len(card))
                out.append((PiiKind.CARD, start, start + len(card), conf))
        if phone:
            taken = max(taken, start + len(phone))
            out.append((PiiKind.PHONE, start, start + len(phone), _phone_confidence(phone, bool(m.group("biz")))))
        if account and (conf := _account_confidence(account)) is not None:
            taken = max(taken, start + len(account))
            out.append((PiiKind.ACCOUNT, start, start + len(account), conf))
        if loose and start + len(loose) > taken and _loose_account_ok(text, start, start + len(loose)):
            out.append((PiiKind.ACCOUNT, start, start + len(loose), 0.7))
        # 25 chars: room for "운전면허번호: 서울 " between the label and the digits.
        if licence and _near(_LICENSE_LABEL, text, start, start + len(licence), 25):
            out.append((PiiKind.DRIVER_LICENSE, start, start + len(licence), 0.9))


def _find_passports(text: str, label_end: int, out: list[_Candidate]) -> None:
    """Passport-shaped tokens are too generic alone (product codes): only right after a label."""
    for m in _PASSPORT.finditer(text, label_end):
        if m.start() - label_end > 25:
            break
        out.append((PiiKind.PASSPORT, m.start(), m.end(), 0.9))


def _find_emails(text: str, out: list[_Candidate]) -> None:
    # Start just before the first "@": a local part is at most 64 chars.
    for m in _EMAIL.finditer(text, max(0, text.find("@") - 64)):
        out.append((PiiKind.EMAIL, m.start(), m.end(), 0.99))


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


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------


def detect(text: str) -> list[Detection]:
    """Find PII by value format; non-overlapping detections sorted by start."""
    if not text:
        return []
    first = _STAGE1.search(text)
    has_at = "@" in text
    if first is None and not has_at:
        return []  # the common case: names, amounts, dates, codes, plain memos
    scan = text
    if not text.isascii() and _FOLDABLE.search(text):
        scan = text.translate(_FOLD)
        first = _STAGE1.search(scan)

    found: list[_Candidate] = []
    if has_at:
        _find_emails(scan, found)
    if first is not None:
        size = len(scan)
        for m in _STAGE1.finditer(scan, first.start()):
            if m.group("passport"):
                _find_passports(scan, m.end(), found)
            else:  # 2 chars before for "+ 82" / "(02", 3 after for the trailing guards
                _scan_region(scan, max(0, m.start() - 2), min(size, m.end() + 3), found)
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
    if kind is PiiKind.NAME or kind is PiiKind.ADDRESS:
        return " ".join(value.translate(_FOLD).split()).casefold()
    return _ascii_digits(value)  # RRN, FRN, card, account, driver's licence: digits only


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
