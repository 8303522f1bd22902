"""The rules the match stage applies to a candidate number: context words
and labels looked for around it (account words, bank names, identifier
labels), group layouts of banks and licences, hex tokens that are opaque,
validators (Luhn, the RRN checksum, dates) and the per-kind decisions.
governance.pii.detect.patterns holds the patterns, governance.pii.detect.match
the scan; the package's docstring (governance.pii.detect) records the
decisions these rules implement."""

from __future__ import annotations

import re
from operator import mul

from governance.pii.kinds import PiiKind

_RRN = PiiKind.RRN.value
_FRN = PiiKind.FOREIGNER_RN.value
_CARD = PiiKind.CARD.value
_ACCOUNT = PiiKind.ACCOUNT.value
_LICENCE = PiiKind.DRIVER_LICENSE.value

# Candidate: (kind id, start, end, confidence).
_Candidate = tuple[str, int, int, float]

# Context words (lowercase), searched case-insensitively in a short window
# around a number (see _near). Short bank names are included on purpose:
# "국민 1234567890123" is how people write it, and over-masking is the safe side.
_Label = tuple[re.Pattern[str], re.Pattern[str]]
# Every character whose lowercase is or contains an ASCII letter (A-Z, the
# dotted capital I, the Kelvin sign), as one-character alternatives: all
# alternatives then start with a literal, which `re` scans for fastest
# (IGNORECASE, or a character class, makes the search several times slower).
_UPPER_ALTERNATIVES = "|".join([*map(chr, range(0x41, 0x5B)), "\u0130", "\u212a"])


def _label(words: str) -> _Label:
    """(words or any character that lowercases to ASCII, the words alone)."""
    return re.compile(f"{words}|{_UPPER_ALTERNATIVES}"), re.compile(words)


def _words(*words: str) -> str:
    """ASCII words that must not be part of a longer word ("kb", not "desKB")."""
    # Literal first, boundaries after: every alternative still starts with a
    # literal (see _UPPER_ALTERNATIVES). Matched in lowercased windows.
    return "|".join(f"{w}(?<![a-z]{w})(?![a-z])" for w in words)


# Account words, and bank names alone: "국민 1234567890123", "Shinhan 110123456789".
# A place name is a bank only with 은행 (부산은행): "부산 1234567890" is not.
_ACCOUNT_CONTEXT = _label(
    "계좌|입금|송금|이체|환불|예금|통장|은행|뱅크|국민|신한|우리|하나|농협|기업|카카오|토스|"
    "우체국|새마을|금고|신협|수협|축협|씨티|증권|"
    "account|acct|a/c|bank|iban|deposit|refund|transfer|remit|"
    "kookmin|shinhan|woori|nonghyup|suhyup|kakao|toss|citi|kbank|"
    + _words("hana", "kb", "nh", "sc", "ibk", "keb", "kdb")
)
# Labels of identifiers that are not personal: documents, goods, shipments,
# bookings, companies, and the company's own keys for its customers (a
# customer or member number is what the agent joins tables on, and means
# nothing outside the company). See _id_label_wins.
_ID_LABEL = _label(
    "송장|주문|발주|예약|모델|품번|제품|상품|부품|일련|시리얼|티켓|접수|승인|사업자|고객번호|회원번호|"
    "인보이스|청구|견적|출고|배송|택배|운송|등기|관리번호|문서번호|도서|책|"
    "order|invoice|waybill|tracking|courier|serial|s/n|p/n|model|ticket|reservation|booking|confirmation|"
    "customer|member|shipment|parcel|product|business|brn|isbn|issn|"
    + _words("part", "sku", "po", "ref", "lot", "item", "case", "vat", "tax", "book")
)
# Shipment and book labels: a courier's 12-digit waybill is printed 4-4-4,
# the layout of a bank's account too; named by one of these, it is the waybill.
_SHIPMENT_LABEL_BEFORE = re.compile(
    r"(?:송장|택배|배송|운송|등기|도서|책|waybill|tracking|courier|parcel|shipment|isbn|book)"
    r"(?P<gap>(?:[\s:#.=(\[-]|번호|등록|코드|no|number|num|nr|id|code)*)\Z"
)
_BUSINESS_CONTEXT = _label("사업자|business|brn")
_LICENSE_LABEL = _label("면허|licen[cs]e|driver")
_AMOUNT_AFTER = re.compile(r"[ \t]*(?:원|won|krw)", re.IGNORECASE)

# Group lengths of well-known bank layouts (higher confidence).
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
# Driver's licence: [region 2] year 2, serial 6, check 2.
_LICENCE_LAYOUTS = frozenset({(2, 2, 6, 2), (2, 6, 2), (12,), (10,)})

_NON_DIGIT = re.compile(r"\D", re.ASCII)
_DIGIT_GROUP = re.compile(r"\d+", re.ASCII)
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_RRN_WEIGHTS = (2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5)
_RRN_WEIGHT_SUM = sum(_RRN_WEIGHTS)

# Account words that name an account or a transfer (not just a bank): next
# to one of these, even a valid YYYYMMDDhhmmss run is masked as an account.
_EXPLICIT_ACCOUNT = _label("계좌|입금|송금|이체|통장|account|acct|a/c|iban")

# Hex tokens (UUIDs, hashes, hex ids) are opaque: no numeric detection may
# start or end inside one. A hex token is a run of [0-9A-Fa-f-] in which a hex
# letter touches a digit ("bc65c055-1791-4871-...", "cf0532182727"), or that
# holds a UUID (8-4-4-4-12 hex, any case; braces are outside the run anyway),
# which also covers all-digit UUIDs. Digit lookarounds cannot see this: hex
# letters are letters, and the run can reach the number through hyphens.
_HEX_CHARS = frozenset("0123456789abcdefABCDEF-")
_HEX_RUN = re.compile(r"[0-9A-Fa-f-]+", re.ASCII)
_HEX_GLUE = re.compile(r"[A-Fa-f][0-9]|[0-9][A-Fa-f]", re.ASCII)
_UUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", re.ASCII)

# ==========================================================================
# Validators
# ==========================================================================


# Luhn: every second digit from the right is doubled, and a doubled digit
# counts as the sum of its digits (7 -> 14 -> 5).
_LUHN_DOUBLED = str.maketrans("0123456789", "0246813579")


def _luhn_ok(digits: str) -> bool:
    """`digits`: ASCII digits only. Sums in C (bytes of the digits, minus "0")."""
    reverse = digits[::-1]
    total = sum(reverse[::2].encode()) + sum(reverse[1::2].translate(_LUHN_DOUBLED).encode())
    return (total - 48 * len(digits)) % 10 == 0


def _rrn_checksum_ok(digits: str, foreigner: bool) -> bool:
    total = sum(map(mul, digits[:12].encode(), _RRN_WEIGHTS)) - 48 * _RRN_WEIGHT_SUM  # bytes minus "0"
    return ((13 if foreigner else 11) - total % 11) % 10 == ord(digits[12]) - 48


def _is_date(year4: str, month: str, day: str) -> bool:
    """YYYY MM DD with a plausible year (1900-2099)."""
    if len(year4) != 4 or year4[:2] not in ("19", "20") or len(month) != 2 or len(day) != 2:
        return False
    m = int(month)
    return 1 <= m <= 12 and 1 <= int(day) <= _DAYS_IN_MONTH[m]


def _starts_with_date(groups: list[str]) -> bool:
    """2024-01-15-0001, 20240115-0001, 20240115123000: timestamps and date-based serials."""
    if groups[0][:2] not in ("19", "20"):
        return False
    if len(groups) >= 3 and _is_date(groups[0], groups[1], groups[2]):
        return True
    first = groups[0]
    return len(first) >= 8 and _is_date(first[:4], first[4:6], first[6:8])


def _is_full_timestamp(groups: list[str]) -> bool:
    """YYYYMMDDhhmmss (14 digits, however grouped) with a valid date and time of day.

    Only this is unambiguous: a 10-16 digit run that merely starts with a date
    (``198410248408``, ``20230506679710``) is as likely an account number."""
    digits = groups[0] if len(groups) == 1 else "".join(groups)
    return (
        len(digits) == 14
        and _is_date(digits[:4], digits[4:6], digits[6:8])
        and digits[8:10] < "24"
        and digits[10:12] < "60"
        and digits[12:14] < "60"
    )


# Per detect() call: [text, hex token spans (None until needed)].
_Context = list


def _context(text: str) -> _Context:
    return [text, None]


def _near(label: _Label, ctx: _Context, start: int, end: int, before: int, after: int = 0) -> bool:
    """Does `label` occur within `before` chars before the span (or `after` chars after it)?

    Searched in one window, span included: the span holds only digits and
    separators, which no label contains, so a hit lies wholly before or after
    it. Case-insensitive: the window is lowercased (a slice and lower() cost
    more than the search) only when it holds a character that lowercases to
    an ASCII letter, which the first search stops at."""
    lo = max(0, start - before)
    hi = end + after
    m = label[0].search(ctx[0], lo, hi)
    if m is None:
        return False
    if m.end() - m.start() > 1:
        return True  # a word (every word has 2+ characters)
    return label[1].search(ctx[0][lo:hi].lower()) is not None


def _gap(label: _Label, text: str, start: int, end: int, before: int, after: int) -> int | None:
    """Characters between the span and the nearest `label` within the windows, or None."""
    best = None
    lo = max(0, start - before)
    if lo < start:
        window = text[lo:start].lower()
        last = None
        for last in label[1].finditer(window):  # noqa: B007 - the last one is the nearest
            pass
        if last is not None:
            best = len(window) - last.end()
    if after:
        m = label[1].search(text[end : end + after].lower())
        if m is not None and (best is None or m.start() < best):
            best = m.start()
    return best


# What may stand between an identifier label and the number it names:
# spaces, punctuation and the words for "number" ("주문번호: ", "사업자등록번호 ",
# "Invoice No. ", "Order #", "tracking number: ", "Part "), and between the
# number and a label after it ("123-4567-8901 (송장)"). The label before is
# matched up to the end of the window, so overlapping words ("운송장": 운송,
# 송장) are all tried.
_LABEL_BEFORE = re.compile(
    rf"(?:{_ID_LABEL[1].pattern})(?P<gap>(?:[\s:#.=(\[-]|번호|등록|코드|no|number|num|nr|id|code)*)\Z"
)
_LABEL_GAP_AFTER = re.compile(r"[\s(\[:-]*")


def _id_label_wins(ctx: _Context, start: int, end: int) -> bool:
    """Is this number named by an identifier label (주문번호, Invoice No., 송장, Part)?

    The label must name it: right before it (within 20 chars, with only
    spaces, punctuation and words for "number" between) or right after it.
    An account word nearer still wins, and so does one as near (a tie goes
    to masking, the safe side)."""
    if not _near(_ID_LABEL, ctx, start, end, 20, 8):
        return False  # the usual case: one search
    text = ctx[0]
    lo = max(0, start - 20)
    window = text[lo:start].lower()
    m = _LABEL_BEFORE.search(window)
    if m is not None:
        id_gap = len(m.group("gap"))
    else:
        window = text[end : end + 8].lower()
        m = _ID_LABEL[1].search(window)
        if m is None or not _LABEL_GAP_AFTER.fullmatch(window, 0, m.start()):
            return False
        id_gap = m.start()
    account_gap = _gap(_ACCOUNT_CONTEXT, text, start, end, 20, 10)
    return account_gap is None or id_gap < account_gap


def _shipment_named(ctx: _Context, start: int, end: int) -> bool:
    """Is the number right after a shipment or book label, with no account word nearer?"""
    window = ctx[0][max(0, start - 20) : start].lower()
    m = _SHIPMENT_LABEL_BEFORE.search(window)
    if m is None:
        return False
    account_gap = _gap(_ACCOUNT_CONTEXT, ctx[0], start, end, 20, 10)
    return account_gap is None or len(m.group("gap")) < account_gap


def opaque_runs(text: str) -> list[tuple[int, int]]:
    """Spans of the hex tokens in `text` (see _HEX_RUN): linear in len(text)."""
    runs = []
    for m in _HEX_RUN.finditer(text):
        s, e = m.span()
        if e - s > 1 and (_HEX_GLUE.search(text, s, e) or (e - s >= 36 and _UUID.search(text, s, e))):
            runs.append((s, e))
    return runs


def _overlaps(runs: list[tuple[int, int]], start: int, end: int) -> bool:
    for s, e in runs:
        if s < end and start < e:
            return True
    return False


# ==========================================================================
# Candidate rules
# ==========================================================================


# 4-2-7 joined by hyphens is 카카오뱅크's account layout, and a front half
# split YYMM-DD reads the same: the account rules judge it (a dotted 9001.01-
# or spaced split stays an RRN), unless an RRN word names it (주민번호
# 9001-01-1234567) and no account word stands nearer.
_KAKAO_LAYOUT = re.compile(r"[0-9]{4}[ \t]?-[ \t]?[0-9]{2}[ \t]?-[ \t]?[0-9]{7}", re.ASCII)


def _rrn_candidate(value: str, ctx: _Context | None = None, start: int = 0) -> tuple[str, float] | None:
    if (
        len(value) > 14
        and value[4] in "- \t"
        and _KAKAO_LAYOUT.fullmatch(value)
        and not (ctx is not None and _rrn_named(ctx, start, start + len(value)))
    ):
        return None
    digits = value.replace("-", "").replace(" ", "")
    if not digits.isdigit():
        digits = _NON_DIGIT.sub("", digits)
    if int(digits[4:6]) > _DAYS_IN_MONTH[int(digits[2:4])]:  # Feb 29 always passes: century unknown
        return None
    foreigner = digits[6] in "5678"
    kind = _FRN if foreigner else _RRN
    if _rrn_checksum_ok(digits, foreigner):
        return kind, 0.99
    # Numbers issued since Oct 2020 are random: the checksum never rejects.
    return kind, (0.9 if len(value) > 13 else 0.8)


# A dotted RRN written like a decimal (900101.1234567) is an RRN unless what
# stands right before reads it as a number: an aggregate's word or a sign
# (평균 900101.1234567, AVG(x) = ..., -900101.1234567). An RRN word nearer wins.
_DECIMAL_SHAPE = re.compile(r"[0-9]{6}\.[0-9]{7}", re.ASCII)
_DECIMAL_BEFORE = re.compile(
    r"(?:평균|합계|비율|=|(?<![a-z])(?:avg|average|mean|sum|total|median|ratio|rate|std)(?![a-z]))[^0-9]{0,12}\Z"
    r"|[-+−]\Z"
)
_RRN_WORDS = _label("주민|외국인|rrn|resident|생년월일")


def _rrn_named(ctx: _Context, start: int, end: int) -> bool:
    """An RRN word near the number, and no account word nearer (a tie is the RRN's: the graver kind)."""
    if not _near(_RRN_WORDS, ctx, start, end, 20, 10):
        return False
    rrn_gap = _gap(_RRN_WORDS, ctx[0], start, end, 20, 10)
    account_gap = _gap(_ACCOUNT_CONTEXT, ctx[0], start, end, 20, 10)
    return rrn_gap is not None and (account_gap is None or rrn_gap <= account_gap)


def _reads_as_decimal(ctx: _Context, start: int, end: int) -> bool:
    text = ctx[0]
    if text[start + 6 : start + 7] != "." or not _DECIMAL_SHAPE.fullmatch(text, start, end):
        return False
    if _near(_RRN_WORDS, ctx, start, end, 20, 10):
        return False
    return _DECIMAL_BEFORE.search(text[max(0, start - 20) : start].lower()) is not None


def _card_confidence(value: str) -> float | None:
    if not value.isdigit():
        if (
            "-" not in value
            and " " not in value
            and "\t" not in value
            and not (value[0] in "34569" or "22" <= value[:2] <= "27")
        ):
            return None  # dots only: read like a bare run
        return 0.95 if _luhn_ok(_NON_DIGIT.sub("", value)) else None
    # A bare run must also start like a card number (see the module docstring).
    if value[0] in "34569" or "22" <= value[:2] <= "27":
        return 0.85 if _luhn_ok(value) else None
    return None


def _phone_confidence(value: str, business: bool) -> float:
    if business:
        return 0.6
    if value.startswith("01"):
        return 0.95  # mobile
    return 0.75 if value.isdigit() else 0.9  # a bare landline looks like an ID more often


def _chain_candidate(text: str, start: int, end: int, taken: int, ctx: _Context) -> _Candidate | None:
    """Classify a hyphen/dot digit chain that no stronger rule (phone, RRN, card) covers."""
    if end <= taken:
        return None
    value = text[start:end]
    if value.isdigit():
        n_digits = end - start
        if n_digits < 10 or n_digits > 16:
            return None
        if (n_digits == 10 or n_digits == 12) and _near(_LICENSE_LABEL, ctx, start, end, 25, 10):
            return _LICENCE, start, end, 0.9
        if _account_word_near(text, start, end, [value], n_digits, ctx):
            return _ACCOUNT, start, end, 0.7
        return None
    groups = value.split("-")
    hyphens_only = "".join(groups).isdigit()
    if not hyphens_only:
        groups = _DIGIT_GROUP.findall(value)
    layout = tuple(map(len, groups))
    n_digits = sum(layout)
    if n_digits < 10:
        return None
    if layout in _LICENCE_LAYOUTS and _near(_LICENSE_LABEL, ctx, start, end, 25, 10):
        # 25 chars: room for "운전면허번호: 서울 " between the label and the digits.
        return _LICENCE, start, end, 0.9
    # 3-4 groups joined by hyphens, 10-14 digits: an account even without
    # context. Two groups are ranges and serials (10000-20000, 2024-000123);
    # 3-2-5 is a business registration number (a company, not a person).
    if (
        3 <= len(layout) <= 4
        and n_digits <= 14
        and 2 <= layout[0] <= 6
        and max(layout) <= 7
        and layout != (3, 2, 5)
        and (hyphens_only or "." not in value)
        and not _starts_with_date(groups)
    ):
        if layout in _BANK_LAYOUTS:
            if layout == (4, 4, 4) and _shipment_named(ctx, start, end):
                return None  # "운송장번호 1234-5678-9012", "책 번호 1234-5678-9012"
            return _ACCOUNT, start, end, 0.85  # an account format of its own: masked whatever the label
        if not _id_label_wins(ctx, start, end):
            return _ACCOUNT, start, end, 0.6
        return None  # "Invoice No. 2024-000123-45", "Part 12345-67890-12"
    if n_digits <= 16 and _account_word_near(text, start, end, groups, n_digits, ctx):
        return _ACCOUNT, start, end, 0.7
    return None


def _account_word_near(text: str, start: int, end: int, groups: list[str], n_digits: int, ctx: _Context) -> bool:
    """Any 10-16 digit run is an account when an account word is near (but not 1234567890원).

    Over-masking is the safe side: a run that starts like a date is still an
    account here (``입금계좌 198410248408``). Only a full, valid timestamp
    (YYYYMMDDhhmmss) is let go, and only when the nearby word is a bank name
    rather than an explicit account word (계좌, 입금, account, ...)."""
    if not _near(_ACCOUNT_CONTEXT, ctx, start, end, 20, 10) or _AMOUNT_AFTER.match(text, end):
        return False
    if _is_full_timestamp(groups) and not _near(_EXPLICIT_ACCOUNT, ctx, start, end, 20, 10):
        return False
    # 123-45-67890 next to 사업자 stays a business registration number.
    if len(groups) == 3 and n_digits == 10 and _near(_BUSINESS_CONTEXT, ctx, start, end, 25, 10):
        return False
    # "국민은행 결제, 주문번호 123456789012": the nearer label names the number.
    return not _id_label_wins(ctx, start, end)


# A phone's layout: a prefix (see patterns._NAT), 3-4 digits and 4, and no
# further group. Joined by hyphens it is an account by rule (a); with a space
# inside it is the same number (011 045-3854: an exchange starting with 0 is
# no phone to the phone pattern), so it is masked without an account word.
_PHONE_PREFIX = re.compile(r"0(?:50[0-9]|1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|[678]0)", re.ASCII)
_NEXT_GROUP = re.compile(r"[ \t]?[-.]?[ \t]?[0-9]", re.ASCII)


def _spaced_account(text: str, start: int, end: int, ctx: _Context) -> bool:
    """Digit groups with a space between some: an account next to an account
    word, or in a phone's layout (the hyphenated form is already an account)."""
    if " " not in text[start:end] and "\t" not in text[start:end]:
        return False  # joined by hyphens and dots only: the chain rules judge it
    groups = _DIGIT_GROUP.findall(text, start, end)
    if not 10 <= sum(len(g) for g in groups) <= 14:
        return False
    if (
        len(groups) == 3
        and 3 <= len(groups[1]) <= 4
        and len(groups[2]) == 4
        and _PHONE_PREFIX.fullmatch(groups[0])
        and not _NEXT_GROUP.match(text, end)
        and not _id_label_wins(ctx, start, end)
    ):
        return True
    return _account_word_near(text, start, end, groups, 0, ctx)
