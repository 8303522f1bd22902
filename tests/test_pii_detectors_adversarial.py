"""Adversarial spellings for the PII format detectors (governance.pii.detectors):
Unicode normalisation, invisible characters, unusual separators, RFC and
internationalised e-mail, bank names and labels as the only context, labels
after the value, and identifier labels that keep a number unmasked.

Every positive case asserts the exact span: the detected value is the whole
written value, separators and invisible characters inside it included, and
it indexes the original text (the masker replaces text[start:end])."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from governance.pii.detectors import PiiKind, detect, detect_spans, mask_text, normalise

K = PiiKind
FAST = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

ZWSP, ZWNJ, ZWJ, WJ, BOM, SHY = "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"
NBSP, NNBSP, THIN, HAIR, FIGURE, EN, EM, IDEO = (
    "\u00a0",
    "\u202f",
    "\u2009",
    "\u200a",
    "\u2007",
    "\u2002",
    "\u2003",
    "\u3000",
)
MIDDLE_DOTS = ["\u00b7", "\u318d", "\u30fb", "\u2027", "\u2219"]


def only(text: str) -> tuple[PiiKind, str]:
    """The single detection in `text`, as (kind, value)."""
    dets = detect(text)
    assert len(dets) == 1, [(d.kind, d.value) for d in dets]
    det = dets[0]
    assert text[det.start : det.end] == det.value
    return det.kind, det.value


def assert_masked(text: str, kind: PiiKind, value: str) -> None:
    assert only(text) == (kind, value)
    masked = mask_text(text, lambda d: "[X]")
    assert masked == text.replace(value, "[X]", 1)


# --------------------------------------------------------------------------
# Separator classes x kinds
# --------------------------------------------------------------------------

SEPARATORS = ["/", "_", ".", *MIDDLE_DOTS, NBSP, NNBSP, THIN, HAIR, FIGURE, EN, EM, IDEO, "\u2013", "\u2212"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_phone_with_any_separator(sep: str) -> None:
    value = f"010{sep}1234{sep}5678"
    assert_masked(f"연락처 {value} 입니다", K.PHONE, value)


@pytest.mark.parametrize("sep", [s for s in SEPARATORS if s != "."], ids=lambda s: f"U+{ord(s):04X}")
def test_rrn_with_any_separator(sep: str) -> None:
    value = f"900101{sep}1234568"
    assert_masked(f"주민번호 {value}", K.RRN, value)


@pytest.mark.parametrize("sep", [s for s in SEPARATORS if s != "."], ids=lambda s: f"U+{ord(s):04X}")
def test_card_with_any_separator(sep: str) -> None:
    value = sep.join(["4556", "7890", "1234", "5672"])
    assert_masked(f"card {value} paid", K.CARD, value)


@pytest.mark.parametrize("sep", ["/", "_", *MIDDLE_DOTS, "\u2013"], ids=lambda s: f"U+{ord(s):04X}")
def test_account_with_any_separator(sep: str) -> None:
    value = sep.join(["110", "123", "456789"])
    assert_masked(f"신한 {value}", K.ACCOUNT, value)


@pytest.mark.parametrize("sep", ["/", "_", "\u00b7"], ids=lambda s: f"U+{ord(s):04X}")
def test_licence_with_any_separator(sep: str) -> None:
    value = sep.join(["11", "12", "345678", "90"])
    assert_masked(f"운전면허 {value}", K.DRIVER_LICENSE, value)


def test_slash_between_two_values_separates_them() -> None:
    text = "110-123-456789/110-987-654321"
    assert [(d.kind, d.value) for d in detect(text)] == [
        (K.ACCOUNT, "110-123-456789"),
        (K.ACCOUNT, "110-987-654321"),
    ]
    text = "010-1234-5678/010-2345-6789"
    assert [d.value for d in detect(text)] == ["010-1234-5678", "010-2345-6789"]


# --------------------------------------------------------------------------
# Invisible characters and NFKC forms
# --------------------------------------------------------------------------

INVISIBLE = [ZWSP, ZWNJ, ZWJ, WJ, BOM, SHY, "\u2066", "\u202e", "\u034f", "\ufe0f", "\U000e0041"]


@pytest.mark.parametrize("ch", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_invisible_characters_inside_a_phone(ch: str) -> None:
    value = f"010{ch}-1234-56{ch}78"
    assert_masked(f"고객 {value}로 연락", K.PHONE, value)


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("010\u200b-1234-5678", K.PHONE, "010\u200b-1234-5678"),
        ("010\u200b1234\u200b5678", K.PHONE, "010\u200b1234\u200b5678"),
        ("9001011\u200c234568", K.RRN, "9001011\u200c234568"),
        ("4556\u00ad7890\u00ad1234\u00ad5672", K.CARD, "4556\u00ad7890\u00ad1234\u00ad5672"),
        ("계좌 1234\u20605678\u20609012", K.ACCOUNT, "1234\u20605678\u20609012"),
        ("hong\u200b@example.com", K.EMAIL, "hong\u200b@example.com"),
        ("여권 M123\u200b45678", K.PASSPORT, "M123\u200b45678"),
    ],
)
def test_zero_width_insertions(text: str, kind: PiiKind, value: str) -> None:
    assert_masked(text, kind, value)


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("０１０－１２３４－５６７８", K.PHONE, "０１０－１２３４－５６７８"),
        ("⓪①⓪-①②③④-⑤⑥⑦⑧", K.PHONE, "⓪①⓪-①②③④-⑤⑥⑦⑧"),
        ("𝟎𝟏𝟎-𝟏𝟐𝟑𝟒-𝟓𝟔𝟕𝟖 연락", K.PHONE, "𝟎𝟏𝟎-𝟏𝟐𝟑𝟒-𝟓𝟔𝟕𝟖"),  # math bold digits (astral)
        ("주민 ９００１０１－１２３４５６８", K.RRN, "９００１０１－１２３４５６８"),
        ("⑨⓪⓪①⓪①-①②③④⑤⑥⑧", K.RRN, "⑨⓪⓪①⓪①-①②③④⑤⑥⑧"),
        ("계좌 ⑪⓪-①②③-④⑤⑥⑦⑧⑨", K.ACCOUNT, "⑪⓪-①②③-④⑤⑥⑦⑧⑨"),  # ⑪ is "11": one char, two digits
        ("ＰＡＳＳＰＯＲＴ Ｍ１２３４５６７８", K.PASSPORT, "Ｍ１２３４５６７８"),
        ("전화:¹⁰¹²³⁴⁵⁶⁷⁸", K.PHONE, "¹⁰¹²³⁴⁵⁶⁷⁸"),  # 0 is "⁰"
    ],
)
def test_nfkc_forms(text: str, kind: PiiKind, value: str) -> None:
    text = text.replace("¹⁰¹²³⁴⁵⁶⁷⁸", "⁰¹⁰¹²³⁴⁵⁶⁷⁸")
    value = value.replace("¹⁰¹²³⁴⁵⁶⁷⁸", "⁰¹⁰¹²³⁴⁵⁶⁷⁸")
    assert_masked(text, kind, value)


def test_expansion_and_removal_keep_later_offsets_right() -> None:
    # ⑩ becomes two characters and the ZWSPs none: the e-mail after them
    # must still be cut from the original text exactly.
    text = "⑩\u200b\u200b번 메모 hong@example.com 끝"
    assert only(text) == (K.EMAIL, "hong@example.com")


def test_normalised_spellings_share_one_canonical_form() -> None:
    spellings = ["010-1234-5678", "010\u200b-1234-5678", "⓪①⓪-①②③④-⑤⑥⑦⑧", "010/1234/5678", "010·1234·5678"]
    assert {normalise(K.PHONE, s) for s in spellings} == {"01012345678"}
    assert normalise(K.EMAIL, "ＨＯＮＧ＠ＥＸＡＭＰＬＥ．ＣＯＭ") == "hong@example.com"
    assert normalise(K.EMAIL, "hong\u200b@example.com") == "hong@example.com"


# --------------------------------------------------------------------------
# E-mail
# --------------------------------------------------------------------------

EMAILS = [
    ("o'brien@example.com", "o'brien@example.com"),
    ("메일 user!def#xyz@example.org 확인", "user!def#xyz@example.org"),
    ("a$b%c&d*e@example.com", "a$b%c&d*e@example.com"),
    ("first/last=x?y^z@example.co.kr", "first/last=x?y^z@example.co.kr"),
    ("{tag}|`q`~@example.com", "{tag}|`q`~@example.com"),
    ("_under_score_@example.com", "_under_score_@example.com"),
    ("홍길동@회사.한국", "홍길동@회사.한국"),
    ("문의는 홍길동@회사.한국으로", "홍길동@회사.한국"),
    ("user@예시.kr", "user@예시.kr"),
    ("담당 user@예시.한국 입니다", "user@예시.한국"),
    ("홍길동123@naver.com", "홍길동123@naver.com"),
    ("HONG.GILDONG@EXAMPLE.CO.KR", "HONG.GILDONG@EXAMPLE.CO.KR"),
    ("ＨＯＮＧ＠ＥＸＡＭＰＬＥ．ＣＯＭ", "ＨＯＮＧ＠ＥＸＡＭＰＬＥ．ＣＯＭ"),
    ("hong﹫example.com", "hong﹫example.com"),  # small commercial at
    ("email='hong@x.com'", "hong@x.com"),
    ("'hong@example.com'", "hong@example.com"),
    ("пример@почта.рф", "пример@почта.рф"),
]


@pytest.mark.parametrize(("text", "value"), EMAILS)
def test_emails(text: str, value: str) -> None:
    assert_masked(text, K.EMAIL, value)


def test_email_matching_stays_linear() -> None:
    import time

    for text in [
        "a" * 50_000 + "@",
        "!" * 50_000 + "@x.com",
        ("a." * 25_000) + "@" + "b." * 20_000,
        "홍" * 50_000 + "@",
    ]:
        start = time.perf_counter()
        detect_spans(text)
        assert time.perf_counter() - start < 0.5, text[:20]


# --------------------------------------------------------------------------
# Context: bank names alone, labels after the value, any case
# --------------------------------------------------------------------------

CONTEXT = [
    ("국민은행 123456789012", K.ACCOUNT, "123456789012"),
    ("KB 123-456-789012", K.ACCOUNT, "123-456-789012"),
    ("신한 110123456789", K.ACCOUNT, "110123456789"),
    ("카카오뱅크 3333-01-1234567", K.ACCOUNT, "3333-01-1234567"),
    ("Kookmin 123456789012", K.ACCOUNT, "123456789012"),
    ("Shinhan Bank 110123456789", K.ACCOUNT, "110123456789"),
    ("WOORI 1002345678901", K.ACCOUNT, "1002345678901"),
    ("Hana 12345678901234", K.ACCOUNT, "12345678901234"),
    ("NH 3019234567891", K.ACCOUNT, "3019234567891"),
    ("IBK 12345678901234", K.ACCOUNT, "12345678901234"),
    ("Toss Bank 100012345678", K.ACCOUNT, "100012345678"),
    ("SC제일 12345678901", K.ACCOUNT, "12345678901"),
    ("씨티 1234567890", K.ACCOUNT, "1234567890"),
    ("우체국 123456789012", K.ACCOUNT, "123456789012"),
    ("새마을금고 9003456789012", K.ACCOUNT, "9003456789012"),
    ("부산은행 1012345678901", K.ACCOUNT, "1012345678901"),
    ("110-123-456789 (신한)", K.ACCOUNT, "110-123-456789"),
    ("1234567890123 계좌", K.ACCOUNT, "1234567890123"),
    ("123456789012 (Kookmin Bank)", K.ACCOUNT, "123456789012"),
    ("ACCOUNT 1234567890", K.ACCOUNT, "1234567890"),
    ("Account No. 1234567890", K.ACCOUNT, "1234567890"),
    ("01012345678 is my phone", K.PHONE, "01012345678"),
    ("PASSPORT M12345678", K.PASSPORT, "M12345678"),
    ("pAsSpOrT M12345678", K.PASSPORT, "M12345678"),
    ("M12345678 (여권)", K.PASSPORT, "M12345678"),
    ("S12345678 passport", K.PASSPORT, "S12345678"),
    ("LICENSE 11-12-345678-90", K.DRIVER_LICENSE, "11-12-345678-90"),
    ("11-12-345678-90 면허", K.DRIVER_LICENSE, "11-12-345678-90"),
    ("Order contact 010-1234-5678", K.PHONE, "010-1234-5678"),
    ("주문번호 900101-1234568", K.RRN, "900101-1234568"),  # a format of its own wins over the label
    ("Order #4556789012345672", K.CARD, "4556789012345672"),
    ("송장 123456-01-234567", K.ACCOUNT, "123456-01-234567"),  # a bank layout is an account format
    ("주문 취소, 환불계좌 1234567890123", K.ACCOUNT, "1234567890123"),  # the account word is nearer
]


@pytest.mark.parametrize(("text", "kind", "value"), CONTEXT)
def test_context(text: str, kind: PiiKind, value: str) -> None:
    assert_masked(text, kind, value)


# --------------------------------------------------------------------------
# Must stay unmasked
# --------------------------------------------------------------------------

KEPT = [
    "2024/01/15",
    "15/01/2024 10:30",
    "2024\u00b701\u00b715",
    "12:34:56",
    "1,234,567원",
    "₩１２，０００",
    "v1.2.3",
    "192.168.0.1",
    "550e8400-e29b-41d4-a716-446655440000",
    "송장번호 123456789012",
    "운송장 123-4567-8901",
    "Invoice No. 2024-000123-45",
    "Order #1234567890",
    "Part 12345-67890-12",
    "P/N: 12345-67890-12",
    "주문번호: 2024-0115-000123",
    "SKU 12345-678-90123",
    "Serial No. 1234-5678-90",
    "Tracking number: 123-4567-890123",
    "예약번호 1234-567890-12",
    "사업자등록번호 1234567890",
    "사업자등록번호 123-45-67890",
    "고객번호 12345-678-9012",
    "123-4567-8901 (송장)",
    "page 1/2/3",
    "file_2024_01_15.csv",
    "ORD_2024_000123",
    "서울·부산·대구",
    "주\u200b문 완료",
]


@pytest.mark.parametrize("text", KEPT)
def test_kept(text: str) -> None:
    assert detect(text) == [], [(d.kind, d.value) for d in detect(text)]


def test_identifier_label_must_name_the_number() -> None:
    # "배송" is far from the number and does not name it: the 3-3-4 chain stays an account.
    text = "배송지 변경, 연락처 011-051-9425로 회신"
    assert only(text) == (K.ACCOUNT, "011-051-9425")


# --------------------------------------------------------------------------
# Property: random invisible insertions and separators
# --------------------------------------------------------------------------

SEP_CHOICES = ["-", " ", "/", "_", "\u00b7", "\u318d", NBSP, NNBSP, THIN, IDEO, "\u2013", ""]
INSERTS = [ZWSP, ZWNJ, ZWJ, WJ, BOM, SHY]


def _spell(groups: list[str], sep: str, inserts: list[tuple[int, str]]) -> str:
    """Join the groups with `sep`, then put invisible characters after some digits."""
    text = sep.join(groups)
    digit_positions = [i for i, ch in enumerate(text) if ch.isdigit()][:-1]  # never after the last digit
    for where, ch in sorted(inserts, reverse=True):
        pos = digit_positions[where % len(digit_positions)] + 1
        text = text[:pos] + ch + text[pos:]
    return text


PHONE_GROUPS = st.tuples(
    st.sampled_from(["010", "011", "017", "02", "031"]), st.integers(200, 9999), st.integers(0, 9999)
)
RRN_GROUPS = st.tuples(
    st.dates().filter(lambda d: d.year >= 1900).map(lambda d: d.strftime("%y%m%d")),
    st.sampled_from("12345678"),
    st.integers(0, 999999),
)


def _card(body: str) -> str:
    digits = [int(c) for c in body]
    total = 0
    for i, d in enumerate(reversed(digits)):
        d = d * 2 if i % 2 == 0 else d
        total += d - 9 if d > 9 else d
    return body + str((10 - total % 10) % 10)


CARDS = st.builds(
    lambda prefix, rest: _card((prefix + rest)[:15]),
    st.sampled_from(["4", "51", "9410", "35"]),
    st.text("0123456789", min_size=14, max_size=14),
)
INSERTIONS = st.lists(st.tuples(st.integers(0, 100), st.sampled_from(INSERTS)), max_size=4)


def _assert_covers(text: str, value: str, kinds: set[PiiKind], before: str, after: str) -> None:
    full = before + value + after
    dets = [d for d in detect(full) if d.kind in kinds]
    assert len(dets) == 1, (full, [(d.kind, d.value) for d in detect(full)])
    det = dets[0]
    # The span covers every digit of the value (invisible characters at the
    # very end of a value may stay outside it: they are not part of it).
    first_digit = len(before) + next(i for i, ch in enumerate(value) if ch.isdigit())
    last_digit = len(before) + max(i for i, ch in enumerate(value) if ch.isdigit())
    assert det.start <= first_digit and det.end > last_digit, (full, det)
    assert det.start >= len(before) and det.end <= len(before) + len(value), (full, det)


@FAST
@given(PHONE_GROUPS, st.sampled_from(SEP_CHOICES), INSERTIONS, st.sampled_from(["", "연락처 ", "tel "]))
def test_phone_survives_invisibles_and_separators(groups, sep, inserts, before) -> None:
    area, exchange, line = groups
    value = _spell([area, str(exchange), f"{line:04d}"], sep, inserts)
    _assert_covers(value, value, {K.PHONE}, before, " 입니다")


@FAST
@given(RRN_GROUPS, st.sampled_from(SEP_CHOICES), INSERTIONS)
def test_rrn_survives_invisibles_and_separators(groups, sep, inserts) -> None:
    birth, gender, rest = groups
    value = _spell([birth, f"{gender}{rest:06d}"], sep, inserts)
    # An impossible date (Feb 30) is no RRN; dates() only gives real ones,
    # except Feb 29 of a non-leap century, which the detector allows anyway.
    _assert_covers(value, value, {K.RRN, K.FOREIGNER_RN}, "주민번호 ", " 확인")


@FAST
@given(CARDS, st.sampled_from([s for s in SEP_CHOICES if s not in ("\u2013",)]), INSERTIONS)
def test_card_survives_invisibles_and_separators(number, sep, inserts) -> None:
    value = _spell([number[i : i + 4] for i in range(0, 16, 4)], sep, inserts)
    _assert_covers(value, value, {K.CARD}, "카드 ", " 결제")
