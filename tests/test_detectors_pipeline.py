"""The detector pipeline: decode, fold, match and validate, with spans that
cover the original spelling. Examples per class of spelling, and the
false-positive corpus that must stay unmasked."""

from __future__ import annotations

import base64
import json

import pytest

from governance.pii.detectors import detect_spans, mask_text


def masked(text: str) -> str:
    return mask_text(text, lambda d: f"[{d.kind.value}]")


def spans(text: str) -> list[tuple[str, str]]:
    return [(kind, text[s:e]) for kind, s, e, _ in detect_spans(text)]


def test_an_underscore_separated_account_is_masked() -> None:
    # The previous attempt's known failure: groups joined by a space and an underscore.
    assert spans("입금 계좌 100000 10_100000") == [("account", "100000 10_100000")]
    assert masked("입금 계좌 100000 10_100000") == "입금 계좌 [account]"


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def _jwt(payload: dict[str, str]) -> str:
    def seg(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    return ".".join((seg(b'{"alg":"HS256","typ":"JWT"}'), seg(json.dumps(payload).encode()), "c2lnbmF0dXJl"))


# (text, the span that must be masked whole, its kind)
HIDDEN = [
    # character entities, markup, percent and JSON escapes
    ("연락처 &#48;&#49;&#48;-1234-5678", "&#48;&#49;&#48;-1234-5678", "phone"),
    ("tel: &#x30;10&ndash;1234&ndash;5678", "&#x30;10&ndash;1234&ndash;5678", "phone"),
    ("<td>010<b>-</b>1234-<br>5678</td>", "010<b>-</b>1234-<br>5678", "phone"),
    ("mail hong&#64;naver.com", "hong&#64;naver.com", "email"),
    ("mail hong&commat;naver.com", "hong&commat;naver.com", "email"),
    ("/u?e=hong%40naver.com&x=1", "hong%40naver.com", "email"),
    ("%30%31%30-1234-5678", "%30%31%30-1234-5678", "phone"),
    ('{"t": "\\u0030\\u0031\\u0030-1234-5678"}', "\\u0030\\u0031\\u0030-1234-5678", "phone"),
    # base64 and JWT segments: the whole segment
    (f"token {_b64('010-1234-5678')}", _b64("010-1234-5678"), "phone"),
    (f"메모 {_b64('주민번호 900101-1234567')} 끝", _b64("주민번호 900101-1234567"), "rrn"),
    # line breaks inside a value
    ("010-1234-\n5678", "010-1234-\n5678", "phone"),
    ("계좌 110-123-\r\n456789", "110-123-\r\n456789", "account"),
    # number words and look-alike letters
    ("전화 공일공 일이삼사 오육칠팔", "공일공 일이삼사 오육칠팔", "phone"),
    ("연락처 영일영-일이삼사-오육칠팔로 주세요", "영일영-일이삼사-오육칠팔", "phone"),
    ("주민번호 구공공일공일-일이삼사오육칠", "구공공일공일-일이삼사오육칠", "rrn"),
    ("전화 〇一〇 一二三四 五六七八", "〇一〇 一二三四 五六七八", "phone"),
    ("call O1O-l234-5678", "O1O-l234-5678", "phone"),
    ("연락처 O1O-1OO1-5678", "O1O-1OO1-5678", "phone"),
    # separators: doubled, mixed, other classes
    ("010--1234--5678", "010--1234--5678", "phone"),
    ("010 - 1234 -- 5678", "010 - 1234 -- 5678", "phone"),
    ("010~1234~5678", "010~1234~5678", "phone"),
    ("카드 4111.1111-1111.1111", "4111.1111-1111.1111", "card"),
    ("card 4111-1111 1111_1111", "4111-1111 1111_1111", "card"),
    ("card 4111  1111  1111  1111", "4111  1111  1111  1111", "card"),
    # obfuscated e-mails
    ("hong at naver dot com", "hong at naver dot com", "email"),
    ("hong [at] naver [dot] com", "hong [at] naver [dot] com", "email"),
    ("hong(at)naver(dot)com", "hong(at)naver(dot)com", "email"),
    ("hong{at}naver{dot}co{dot}kr", "hong{at}naver{dot}co{dot}kr", "email"),
    ("hong 골뱅이 naver 닷 com 으로", "hong 골뱅이 naver 닷 com", "email"),
    ("hong앳naver점com", "hong앳naver점com", "email"),
    ("hong@naver닷컴", "hong@naver닷컴", "email"),
    ("hong arroba gmail punto com", "hong arroba gmail punto com", "email"),
    ("hong.gd at naver.com", "hong.gd at naver.com", "email"),
    ("hong @ naver . com", "hong @ naver . com", "email"),
    ("user@[192.0.2.1]", "user@[192.0.2.1]", "email"),
    ("user@[IPv6:2001:db8::1]", "user@[IPv6:2001:db8::1]", "email"),
    ('"hong gildong"@naver.com', '"hong gildong"@naver.com', "email"),
    # labelled halves of an RRN, labels before and after
    ("주민번호 앞자리 900101", "900101", "rrn"),
    ("주민등록번호 뒷자리: 1234567", "1234567", "rrn"),
    ("주민번호 900101(앞자리)", "900101", "rrn"),
    ("RRN first half 900101", "900101", "rrn"),
    # passports and licences
    ("여권번호 M 1234 5678", "M 1234 5678", "passport"),
    ("passport: M-12345678", "M-12345678", "passport"),
    ("M12345678 (여권)", "M12345678", "passport"),
    ("US passport 123456789", "123456789", "passport"),
    ("운전면허 11 12 345678 90", "11 12 345678 90", "driver_license"),
    ("면허번호 서울 12 345678 90", "12 345678 90", "driver_license"),
    # regional banks as account context
    ("부산은행 1012345678901", "1012345678901", "account"),
    ("대구은행 50412345678901", "50412345678901", "account"),
    ("경남은행 2071234567890", "2071234567890", "account"),
    ("광주은행 1071234567890", "1071234567890", "account"),
    ("전북은행 5071234567890", "5071234567890", "account"),
    ("제주은행 70012345678", "70012345678", "account"),
    # dots only: cards and RRNs (a dotted RRN is decimal-shaped: see DECIMAL_LIKE)
    ("4111.1111.1111.1111", "4111.1111.1111.1111", "card"),
    ("카드 4111.1111.1111.1111 결제", "4111.1111.1111.1111", "card"),
    ("amex 3782.822463.10005", "3782.822463.10005", "card"),
    ("900101.1234567", "900101.1234567", "rrn"),
    ("고객 900101.1234567 확인", "900101.1234567", "rrn"),
    ("주민번호 9001.01-1234567", "9001.01-1234567", "rrn"),
    ("90.01.01-1234567", "90.01.01-1234567", "rrn"),
    ("9001.01.1234567", "9001.01.1234567", "rrn"),
    ("생년 90.01.01.1234567", "90.01.01.1234567", "rrn"),
    ("90 01 01 1234567 입니다", "90 01 01 1234567", "rrn"),
    ("주민번호 90-01-01-1234567", "90-01-01-1234567", "rrn"),
    # a phone layout with a space inside, no context word, an exchange starting with 0
    ("011 045-3854", "011 045-3854", "account"),
    ("고객 연락처 011 045-3854 로 전화", "011 045-3854", "account"),
    ("메모 010 0123 4567로 연락", "010 0123 4567", "account"),
    ("016-045 3854", "016-045 3854", "account"),
    # spoken digits with only the common syllables 일, 이, 사, 오
    ("네 일사일일이오. 이사오이오사이", "일사일일이오. 이사오이오사이", "rrn"),
    ("고객: 이이일이일일 이사일이이이오 입니다", "이이일이일일 이사일이이이오", "rrn"),
    ("오이일일일이-일이일오이오이.", "오이일일일이-일이일오이오이", "rrn"),
    ("카드 사일일일-0000-0000-0008", "사일일일-0000-0000-0008", "card"),
    # a comma at each pause, as speech-to-text writes it
    ("제 번호는 영일영, 팔육육오, 팔구사칠 입니다", "영일영, 팔육육오, 팔구사칠", "phone"),
    ("고객: 일사일공이일, 일일오이이오일", "일사일공이일, 일일오이이오일", "rrn"),
    # double spaces inside a phone's layout (an exchange starting with 0: no phone, the same number)
    ("016  030 6270", "016  030 6270", "account"),
    ("연락처 016  030  6270로 연락", "016  030  6270", "account"),
    ("016 030  6270", "016 030  6270", "account"),
    ("010  1234  5678", "010  1234  5678", "phone"),
    # spoken digits in pairs (and other groupings than the value's own)
    ("공일 공일 이삼 사오 육칠 팔", "공일 공일 이삼 사오 육칠 팔", "phone"),
    ("전화 공일 공일 이삼 사오 육칠 팔로 주세요", "공일 공일 이삼 사오 육칠 팔", "phone"),
    ("영일 영일 이삼 사오 육칠 팔", "영일 영일 이삼 사오 육칠 팔", "phone"),
    ("공일공 일이 삼사 오육 칠팔", "공일공 일이 삼사 오육 칠팔", "phone"),
    ("주민번호 구공 공일 공일 일이 삼사 오육 칠", "구공 공일 공일 일이 삼사 오육 칠", "rrn"),
    ("입금 계좌 일일 공일 이삼 사오 육칠 팔구", "일일 공일 이삼 사오 육칠 팔구", "account"),
    # an RRN label names a front half split 4-2 (카카오뱅크's account layout otherwise)
    ("주민번호 9001-01-1234567", "9001-01-1234567", "rrn"),
    ("주민등록번호: 9001-01-1234567 입니다", "9001-01-1234567", "rrn"),
    ("9001-01-1234567 (주민번호)", "9001-01-1234567", "rrn"),
    ("RRN 9001-01-1234567", "9001-01-1234567", "rrn"),
    ("외국인등록번호 9001-01-5234567", "9001-01-5234567", "frn"),
    # values cut into pieces: quoted, barred, listed
    ('전화 "010" "1234" "5678"', '010" "1234" "5678', "phone"),
    ("연락처 010 | 1234 | 5678", "010 | 1234 | 5678", "phone"),
    ("phone: ['010', '1234', '5678']", "010', '1234', '5678", "phone"),
    ("['010','1234','5678']", "010','1234','5678", "phone"),
    ("phone: 010, 1234, 5678", "010, 1234, 5678", "phone"),
    ("tel '02' '123' '4567'", "02' '123' '4567", "phone"),
    ("주민번호 900101, 1234567", "900101, 1234567", "rrn"),
    ("계좌 110, 123, 456789", "110, 123, 456789", "account"),
    ('입금 계좌 "6005" "7133" "0325"', '6005" "7133" "0325', "account"),
    ("카드 '4111' '1111' '1111' '1111'", "4111' '1111' '1111' '1111", "card"),
    ("card: 3782, 822463, 10005", "3782, 822463, 10005", "card"),
    ("연락처 팔이 일공 이이 육이 구구 삼칠", "팔이 일공 이이 육이 구구 삼칠", "phone"),  # +82 10-2262-9937
    # English labels in Korean text naming spaced passports and licences
    ("제 passport: M 1234 5678 입니다", "M 1234 5678", "passport"),
    ("출국 전 Passport No. AB 1234567 확인", "AB 1234567", "passport"),
    ("저의 Driver license 11 22 333333 44 입니다", "11 22 333333 44", "driver_license"),
    ("면허 대신 LICENSE 11 22 333333 44 제출", "11 22 333333 44", "driver_license"),
]


@pytest.mark.parametrize(("text", "value", "kind"), HIDDEN)
def test_a_hidden_value_is_masked_over_its_original_spelling(text: str, value: str, kind: str) -> None:
    at = text.index(value)
    found = detect_spans(text)
    assert any(k == kind and s <= at and at + len(value) <= e for k, s, e, _ in found), spans(text)
    assert value not in masked(text)


def test_both_halves_of_an_rrn_named_apart_are_masked() -> None:
    text = "주민번호 앞자리 900101, 뒷자리 1234567 입니다"
    assert spans(text) == [("rrn", "900101"), ("rrn", "1234567")]


def test_a_jwt_segment_holding_a_value_is_masked_whole() -> None:
    token = _jwt({"sub": "u1", "phone": "010-1234-5678"})
    header, payload, signature = token.split(".")
    out = masked(f"Authorization: Bearer {token}")
    assert payload not in out and "[phone]" in out
    assert header in out and signature in out  # segments without a value stay


def test_an_offset_map_keeps_the_text_around_the_value() -> None:
    text = "앞 &lt;b&gt; 연락처 &#48;10-1234-5678 끝 &amp; 뒤"
    assert masked(text) == "앞 &lt;b&gt; 연락처 [phone] 끝 &amp; 뒤"


# Things the policy keeps: none is personal data, with or without its label.
FALSE_POSITIVES = [
    # decimals: an average's result, ratios, coordinates
    "평균 1234567.891011",
    "AVG(amount) = 1234567.891011",
    "avg balance 12345678.9012345",
    "평균 입금액 1234567.891011원",
    "0.1234567890123",
    "37.566535, 126.977969",
    # decimals shaped like a dotted RRN, read as decimals by what is before them
    "평균 900101.1234567",
    "AVG(amount) = 900101.1234567",
    "mean -900101.1234567",
    # numbers with a space inside that are no phone layout
    "점수 100 200-3000 사이",
    "1234 5678-9012 건",
    # dates and times
    "2024-01-15",
    "2024.01.15",
    "2024/01/15 12:34:56",
    "2024. 1. 15.",
    "20240115123456",
    "2024-01-15T12:34:56.123456+09:00",
    # versions, builds
    "v10.0.19045.2965",
    "version 1.2.3-beta.4",
    "Python 3.11.7 (main, Dec 2 2024)",
    # ISBNs and book numbers
    "ISBN 978-89-12345-67-8",
    "ISBN 9788912345678",
    "도서번호 9788912345678",
    "책 번호 1234-5678-9012",
    # invoices, waybills, courier and order numbers with their labels
    "운송장번호 1234-5678-9012",
    "CJ대한통운 운송장 6012-3456-7890",
    "tracking no. 1234-5678-9012",
    "택배 송장 123456789012",
    "송장번호 123456789012",
    "Invoice No. 2024-000123-45",
    "주문번호 2024-000123-45",
    "Order #ORD-2024-000123",
    "waybill 123456789012",
    # addresses on the network
    "192.168.100.200",
    "10.0.0.1:8080",
    "2001:db8::8a2e:370:7334",
    # amounts
    "금액 1,234,567,890원",
    "₩1,234,567",
    "1500-2000원",
    "USD 12,345,678.90",
    # prose that mentions at and dot
    "visit us at example.com",
    "meet at home dot now",
    "이메일은 나중에 보내 드릴게요",
    # Korean prose with number-like syllables
    "일이 많다",
    "사오 개",
    "오늘은 일이 많아서 이사 일정을 오후로 미뤘다",
    "사과 사오 개, 오이 이삼 개, 일이 일일이 많다",
    "일, 이, 삼, 사, 오, 육, 칠, 팔",
    "금액 1,234,567,890원",
    "이사 일정은 오후 세 시",
    "사이사이 오이 이삼일 걸림",
    "3월 15일 오후 2시 방문 예정",
    # pieces that are no value, or no value's pieces without a label
    "10, 20, 30, 40",
    "금액 12,000원, 5,000원, 3,000원",
    "'2024', '01', '15'",
    "점수 | 100 | 200 | 300",
    "ID 1234 | 5678 | 9012",
    "'02' '123' '4567'",
    "900101, 1234567",
    "110, 123, 456789",
    "'4111' '1111' '1111' '1111'",
    # spoken pairs too short or no value's layout
    "일이 삼사 명",
    "사오 개, 육칠 개",
    # codes with look-alike letters inside words
    "Hello 12345678 world",
    "IOIO-2024 model",
    # hex ids and hashes
    "d865a454-d579-4f1a-9627-4f6d97fe756c",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
]


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_the_false_positive_corpus_stays_unmasked(text: str) -> None:
    assert spans(text) == []
    assert masked(text) == text


def test_a_date_split_front_half_does_not_take_a_bank_layout_or_a_glued_date() -> None:
    # 4-2-7 with hyphens is 카카오뱅크's account layout: it stays an account,
    # whatever its first digits look like; dotted or spaced, the split is an RRN's.
    assert spans("입금 1902-01-2675313") == [("account", "1902-01-2675313")]
    assert spans("입금 8810-17-7797291") == [("account", "8810-17-7797291")]
    assert spans("9001.01-1234567") == [("rrn", "9001.01-1234567")]
    # An aggregate's word must stand as a word to read a dotted run as a decimal.
    assert spans("corporate 900101.1234567") == [("rrn", "900101.1234567")]
    assert spans("주민번호 평균 900101.1234567") == [("rrn", "900101.1234567")]  # an RRN word wins
    # A date with separators glued to a number is no front half.
    assert spans("24.01.151234567") == []


def test_a_label_nearer_than_the_rrn_word_names_a_split_front_half() -> None:
    # The nearer word names the number; without an RRN word it stays an account.
    assert spans("주민번호 말고 계좌 9001-01-1234567") == [("account", "9001-01-1234567")]
    assert spans("9001-01-1234567") == [("account", "9001-01-1234567")]


def test_a_spoken_value_keeps_the_kind_its_layout_names() -> None:
    # Joined, these 16 spoken digits pass Luhn; grouped as written they are an account.
    assert spans("고객 요청 입금 계좌 五四二-六七二四-七八五四-七四 확인 부탁") == [
        ("account", "五四二-六七二四-七八五四-七四")
    ]
