"""Property tests per detector family: a value spelled with generated
separators, encodings, number words and look-alike letters is masked over
its whole original spelling, whatever the combination."""

from __future__ import annotations

import base64
import urllib.parse

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from governance.pii.detectors import detect_spans, mask_text

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Separators between digit groups: every class and repetition the fold reads.
SEPARATORS = ["-", " ", ".", "_", "/", "~", "\\", "--", "  ", " - ", "..", "-\n", "\n", ". ", "__", " _ "]
HANGUL = {
    "0": "공영빵",
    "1": "일",
    "2": "이",
    "3": "삼",
    "4": "사",
    "5": "오",
    "6": "육륙",
    "7": "칠",
    "8": "팔",
    "9": "구",
}
HANJA = {"0": "〇零", "1": "一", "2": "二", "3": "三", "4": "四", "5": "五", "6": "六", "7": "七", "8": "八", "9": "九"}
LOOKALIKES = {"0": "Oo", "1": "lI"}


@st.composite
def spelled_groups(draw: st.DrawFn, groups: list[str], separators: list[str]) -> str:
    """The groups joined by generated separators, some groups in number words
    or with look-alike letters for digits."""
    style = draw(st.sampled_from(["digits", "hangul", "hanja", "lookalike"]))
    out = []
    for group in groups:
        if style in ("hangul", "hanja") and draw(st.booleans()):
            table = HANGUL if style == "hangul" else HANJA
            group = "".join(draw(st.sampled_from(table[d])) for d in group)
        elif style == "lookalike":
            chars = list(group)
            for i, d in enumerate(chars):
                if d in LOOKALIKES and draw(st.booleans()):
                    chars[i] = draw(st.sampled_from(LOOKALIKES[d]))
            group = "".join(chars)
        out.append(group)
    if style == "hangul" and out == groups:
        out[0] = "".join(HANGUL[d][0] for d in groups[0])  # at least one group in words
    if style == "lookalike":
        separators = [s for s in separators if s in ("-", " ", ".", "--", " - ")]  # letters stand by digits
    text = out[0]
    for group in out[1:]:
        text += draw(st.sampled_from(separators)) + group
    return text


def encoded(draw: st.DrawFn, value: str) -> str:
    encoding = draw(st.sampled_from(["plain", "entities", "markup", "percent", "base64", "json"]))
    if encoding == "entities":
        return "".join(f"&#{ord(c)};" if c.isdigit() and draw(st.booleans()) else c for c in value)
    if encoding == "markup":
        return f"{value[0]}<i></i>{value[1:-1]}<br/>{value[-1]}"  # tags inside the value
    if encoding == "percent":
        return urllib.parse.quote(value, safe="")
    if encoding == "base64":
        return base64.b64encode(value.encode()).decode()
    if encoding == "json":
        return "".join(f"\\u{ord(c):04x}" if c.isdigit() and draw(st.booleans()) else c for c in value)
    return value


def assert_masked(text: str, value: str, kind: str | None = None) -> None:
    at = text.index(value)
    covering = [(k, s, e) for k, s, e, _ in detect_spans(text) if s <= at and at + len(value) <= e]
    assert covering, (text, [(k, text[s:e]) for k, s, e, _ in detect_spans(text)])
    if kind is not None:
        assert covering[0][0] == kind, covering
    assert value not in mask_text(text, lambda d: "[X]")


digits = st.integers(min_value=0, max_value=9).map(str)


@SETTINGS
@given(
    data=st.data(),
    middle=st.text("0123456789", min_size=4, max_size=4),
    last=st.text("0123456789", min_size=4, max_size=4),
)
def test_phones(data: st.DataObject, middle: str, last: str) -> None:
    last = last[:4].ljust(4, "0")
    middle = str(int(middle[0]) % 9 + 1) + middle[1:]  # no exchange starts with 0
    value = data.draw(spelled_groups(["010", middle, last], SEPARATORS))
    value = encoded(data.draw, value)
    prefix = data.draw(st.sampled_from(["", "연락처 ", "tel: ", "휴대폰: "]))
    assert_masked(f"{prefix}{value} 입니다", value)


def _luhn_complete(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return body + str((10 - total % 10) % 10)


@SETTINGS
@given(data=st.data(), body=st.text("0123456789", min_size=14, max_size=14))
def test_cards(data: st.DataObject, body: str) -> None:
    number = _luhn_complete("4" + body)
    groups = [number[i : i + 4] for i in range(0, 16, 4)]
    value = data.draw(spelled_groups(groups, SEPARATORS))  # dots too: 4111.1111.1111.1111
    value = encoded(data.draw, value)
    assert_masked(f"카드 {value}", value)


@SETTINGS
@given(
    data=st.data(),
    year=st.integers(0, 99),
    month=st.integers(1, 12),
    day=st.integers(1, 28),
    gender=st.sampled_from("1234"),
    rest=st.text("0123456789", min_size=6, max_size=6),
)
def test_rrns(data: st.DataObject, year: int, month: int, day: int, gender: str, rest: str) -> None:
    groups = [f"{year:02d}{month:02d}{day:02d}", gender + rest]
    value = data.draw(spelled_groups(groups, SEPARATORS))  # dots too: 900101.1234567
    value = encoded(data.draw, value)
    assert_masked(f"주민번호 {value}", value)


# Separators inside the front half, written as a date: 90.01.01-1234567, 9001.01.1234567.
FRONT_SEPARATORS = ["-", ".", " ", ". "]


@SETTINGS
@given(
    data=st.data(),
    year=st.integers(0, 99),
    month=st.integers(1, 12),
    day=st.integers(1, 28),
    gender=st.sampled_from("12345678"),
    rest=st.text("0123456789", min_size=6, max_size=6),
)
def test_rrns_with_a_date_for_a_front_half(
    data: st.DataObject, year: int, month: int, day: int, gender: str, rest: str
) -> None:
    inner = data.draw(st.sampled_from(FRONT_SEPARATORS))
    split = data.draw(st.sampled_from(["yy.mm.dd", "yymm.dd", "yy.mmdd"]))
    yy, mm, dd = f"{year:02d}", f"{month:02d}", f"{day:02d}"
    front = {
        "yy.mm.dd": f"{yy}{inner}{mm}{inner}{dd}",
        "yymm.dd": f"{yy}{mm}{inner}{dd}",
        "yy.mmdd": f"{yy}{inner}{mm}{dd}",
    }
    value = front[split] + data.draw(st.sampled_from(["-", ".", " ", " - "])) + gender + rest
    prefix = data.draw(st.sampled_from(["", "주민번호 ", "고객 ", "RRN: "]))
    assert_masked(f"{prefix}{value} 확인", value)


# Speech-to-text writes digits as words; these four are the commonest
# syllables of Korean prose, and a value may be written in them alone.
COMMON = {"1": "일", "2": "이", "4": "사", "5": "오"}


@SETTINGS
@given(
    data=st.data(),
    yy=st.text("1245", min_size=2, max_size=2),
    mmdd=st.sampled_from(["0101", "0412", "0525", "1015", "1122", "1214", "0221", "1111"]),
    gender=st.sampled_from("12"),
    rest=st.text("1245", min_size=6, max_size=6),
)
def test_rrns_in_the_common_number_words(data: st.DataObject, yy: str, mmdd: str, gender: str, rest: str) -> None:
    zero = data.draw(st.sampled_from("공영"))
    words = "".join(COMMON.get(d, zero) for d in yy + mmdd), "".join(COMMON[d] for d in gender + rest)
    value = data.draw(st.sampled_from(["", " ", "-", ". ", "  ", ", "])).join(words)
    prefix = data.draw(st.sampled_from(["", "네 ", "제 번호는 ", "고객: "]))
    suffix = data.draw(st.sampled_from(["", " 입니다", ".", "번 맞아요"]))
    assert_masked(f"{prefix}{value}{suffix}", value, "rrn")


@SETTINGS
@given(
    data=st.data(),
    prefix=st.sampled_from(["010", "011", "016", "017", "018", "019"]),
    exchange=st.text("0123456789", min_size=2, max_size=3),
    last=st.text("0123456789", min_size=4, max_size=4),
)
def test_a_phone_layout_with_a_space_inside_and_an_exchange_starting_with_0(
    data: st.DataObject, prefix: str, exchange: str, last: str
) -> None:
    first, second = data.draw(
        st.sampled_from([(" ", "-"), ("-", " "), (" ", " "), (" ", "."), (". ", " "), ("  ", "-")])
    )
    value = f"{prefix}{first}0{exchange}{second}{last}"
    context = data.draw(st.sampled_from(["", "메모 ", "고객 ", "연락처 "]))
    assert_masked(f"{context}{value} 로 전화", value)


@SETTINGS
@given(data=st.data(), groups=st.tuples(*(st.text("0123456789", min_size=n, max_size=n) for n in (6, 2, 6))))
def test_accounts_next_to_an_account_word(data: st.DataObject, groups: tuple[str, str, str]) -> None:
    value = data.draw(spelled_groups(list(groups), SEPARATORS))
    value = encoded(data.draw, value)
    bank = data.draw(
        st.sampled_from(["입금 계좌", "부산은행", "대구은행", "경남은행", "광주은행", "전북은행", "제주은행"])
    )
    assert_masked(f"{bank} {value}", value)


AT_FORMS = [" at ", "[at]", "(at)", "{at}", " [at] ", " 골뱅이 ", "앳", " arroba ", "@", " @ ", "&#64;", "%40"]
DOT_FORMS = [" dot ", "[dot]", "(dot)", "{dot}", " [.] ", " 닷 ", "점", " punto ", "."]


@SETTINGS
@given(
    data=st.data(),
    local=st.from_regex(r"[a-z][a-z0-9]{1,10}", fullmatch=True),
    domain=st.from_regex(r"[a-z][a-z0-9]{1,10}", fullmatch=True),
    tld=st.sampled_from(["com", "net", "kr", "co.kr", "org"]),
)
def test_obfuscated_emails(data: st.DataObject, local: str, domain: str, tld: str) -> None:
    at = data.draw(st.sampled_from(AT_FORMS))
    dot = data.draw(st.sampled_from(DOT_FORMS))
    if at == " at " and dot == ".":
        local += "." + "x"  # a bare "at" with a plain dot needs a mailbox-like local part
    value = f"{local}{at}{domain}{dot}{tld.replace('.', dot)}"
    if data.draw(st.booleans()):
        value = base64.b64encode(value.encode()).decode()
    prefix = data.draw(st.sampled_from(["", "메일 ", "mail: ", "연락 "]))
    assert_masked(f"{prefix}{value} 로 보내 주세요", value, "email")


@SETTINGS
@given(
    data=st.data(),
    letters=st.from_regex(r"[A-Z]{1,2}", fullmatch=True),
    first=st.text("0123456789", min_size=4, max_size=4),
    second=st.text("0123456789", min_size=3, max_size=4),
)
def test_spaced_passports_named_by_an_english_label_in_korean_text(
    data: st.DataObject, letters: str, first: str, second: str
) -> None:
    if len(letters) == 2:
        second = second[:3]  # two letters and 7 digits
    else:
        second = second.ljust(4, "0")  # one letter and 8 digits
    value = f"{letters} {first} {second}"
    label = data.draw(st.sampled_from(["passport", "Passport No.", "PASSPORT:", "passport number"]))
    assert_masked(f"제 {label} {value} 입니다", value, "passport")


@SETTINGS
@given(
    data=st.data(),
    groups=st.tuples(*(st.text("0123456789", min_size=n, max_size=n) for n in (2, 2, 6, 2))),
)
def test_spaced_licences_named_by_an_english_label_in_korean_text(data: st.DataObject, groups: tuple[str, ...]) -> None:
    value = " ".join(groups)
    label = data.draw(st.sampled_from(["Driver license", "driver's licence", "License No.", "DRIVER LICENSE:"]))
    assert_masked(f"저의 {label} {value} 입니다", value, "driver_license")
