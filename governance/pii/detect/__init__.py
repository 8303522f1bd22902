"""Format detectors for personal data (PII) in free text, as a pipeline:
decode, fold, match and validate, with an offset map back to the original
text (see governance.pii.detect.pipeline). governance.pii.detectors
re-exports this API.

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
* RRN / foreigner RN: ``YYMMDD-GNNNNNN`` with any separator above or none,
  also inside a front half written as a date (``90.01.01-1234567``,
  ``9001.01.1234567``); the gender digit is 1-4 (RRN) or 5-8 (FRN); month and
  day must exist (Feb 29 is always allowed). Decision: ``900101.1234567`` is
  also a decimal's shape; it is an RRN unless an aggregate's word (평균, avg,
  sum, ratio, ``=``) or a sign stands right before it and no RRN word is
  near. The old checksum only raises confidence, it never rejects: numbers
  issued since Oct 2020 are random. Corporate registration numbers
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
  (Amex, Diners) with spaces, hyphens or dots, or bare; with dots only they
  must start like a card, as bare runs must (below). Bare runs must also start
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
  (c) A phone's layout (prefix, 3-4 digits, 4 digits, nothing after) with a
  space inside, without context: ``011 045-3854``, ``010 0123 4567``, whose
  exchange starting with 0 no phone has, are the same number as the
  hyphenated form rule (a) masks.
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
  (a case-insensitive test there costs more than the rest of the scan); the
  prefilter stops at an English label in any case and hands the text to the
  pipeline, whose label finders read spaced layouts (``passport: M 1234 5678``
  in a Korean sentence).
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
"""

from governance.pii.detect.match import Detection, normalise
from governance.pii.detect.pipeline import detect, detect_spans, mask_text
from governance.pii.kinds import NORMALISERS, PiiKind

__all__ = ["NORMALISERS", "Detection", "PiiKind", "detect", "detect_spans", "mask_text", "normalise"]
