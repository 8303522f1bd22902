"""Format detectors for personal data (PII) in free text.

Before a tool result (an SQL cell, a memo written in Korean, a JSON string)
reaches the model, personal data is masked by deterministic rules: no NLP, no
LLM. This module is the *format* layer: it finds PII by the shape of the value,
anywhere in a string. Another module replaces each span with a per-conversation
token such as ``[전화번호-3]``, using :func:`normalise` so that the same value
always maps to the same token. The policy prefers masking too much over too
little. Pure Python, stdlib ``re`` only, no Django.

Public API
----------
``PiiKind``
    ``str`` enum of stable machine ids (``"rrn"``, ``"frn"``, ``"phone"``,
    ``"email"``, ``"card"``, ``"account"``, ``"passport"``,
    ``"driver_license"``, ``"name"``, ``"address"``); ``kind.label`` is the
    Korean label (``"전화번호"``). ``NAME`` and ``ADDRESS`` have no format and
    are never detected here; column classification elsewhere uses them.
``Detection(kind, start, end, value, confidence)``
    Frozen dataclass; ``value == text[start:end]``; ``confidence`` in 0..1.
``detect(text) -> list[Detection]``
    Non-overlapping, sorted by ``start``. When candidates overlap, the longer
    span wins, then the higher-priority kind (RRN/FRN > card > passport/licence
    > phone > email > account), then the higher confidence.
``normalise(kind, value) -> str``
    Canonical form: digits only for numeric kinds; phones in domestic form
    (``+82 10-1234-5678``, ``82-10-...``, ``0082...`` -> ``01012345678``);
    e-mail lowercased; passport uppercased without separators; names and
    addresses casefolded with single spaces. NFKC forms (full-width, circled
    digits) are folded and invisible characters dropped first.
``detect_spans(text) -> list[tuple[str, int, int, float]]``
    ``detect`` as plain tuples ``(kind id, start, end, confidence)``, for hot
    paths (governance.pii.masking): no Detection objects, no Enum lookups.
``NORMALISERS``
    ``{kind id: normaliser}``, the functions ``normalise`` dispatches to.
``mask_text(text, replace) -> str``
    Replaces every detection with ``replace(detection)``.

What is detected, and the decisions on ambiguous formats
--------------------------------------------------------
* Normalisation: the detectors read a normalised copy of the text. NFKC
  compatibility forms are folded (full-width ``０１０``, circled ``⓪①⓪``, ``⑩``,
  math and superscript digits, ``＠``, ``﹫``); format characters are removed
  (every Cf: zero-width space/joiners, word joiner, BOM, soft hyphen, bidi
  controls, tags; also CGJ, variation selectors, Hangul fillers); every
  Unicode space (no-break, narrow no-break, thin, hair, figure, en/em,
  ideographic) is a space; Unicode dashes and minus, middle dots (``·``,
  ``ㆍ``, ``・``, ``‧``, ``∙``, ``⋅``, ``•``) and the Hangul vowel ``ㅡ`` that
  Korean writers use as a dash are hyphens. Spans still index the original
  text: a character that expands (``⑩`` -> ``10``) or vanishes is recorded in
  an offset map, and a value covers every invisible character inside it
  (``010\u200b-1234-5678`` is masked whole). Only non-ASCII text pays for
  this; the map is built only when a character changes length.
* Separators: besides hyphen, dot and space, a slash or underscore between
  digits (``010/1234/5678``, ``900101_1234567``): digit groups joined only by
  them are read as hyphen-joined; when the run touches hyphen/dot groups
  (``110-123-456789/110-987-654321``) the slash separates two values. E-mails
  and passports are read without this, since ``/`` and ``_`` are address
  characters. A slash or underscore not between digits keeps gluing a number
  to a code (``ORD_2024_000123``).
* Numbers are delimited with digit lookarounds, never ``\\b``: Hangul is a word
  character for ``re``, so ``전화010-1234-5678로`` would otherwise be missed.
* RRN / foreigner RN: ``YYMMDD-GNNNNNN`` with hyphen, space or nothing (or,
  after normalisation, any separator above but a dot); the
  gender digit is 1-4 (RRN) or 5-8 (FRN); month and day must exist (Feb 29 is
  always allowed). The old checksum only raises confidence, it never rejects:
  numbers issued since Oct 2020 are random. Corporate registration numbers
  (법인등록번호, 6-7 digits) share the layout and are masked too.
* Phones: mobile 010/011/016-019, Seoul 02, area codes 031-033, 041-044,
  051-055, 061-064, 050X, 060/070/080; hyphen, dot, space or no separator;
  ``(02)123-4567`` and ``02)123-4567``; ``+82``/``0082``/``82-`` forms with or
  without ``(0)`` or the trunk 0. The exchange never starts with 0 (none does),
  which keeps ``02 010-1234-5678`` from being read as one number. Business
  numbers 15xx/16xx/18xx-xxxx are detected at low confidence, only hyphenated
  and not followed by 원/년 (``1500-2000원`` is a price range): they identify
  companies, but masking them costs little, while bare 8-digit runs are IDs.
* E-mail: the local part takes every RFC 5322 atom character
  (``!#$%&'*+/=?^_`{|}~-`` and dots) and, for internationalised addresses,
  any Unicode letter or digit (``홍길동@회사.한국``); domain labels are
  letters, digits and hyphens of any script (IDN), the TLD ASCII letters,
  punycode, a Hangul TLD that exists (한국, 삼성, 닷컴, 닷넷; the text after it
  is a particle: ``홍길동@회사.한국으로``) or letters of another script. Any case;
  full-width forms after normalisation. Decisions: a local part does not
  start with a dot or a quote, and ``key='a@b.kr'`` holds the address after
  the quote (otherwise the whole RFC run is taken: ``email=a@b.kr`` masks
  ``email=a@b.kr``, the safe side). Where Hangul meets Latin letters the
  address starts at the change (``문의hong@x.com`` -> ``hong@x.com``); between
  Hangul and digits it does not (``홍길동123@x.com`` is one address). Both
  sides are bounded (64 chars, 8 labels), so matching stays linear. Not
  detected: ``user@localhost``.
* Cards: 13-19 digits, Luhn-valid only; grouped 4-4-4-4(-3) or 4-6-5/4-6-4
  (Amex, Diners) with spaces or hyphens, or bare. Bare runs must also start
  like a card (3-6, 9 for Korean domestic brands, 22-27 for Mastercard
  2-series): with Luhn alone one random long ID in ten, and every Luhn-valid
  YYYYMMDDhhmmss timestamp, would be masked as a card.
* Accounts: (a) without context, 3-4 hyphenated groups totalling 10-14 digits
  (the bank layouts: 국민 6-2-6, 신한 3-3-6, 우리 4-3-6, 하나 3-6-5, 농협 3-4-4-2,
  기업 3-6-2-3, 카카오뱅크 4-2-7, 토스 4-4-4, ...); (b) any 10-16 digit run, bare
  or joined by hyphens/dots, or 2-4 space-separated groups of 10-14 digits,
  when an account word (계좌, 입금, 송금, 은행, 국민, 신한, 우리, 하나, 농협,
  기업, 카카오, 토스, account, bank, ...) is within 20 chars before or 10 after
  (``1234567890123 계좌``, ``110-123-456789 (신한)``), in any case
  (``ACCOUNT``, ``Account No.``). A bank's name alone is context, in Korean or
  English (``Kookmin``, ``Shinhan``, ``Woori``, ``Hana``, ``NH``, ``IBK``, ``KEB``,
  ``KB``, ``SC``, ``KDB``, ``Citi``, ``Kakao``, ``Toss``, ``kbank``, ``씨티``, ``수협``,
  ``새마을금고``, ``우체국``, ``신협``, ``증권``, any ``...은행``/``...뱅크``); a
  place name is a bank only with 은행 (``부산 1234567890`` is not an account).
  Short English names must stand as words (``KB``, not ``desKB``).
* Identifier labels: a number named by a label of a non-personal identifier
  (invoice, waybill/tracking, 송장/운송장, part, P/N, order/주문, SKU, serial,
  S/N, model, ticket, reservation/booking/예약, 사업자(등록번호), customer/member
  number, 고객번호/회원번호, 접수/승인/관리/문서번호, ...) is not masked as an
  account: ``송장번호 123456789012``, ``Invoice No. 2024-000123-45``, ``Part
  12345-67890-12``. "Named" means the label is right before the number, with
  only spaces, punctuation and words for "number" between (``주문번호: ``,
  ``Order #``, ``tracking number: ``), or right after it (``123-4567-8901
  (송장)``); a label further away does not count (``배송지 변경, 연락처
  011-051-9425`` stays an account). Decisions: a value with a format of its
  own is masked whatever the label: a phone, RRN, card (``Order contact
  010-1234-5678``, ``Order #4556789012345672``), and a known bank layout
  (``송장 123456-01-234567``, 6-2-6). When an account word and an identifier
  label are both near, the nearer one names the number; on a tie the account
  wins (masking is the safe side). Customer and member numbers are kept:
  they are the company's own keys, which the agent joins tables on, and
  mean nothing outside the company.
  Decisions: two-group numbers (``10000-20000``, ``2024-000123``) need
  context: they are mostly ranges and serials, and banks do not print
  accounts in two groups. Chains glued to letters (``ORD-2024-000123``) or,
  without context, starting with a date (``2024-01-15-0001``) are not
  accounts. The 3-2-5 layout is a business registration number
  (``123-45-67890``), which identifies a company, so it is kept, unless an
  account word is near and 사업자/business is not. Rule (b) also masks a
  Luhn-invalid 16-digit run next to an account word, and skips amounts
  (``1234567890원``). With an account word near, a run that merely starts like
  a date is masked (``입금계좌 198410248408``, ``20230506679710``: account
  numbers start like dates often enough); only a full, valid YYYYMMDDhhmmss
  timestamp is left alone, and only when the word is a bank name rather than
  an explicit account word (계좌, 입금, 송금, 이체, 통장, account, acct, a/c,
  iban): ``입금 20240115123000`` is masked.
* Passports (``M12345678``, ``M123A4567``, and foreign 1-2 letters + 7-8
  digits) only within 25 chars after a label (여권, passport in any case) or
  12 before one (``M12345678 (여권)``). In non-ASCII text that needs no
  normalisation the label is looked for as passport/Passport/PASSPORT only
  (a case-insensitive test there costs more than the rest of the scan).
  Driver's licences (``11-12-345678-90``, ``서울 12-345678-90``, hyphen/dot or
  bare) only within 25 chars after a label (면허, licence/license, driver, any
  case) or 10 before one. An unlabelled 4-group licence number is still masked,
  as an account (rule a).
* Hex tokens are opaque: no numeric detection starts or ends inside a run of
  ``[0-9A-Fa-f-]`` in which a hex letter touches a digit, or that holds a
  UUID (8-4-4-4-12 hex, any case, braces or not, all-digit ones included).
  Digit lookarounds cannot see this (hex letters are letters, and the run
  reaches the number through hyphens): ``bc65c055-1791-4871-...`` holds no
  phone ``055-1791-4871``, ``...-cf0532182727`` no ``0532182727``.
* Left alone: dates, times, ISO timestamps, amounts, UUIDs and hex ids,
  IPv4/IPv6, version strings, order and product codes with letters, zip
  codes, short numbers, business registration numbers, Luhn-invalid 16-digit
  runs without an account word, numbers named by an identifier label.

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
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass

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
from governance.pii.textforms import NORMALISE as _NORMALISE
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
# Stage 1: one cheap pass over the raw text
# ==========================================================================


def _char_class(code_points: list[int]) -> str:
    """A regex character class body for `code_points`, as ranges."""
    parts = []
    cps = sorted(code_points)
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo, hi = cps[i], cps[j]
        parts.append(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}")
        i = j + 1
    return "".join(parts)


# The BMP characters to normalise, and below (_STAGE1_RAW) every astral one:
# one range costs nothing, while the ~1,100 astral code points in the table
# (math digits, enclosed alphanumerics, tags) as ranges would make every
# search several times slower. An astral character (an emoji too) just sends
# the text through normalisation.
NORMALISABLE_BMP = _char_class([cp for cp in _NORMALISE if cp < 0x10000])
# Characters whose replacement is not one character ("" or "10" for ⑩):
# only these move offsets, so only these are recorded in the offset map.
_RESIZING = re.compile(f"[{_char_class([cp for cp, rep in _NORMALISE.items() if len(rep) != 1])}]")
# Slash and underscore between digits: "010/1234/5678", "900101_1234567".
_DIGIT_SEP = re.compile(r"[0-9][/_][0-9]", re.ASCII)
_SLASHED_RUN = re.compile(r"[0-9]+(?:[/_][0-9]+)+", re.ASCII)
_SLASH_AS_HYPHEN = str.maketrans("/_", "--")
_SLASH_AS_SPACE = str.maketrans("/_", "  ")

# The only regions where a numeric format can be: a run of 9+ digits and
# separators that starts and ends with a digit. A single character-class run
# is what `re` scans fastest (an alternation would disable that); the digit
# count is checked in Python. Amounts (commas), times (colons), short numbers
# and plain text never match, so most cells cost just this search. ASCII
# classes only (a bitmap test per character, much cheaper than Unicode `\d`):
# regions are looked for in normalised text, where full-width digits are ASCII.
#
# A region starts at the first digit of its run: an attempt at a digit that
# follows a digit is cut short by the lookbehind. A bare date (``2024-01-15``,
# also followed by `` 12:``, the hour, which _find_numbers would drop) has 8
# digits and never holds a value: the lookahead skips it in C.
# The first test, 8 more region characters, rejects most digits in prose
# ("3월", "12,000원") at once.
_REGION_TAIL = (
    r"(?=[0-9\-.()+ \t]{8})(?<![0-9][0-9])"
    r"(?![0-9]{3}[-./][0-9][0-9][-./][0-9][0-9](?:(?![-.()+ \t]*[0-9])| [0-9][0-9]?:))"
    r"[0-9\-.()+ \t]{8,}(?<=[0-9])"
)
_STAGE1 = re.compile(f"[0-9]{_REGION_TAIL}")
# Non-ASCII text: the same search also stops at the first character that
# normalisation changes (a one-character match), so one pass finds the regions
# or tells that the text must be normalised first. The leading class is the
# charset `re` skips ahead with; the first branch takes such a character.
# So does any slash or underscore (for 010/1234/5678 in Korean text), and
# _find_all_numbers goes on when it is not between digits: cheaper than
# substring tests on every non-ASCII text (an ASCII needle is widened first)
# or a branch tried at every digit. The search resumes at a region's end, so
# a slash right after a region is seen too.
# The same search also stops (a one-character match) at a hint that the text
# may hide a value from these formats, for the pipeline's decode and fold
# (governance.pii.detect.pipeline): three number words in a row (digits
# spoken in Hangul or Hanja), an escape or tag, a line break before a digit,
# an e-mail's "at" or "dot" in brackets or as a word, a look-alike letter or
# a base64 run touching a digit, a label that names a value on its own.
# Lookaheads only, so the match stays one character; the stop costs nothing
# in text without these (the class is scanned anyway).
_NUMBER_WORDS = "공영빵일이삼사오육륙칠팔구〇零一二三四五六七八九壹貳參"
# After "@": a domain label and a word for "dot" (hong@naver dot com, hong@naver닷컴).
_AT_DOT_WORD = (
    r"[A-Za-z0-9.-]{1,63}(?:(?:[ \t]*[\[({<][ \t]*|[ \t]+)(?:[Dd][Oo][Tt]|punto|point|ponto|punkt)|[ \t]*[닷점쩜])"
)
_WORD_SEP = r"[-. _/~\\\t\n]"  # a separator next to number words
_OTHER_HINT_STARTS = '골앳주외여면닷점쩜~&<%\\\\\r\n"@\\[({aAdD'  # a class body: backslash, CR, LF escaped
# The number words a spoken number can hardly do without (공/영 for 0, and the
# rarer syllables): a run of eight digits all written 일, 이, 사 or 오 is
# (4/10)^8, and those four are the commonest syllables of Korean prose.
_RARE_WORDS = "".join(ch for ch in _NUMBER_WORDS if ch not in "일이사오")
# English labels that name a value on their own (a spaced passport or
# licence number, an RRN's half), any case: in Korean text these letters are
# rare, so a stop at each costs little (ASCII text tests substrings instead).
_LABEL_HINT_STARTS = "pPdDlLrR"
_LABEL_HINT_TAILS = (
    r"(?<=[pP])(?=[aA][sS][sS][pP][oO][rR][tT])|(?<=[dD])(?=[rR][iI][vV][eE][rR])"
    r"|(?<=[lL])(?=[iI][cC][eE][nN][cCsS][eE])|(?<=[rR])(?=[rR][nN]|[eE][sS][iI][dD][eE][nN][tT])"
)
_HINT_STARTS = _NUMBER_WORDS + _OTHER_HINT_STARTS + "OolIA-Zpdr"
_OTHER_HINT_TAILS = (
    r"(?<=[골앳주외여면])(?:(?<=골)(?=뱅)|(?<=앳)|(?<=주)(?=민)|(?<=외)(?=국인)|(?<=여)(?=권)|(?<=면)(?=허))"
    r"|(?<=[닷점쩜])(?:(?<=[A-Za-z0-9].)|(?<=[A-Za-z0-9] .))(?=[ \t]?[A-Za-z컴넷])"  # naver닷컴, naver 점 com
    r"|(?<=[0-9][~\\])(?=[0-9])"  # 010~1234~5678
    r"|(?<=[&<%\\\r\n])(?:(?<=&)(?=#|[A-Za-z]{2,8};)|(?<=<)(?=[A-Za-z/!?])|(?<=%)(?=[0-9A-Fa-f]{2})"
    r"|(?<=\\)(?=u[0-9A-Fa-f]{4})|(?<=[\r\n])(?=[ \t]*[0-9]))"
    r"|(?<=[\"@\[({])(?:(?<=\")(?=@)|(?<=@)(?=[\[ ]|" + _AT_DOT_WORD + r")|(?<= @)"
    r"|(?<=[\[({])(?=[ \t]*(?:[Aa][Tt]|@|[Dd][Oo][Tt]|\.)[ \t]*[\]})]))"
    r"|(?<=[ ][aA])(?=[tT] |rroba |robase )|(?<=[ ][dD])(?=[oO][tT] )"
)
# At a letter: a look-alike letter next to a digit, or a base64 run (of
# text: both letter cases, a capital early). Letters are rare in Korean
# text; at a digit, these tails would cost more than the rest of the search.
_LETTER_HINT_STARTS = "OolIA-Z"
# The first of a run of look-alike letters that stands apart from other
# letters and touches a digit (O1O, 1OO1, l234), not "Hello" or "Iowa".
_LOOKALIKE_RUN = (
    r"(?<![A-Za-z][OolI])(?=[OolI]*(?![A-Za-z]))"
    r"(?:(?<=[0-9][OolI])|(?<=[0-9][-. _/][OolI])|(?<=[0-9][-. _/]{2}[OolI])|(?=[OolI]*[-. _/]{0,3}[0-9]))"
)
_LETTER_HINT_TAILS = (
    rf"(?<=[OolI]){_LOOKALIKE_RUN}"
    r"|(?<=[A-Za-z0-9+/]{3}[A-Z])(?=[A-Za-z0-9+/]{3})(?=[A-Z+/]{0,8}[a-z0-9])"
)
# Branches in order of frequency, each behind one lookbehind on the character
# that started the match: a digit (a region, or a hint at it), a number word,
# another hint, and last a character to normalise (matched alone).
_STAGE1_RAW = re.compile(
    f"[0-9/_{NORMALISABLE_BMP}\\U00010000-\\U0010ffff{_HINT_STARTS}]"
    f"(?:(?<=[0-9]){_REGION_TAIL}"
    f"|(?<=[{_RARE_WORDS}])(?:(?={_WORD_SEP}?[{_NUMBER_WORDS}0-9])|(?<=[{_NUMBER_WORDS}0-9].)"
    f"|(?<=[{_NUMBER_WORDS}0-9]{_WORD_SEP}.))"
    # the common four count between a digit and a number: 010-일이사오-5678,
    # 010--일일일일--0000 (not "15일 오후", a date: no space after); alone, in a run as long as
    # an RRN's front half (이이일이일일, 6 words: prose has no such run) or
    # of four touching a digit (사일일일-0000)
    f"|(?<=[일이사오])(?:(?:(?<=[0-9].)|(?<=[0-9]{_WORD_SEP}.)|(?<=[0-9]{_WORD_SEP}{{2}}.))"
    f"(?=[-._/~]{{0,2}}[{_NUMBER_WORDS}0-9])"
    f"|(?=[{_NUMBER_WORDS}]{{5}}|[{_NUMBER_WORDS}]{{3}}{_WORD_SEP}{{0,2}}[0-9]))"
    f"|(?<=[{_OTHER_HINT_STARTS}])(?:{_OTHER_HINT_TAILS})"
    f"|(?<=[{_LETTER_HINT_STARTS}])(?:{_LETTER_HINT_TAILS})"
    f"|(?<=[{_LABEL_HINT_STARTS}])(?:{_LABEL_HINT_TAILS})"
    f"|(?<![0-9{_HINT_STARTS}]))"
)
# ASCII text: the hints of a hidden value, in one search after the whole-cell
# shortcuts (each branch told apart by a lookbehind on the character that
# started it, so `re` tries the tails only at these characters).
_HINT_ASCII = re.compile(
    r"[&<%\\\r\n\"@\[({~_/\-. OolIA-Z]"
    r"(?:(?<=[&<%\\\r\n\"@\[({~_/])"  # escapes, markup, line breaks, e-mail brackets, odd separators
    r"(?:(?<=&)(?:#|[A-Za-z]{2,8};)|(?<=<)[A-Za-z/!?]|(?<=%)[0-9A-Fa-f]{2}|(?<=\\)u[0-9A-Fa-f]{4}"
    rf"|(?<=[\r\n])[ \t]*[0-9]|(?<=[0-9][~_/\\])[-. _/~\\]*[0-9]|(?<=\")@|(?<=@)(?:[\[ ]|{_AT_DOT_WORD})|(?<= @)"
    r"|(?<=[\[({])[ \t]*(?:[Aa][Tt]|@|[Dd][Oo][Tt]|\.)[ \t]*[\]})])"
    # doubled separators; a dot on one side, a hyphen or space on the other; " at ", " dot "
    r"|(?<=[-. ])(?:(?<=[0-9][-. ])[-. _/]+[0-9]"
    r"|(?<=[0-9][. ])(?<!\+82[. ])(?<!0082[. ])[0-9]{1,7} ?- ?[0-9]"
    r"|(?<=[0-9]-)[0-9]{1,7}[. ][0-9]|(?<=[0-9] -) ?[0-9]{1,7}[. ][0-9]"
    r"|(?<=[0-9] )[0-9]{1,7}\.[0-9]|(?<=[0-9]\.)[0-9]{1,7} [0-9]"
    r"|(?<= )(?:[Aa][Tt]|[Dd][Oo][Tt]|arroba) )"
    # a look-alike letter next to a digit, standing apart from other letters
    rf"|(?<=[OolI]){_LOOKALIKE_RUN}"
    # base64 of text: both letter cases, a capital early
    r"|(?<=[A-Za-z0-9+/]{3}[A-Z])(?=[A-Za-z0-9+/]{3})(?=[A-Z+/]{0,8}[a-z0-9])"
    ")",
    re.ASCII,
)


def _ascii_hint(text: str) -> bool:
    """A hint in ASCII text: the search above, or a label that names a value
    on its own (substring tests on the lowered text cost less than the same
    words as branches of the search)."""
    if _HINT_ASCII.search(text) is not None:
        return True
    lowered = text.lower()
    return (
        "rrn" in lowered
        or "resident" in lowered
        or "passport" in lowered
        or "licen" in lowered
        or ("driver" in lowered)
    )


# Passports have only 7-8 digits: they are looked for after a label instead,
# found with plain substring tests first (much cheaper than a regex).
_PASSPORT_LABEL = re.compile("여권|passport", re.IGNORECASE)

# ==========================================================================
# Stage 2 patterns (ASCII, applied to normalised text)
# ==========================================================================

# Separator inside a phone / RRN / card / licence: hyphen or dot (optionally
# spaced) or one space. Versions (1.2.3) never have the card layouts'
# four-digit groups; a card with dots only must also start like one (as a
# bare run must: rules._card_confidence).
_SEP = r"(?:[ \t]?[-.][ \t]?|[ \t])"
_CSEP = _SEP

# National significant prefixes without the trunk 0, longest first: mobile
# 10-19, Seoul 2, area codes 31-33/41-44/51-55/61-64, 050X, 060/070/080.
_NAT = r"(?:50\d|1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|[678]0)"

# Branches in order of frequency (they start differently, so order never
# changes what matches): domestic, parenthesised area code, international.
_PHONE_BODY = rf"""
    (?:
        0{_NAT}\)?                                                                # 010-..., 02)123-4567
      | \(0{_NAT}\)                                                               # (02)123-4567
      | (?:\+[ \t]?82|00[ \t]?82|82(?=[ \t.-])){_SEP}?(?:\(0\)[ \t]?)?0?{_NAT}\)?   # +82 / 0082 / "82-"
    )
    {_SEP}?[1-9]\d{{2,3}}{_SEP}?\d{{4}}(?!\d)      # no exchange starts with 0: "02 010-..." is not one number
  | (?P<biz>1[568]\d\d[ \t]?-[ \t]?\d{{4}}(?!\d)(?![ \t]*[원년]))   # not "1500-2000원", a price range
"""

# YYMMDD with month 01-12 and day 01-31 (day-in-month is checked in Python),
# then the gender/century digit 1-8. Any separator or none, also inside the
# front half when it is written as a date (90.01.01-1234567, 9001.01.1234567);
# the one decimal-shaped spelling, 900101.1234567, is judged in Python
# (rules._reads_as_decimal).
_RRN_BODY = (
    rf"\d\d{_SEP}?(?:0[1-9]|1[0-2]){_SEP}?(?:0[1-9]|[12]\d|3[01]){_SEP}?[1-8]\d{{6}}(?!\d)"
)

_CARD_BODY = rf"""
    (?P<card16>\d{{4}}(?:{_CSEP}\d{{4}}){{3}})(?:{_CSEP}\d{{3}})?(?!\d)   # 4-4-4-4, 4-4-4-4-3
  | \d{{4}}{_CSEP}\d{{6}}{_CSEP}\d{{4,5}}(?!\d)                          # Amex 4-6-5, Diners 4-6-4
  | (?<![A-Za-z])\d{{13,19}}(?!\d)                                      # bare, not glued to a code
"""

# Digit groups joined by hyphens/dots: accounts and licences are decided in
# Python from the group layout. Not joined by spaces: "입금 1234567890 2024-01-15"
# is two numbers. A chain glued to letters ("ORD-2024-000123",
# "a716-446655440000") is part of a code, and it only starts at its head
# ("1234-5678" inside "010-1234-5678" is not a new chain).
_CHAIN_BEFORE = (
    r"(?<![A-Za-z_])(?<![A-Za-z0-9_][-_/])"
    r"(?<![0-9][-.])(?<![0-9][ \t][-.])(?<![0-9][-.][ \t])(?<![0-9][ \t][-.][ \t])"
)
_CHAIN_AFTER = r"(?![A-Za-z0-9_])(?![-_/][A-Za-z0-9])"
# Possessive: a chain is judged whole, never cut back to a prefix that passes
# the guards ("110-123-456789.5ORD" is a code, not an account + ".5ORD").
_CHAIN_BODY = rf"{_CHAIN_BEFORE}\d++(?:[ \t]?[-.][ \t]?\d++){{0,4}}+{_CHAIN_AFTER}"
# "계좌 110 123 456789": groups with a space between some (spaces also
# separate unrelated numbers), accepted next to an account word, or in a
# phone's layout (rules._spaced_account).
_SPACED_BODY = rf"{_CHAIN_BEFORE}(?<![0-9][ \t])\d{{2,7}}(?:{_SEP}\d{{2,7}}){{1,3}}{_CHAIN_AFTER}"

# The master regex: at each position that does not continue a digit run, every
# format is tried in its own optional lookahead and captured if it matches; the
# final conditional drops positions where nothing matched. One pass in C thus
# yields every candidate of every kind, overlapping ones included, and Python
# only validates them (dates, Luhn, layouts) and resolves overlaps.
_MASTER = re.compile(
    rf"""
    (?<![0-9])(?=[0-9+(])
    (?:(?=(?P<rrn>{_RRN_BODY})))?
    (?:(?=(?P<card>{_CARD_BODY})))?
    (?:(?=(?P<phone>{_PHONE_BODY})))?
    (?:(?=(?P<chain>{_CHAIN_BODY})))?
    (?:(?=(?P<spaced>{_SPACED_BODY})))?
    (?(rrn)|(?(card)|(?(phone)|(?(chain)|(?(spaced)|(?!))))))
    """,
    re.ASCII | re.VERBOSE,
)
# The same formats one at a time, for the common case of a region that is
# exactly one value.
_RRN_RX = re.compile(rf"(?<!\d){_RRN_BODY}", re.ASCII)
_CARD_RX = re.compile(rf"(?<!\d)(?:{_CARD_BODY})", re.ASCII | re.VERBOSE)
_PHONE_RX = re.compile(rf"(?<!\d)(?:{_PHONE_BODY})", re.ASCII | re.VERBOSE)
# The first branch of _PHONE_RX alone (domestic numbers), tried first on text
# that starts with "0": cheaper, and when it matches at all, _PHONE_RX returns
# that same match (its other branches come later and never start with "0"
# except "00 82", tried only after every domestic path failed).
_DOMESTIC_RX = re.compile(rf"(?<!\d)0{_NAT}\)?{_SEP}?[1-9]\d{{2,3}}{_SEP}?\d{{4}}(?!\d)", re.ASCII)
# The usual spellings (one separator, or none), for fullmatch over a whole
# region: a subset of _DOMESTIC_RX whose first match is then this one, for
# the prefixes are tried in the same order and the greedy choices coincide.
_PLAIN_PHONE_RX = re.compile(r"0(?:1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|70)([-. ]?)[1-9][0-9]{2,3}\1[0-9]{4}")
_CHAIN_RX = re.compile(_CHAIN_BODY, re.ASCII)
# A region made of digit groups joined by hyphens/dots only, and a group
# from which a phone can start (0X, 0082, 82, 15xx/16xx/18xx).
_PLAIN_CHAIN = re.compile(r"\d+(?:[-.]\d+)*", re.ASCII)
_PHONE_HEAD = re.compile(r"(?<![0-9])(?:0[1-9]|0082|82|1[568])", re.ASCII)

_PASSPORT_RX = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z]{1,2}\d{7,8}|[A-Za-z]\d{3}[A-Za-z]\d{4})(?![A-Za-z0-9])",
    re.ASCII,
)

# E-mail, matched around each "@": the local part is the run of allowed chars
# right before it (at most 64), the domain is matched right after it. Both are
# bounded, so no input makes this quadratic. The local part takes every RFC
# 5322 atom symbol and, for internationalised addresses (RFC 6531), any
# Unicode letter or digit; a domain label is letters/digits/hyphens of any
# script (IDN). Read on normalised text, so full-width forms are ASCII here.
_EMAIL_LOCAL = re.compile(r"[\w!#$%&'*+/=?^`{|}~.-]{1,64}\Z")
# The same for ASCII, tried first: several times faster, and the same answer
# unless the run reaches a non-ASCII character (see _find_emails).
_EMAIL_LOCAL_ASCII = re.compile(r"[A-Za-z0-9_!#$%&'*+/=?^`{|}~.-]{1,64}\Z", re.ASCII)
# The top-level domain: punycode, ASCII letters (which may be followed by a
# Hangul particle: "hong@example.com으로"), a Hangul TLD from the short list of
# those that exist (the text after it is a particle: "홍길동@회사.한국으로"), or
# the letters of another script.
_EMAIL_DOMAIN = re.compile(
    r"(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.){1,8}"
    r"(?:xn--[A-Za-z0-9-]{1,59}(?![\w-])|[A-Za-z]{2,24}(?![A-Za-z0-9-])|한국|삼성|닷컴|닷넷"
    r"|[^\W\d_A-Za-z\u1100-\u11ff\u3130-\u318f\uac00-\ud7a3]{2,24}(?![\w-]))"
)
# The same domain on ASCII text, where it matches exactly what _EMAIL_DOMAIN
# does (the Hangul and other-script branches cannot match), only faster.
_EMAIL_DOMAIN_ASCII = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?\.){1,8}"
    r"(?:xn--[A-Za-z0-9-]{1,59}(?![A-Za-z0-9_-])|[A-Za-z]{2,24}(?![A-Za-z0-9-]))",
    re.ASCII,
)
# A cell that is exactly one address, as _find_emails would find it: an
# ASCII local part of 1-64 chars not starting with a dot and without quotes
# (see _find_emails), and a domain (whose labels are fixed by the dots, so its
# first match is the whole rest).
_EMAIL_CELL = re.compile(
    rf"[A-Za-z0-9!#$%&*+/=?^_{{|}}~-][A-Za-z0-9!#$%&*+/=?^_{{|}}~.-]{{0,63}}@{_EMAIL_DOMAIN_ASCII.pattern}",
    re.ASCII,  # for ASCII cells only, where the Unicode classes match the same
)

_UUID_CELL = re.compile(rf"{_UUID.pattern}|\{{{_UUID.pattern}\}}", re.ASCII)
# A cell that is one date or timestamp: 2024-01-15, 2024.01.15, 2024-01-15
# 12:34[:56[.123456]][Z|+09:00], 2024-01-15T12:34:56, 20240115123456. Such a
# cell holds nothing (the date has 8 digits, the rest are short groups; a
# fraction of 7+ digits, which could hold a number, is not taken here).
_DATE_CELL = re.compile(
    r"(?:19|20)[0-9][0-9]([-./])[0-9][0-9]\1[0-9][0-9]"
    r"(?:[T ][0-9][0-9]:[0-9][0-9](?::[0-9][0-9](?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9][0-9]:?[0-9][0-9])?)?"
    r"|(?:19|20)[0-9]{12}",
    re.ASCII,
)

# ==========================================================================
# Finders
# ==========================================================================


# Every phone starts with 0, "(0", "+82", "0082", "82" or 15xx/16xx/18xx.
_PHONE_START = frozenset("0(+81")
# A separator after a front half's 2nd, 4th or 6th digit (an RRN), a card's 4th.
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
        if (length == 13 and bare) or (
            not bare
            and length <= 22
            and (text[start + 6] in _RRN_SEPS or text[start + 2] in _RRN_SEPS or text[start + 4] in _RRN_SEPS)
        ):
            m = _RRN_RX.match(text, start)
            if (
                m is not None
                and m.end() == end
                and (hit := _rrn_candidate(m.group()))
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
        if rrn and (hit := _rrn_candidate(rrn)) and not _reads_as_decimal(ctx, start, start + len(rrn)):
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


_DOUBLED_SEPARATORS = re.compile(r"[0-9][-. ]{2}", re.ASCII)
_MIXED_SEPARATORS = re.compile(
    r"(?<!\+8)(?<!008)[0-9][. ][0-9]{1,7} ?- ?[0-9]|[0-9] ?- ?[0-9]{1,7}[. ][0-9]"
    r"|[0-9] [0-9]{1,7}[.][0-9]|[0-9][.][0-9]{1,7} [0-9]",
    re.ASCII,
)


def _odd_separators(scan: str, start: int, end: int) -> bool:
    """Doubled separators, or two of hyphen, dot and space mixed, in a region: for the fold."""
    region = scan[start:end]
    if _DOUBLED_SEPARATORS.search(region):
        return True
    separators = ("-" in region) + ("." in region) + (" " in region)
    return separators > 1 and _MIXED_SEPARATORS.search(scan, max(0, start - 3), end) is not None  # sees "+82"


def _near_digit(scan: str, i: int) -> bool:
    return scan[max(0, i - 2) : i].rstrip(" ")[-1:].isdigit() or scan[i + 1 : i + 3].lstrip(" ")[:1].isdigit()


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


# Where the normalised copy and the text differ in length: sorted
# (normalised offset, text offset, replacement length) of each character whose
# replacement is not one character, and the normalised offsets alone.
_Moves = tuple[list[int], list[tuple[int, int, int]]]


def _normalised(text: str) -> tuple[str, _Moves | None]:
    """The text as the detectors read it (see _normalisation_table), and its offset map."""
    scan = text.translate(_NORMALISE)
    keys: list[int] = []
    moves: list[tuple[int, int, int]] = []
    shift = 0
    for m in _RESIZING.finditer(text):
        i = m.start()
        size = len(_NORMALISE[ord(text[i])])
        keys.append(i + shift)
        moves.append((i + shift, i, size))
        shift += size - 1
    return scan, ((keys, moves) if moves else None)


def _original_offset(moves: _Moves, j: int, end: bool) -> int:
    """The offset in the text of normalised character `j` (its end if `end`).

    A character from an expansion (⑩ -> "10") maps to the whole source
    character; removed characters lie between two mapped ones, so a span
    covers those inside it."""
    keys, records = moves
    k = bisect_right(keys, j) - 1
    if k < 0:
        return j + 1 if end else j
    p, i, size = records[k]
    if j < p + size:
        return i + 1 if end else i
    return i + 1 + (j - p - size) + (1 if end else 0)


def _slashed_run(m: re.Match[str]) -> str:
    """Digit groups joined by "/" or "_": one number (010/1234/5678), unless the
    run touches hyphen/dot groups (110-123-456789/110-987-654321), where the
    slash separates two values."""
    text = m.string
    s, e = m.span()
    joined = (s >= 2 and text[s - 1] in "-." and text[s - 2].isdigit()) or (
        text[e : e + 1] in ("-", ".") and text[e + 1 : e + 2].isdigit()
    )
    return m.group().translate(_SLASH_AS_SPACE if joined else _SLASH_AS_HYPHEN)


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
