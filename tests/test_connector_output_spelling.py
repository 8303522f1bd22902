"""Connector output in one spelling before masking
(governance.connectors.spelling), and numbers read as the numbers they are
(chat.executor.shaping.mask_value): every respelling below of a vault value
or a phone number is masked like the plain one."""

from __future__ import annotations

import json
import unicodedata

import pytest

from chat.executor.shaping import mask_value
from governance.connectors.spelling import JSON_TEXT_MAX, normalised, normalised_text, text_fields
from governance.pii.known_values import KnownValues
from governance.pii.masking import InMemoryVault

NAME = "김민지"
KNOWN = KnownValues([(NAME, "name", "[이름-1]")])


def shaped(value):
    """The connector's spelling, then the masking the shaping stage applies."""
    return mask_value(normalised(value), InMemoryVault(), KNOWN)


@pytest.mark.parametrize(
    "text",
    [
        unicodedata.normalize("NFD", f"담당 {NAME}"),
        json.dumps({"owner": NAME}),  # ensure_ascii: \\uae40...
        json.dumps(json.dumps({"owner": NAME})),  # a JSON text inside a JSON string
        "prose " + json.dumps(NAME) + " (cut",
        f"{NAME[0]}\u200b{NAME[1:]}",
        f"{NAME[0]}\u2060{NAME[1]}\u00ad{NAME[2]}",
        f"\u202e{NAME}\u202c",
        "".join(f"\\u{ord(ch):04x}" for ch in NAME),
        "".join(f"\\\\u{ord(ch):04x}" for ch in NAME),
    ],
)
def test_respelled_vault_values_are_masked(text):
    fields = text_fields(text)
    seen = json.dumps(mask_value(fields, InMemoryVault(), KNOWN), ensure_ascii=False)
    assert NAME not in seen and "[이름-1]" in seen, seen


def test_escapes_that_would_change_the_texts_structure_stay_escaped():
    assert normalised_text("a \\u0022 b \\u005c c \\u0000") == "a \\u0022 b \\u005c c \\u0000"
    assert normalised_text("\\ud83d\\ude00 \\ud83d") == "😀 \\ud83d"  # a lone surrogate stays written
    assert normalised_text("https:\\/\\/x.example\\/a") == "https://x.example/a"


def test_a_json_text_is_parsed_so_its_numbers_are_numbers():
    assert text_fields('{"phone": 1.098765432e9, "n": [1.5, 2.0]}') == {"json": {"phone": 1098765432, "n": [1.5, 2]}}
    assert text_fields("[1, 2") == {"text": "[1, 2"}  # not JSON: text as written
    big = '["' + "\\uae40" * (JSON_TEXT_MAX // 6 + 10) + '"]'
    assert text_fields(big) == {"text": '["' + "김" * (JSON_TEXT_MAX // 6 + 10) + '"]'}  # too big to parse: decoded


@pytest.mark.parametrize(
    "value",
    [
        1098765432.0,
        821098765432.0,
        821098765432,
        [[1098765432.0]],
        {"tel": 8.21098765432e11},
        "phone,1098765432.0",
        "tel 1.098765432E9 mobile",
        {"1098765432.0": "key"},
    ],
)
def test_phone_numbers_as_floats_and_international_numbers_are_masked(value):
    seen = json.dumps(shaped(value), ensure_ascii=False)
    assert "[전화번호-" in seen and "1098765432" not in seen and "821098765432" not in seen, seen


@pytest.mark.parametrize("value", [1234567.5, 3.0, 0.25, 2500000, "ratio 0.5, total 3.0, version 1.2.3", True, None])
def test_ordinary_numbers_stay(value):
    assert shaped(value) == normalised(value)
