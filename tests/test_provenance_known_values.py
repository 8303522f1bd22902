"""Known values on a normalised form and across the cells of a row, and the
model's own literal columns left as written (pure: governance.pii.known_values,
governance.pii.masking.mask_rows, governance.pii.lineage literal outputs)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governance.pii.known_values import KnownValues, normalised, normalised_with_offsets
from governance.pii.lineage import FREE_TEXT, classify_outputs
from governance.pii.masking import InMemoryVault, mask_rows

NAME, PHONE, EMAIL = "김민준", "010-2718-2818", "minjun.kim@example.com"
KNOWN = KnownValues([(NAME, "name", "[이름-1]"), (PHONE, "phone", "[전화번호-1]"), (EMAIL, "email", "[이메일-1]")])

# Characters a value may be re-spelled with, inside it: spaces of every kind,
# invisible and format characters, punctuation and dashes.
INSERTED = [
    " ",
    "\u00a0",
    "\u3000",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\u00ad",
    "-",
    ".",
    "·",
    "_",
    "/",
    "\t",
]


@settings(max_examples=300, deadline=None)
@given(
    value=st.sampled_from([NAME, PHONE, EMAIL]),
    inserts=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(INSERTED)), max_size=6),
    form=st.sampled_from(["NFC", "NFD", "NFKC", "NFKD"]),
    upper=st.booleans(),
    before=st.sampled_from(["", "담당 ", "memo: "]),
    after=st.sampled_from(["", " 님", ", 확인"]),
)
def test_a_respelled_known_value_is_replaced_and_the_rest_kept(value, inserts, form, upper, before, after):
    spelled = value.upper() if upper else value
    for position, char in sorted(inserts, reverse=True):
        position = min(position, len(spelled))
        spelled = spelled[:position] + char + spelled[position:]
    spelled = unicodedata.normalize(form, spelled)
    masked = KNOWN.replace(before + spelled + after)
    assert "[" in masked and normalised(masked).find(normalised(value)) < 0, masked
    assert masked.startswith(before.rstrip() if before.strip() else "") and masked.endswith(after), masked


@pytest.mark.parametrize(
    "spelled",
    [
        "０１０－２７１８－２８１８",
        "010 2718 2818",
        "010.2718.2818",
        "0102718 2818",
        "ＭＩＮＪＵＮ.ＫＩＭ@ＥＸＡＭＰＬＥ.ＣＯＭ",
    ],
)
def test_full_width_and_other_separators_are_the_known_value(spelled):
    assert KNOWN.replace(f"x {spelled} y") in ("x [전화번호-1] y", "x [이메일-1] y")


def test_offsets_map_back_to_the_text_as_written():
    text = "a \u1100\u1175\u11b7\u1106\u1175\u11ab\u110c\u116e\u11ab b"  # NFD Hangul
    folded, starts, ends = normalised_with_offsets(text)
    assert folded == "a김민준b"
    assert text[starts[1] : ends[3]] == text[2:-2]


def test_text_that_only_shares_letters_is_left_alone():
    for text in ["김민주 010-2718-2819", "minjun kim example", "01027182", "2818-2718-010"]:
        assert KNOWN.replace(text) == text


def _masked(rows, literal=frozenset(), kinds=None):
    return mask_rows(
        rows, column_kinds=kinds or {}, column_origins={}, vault=InMemoryVault(), known=KNOWN, literal_columns=literal
    )


@pytest.mark.parametrize(
    "row",
    [["010-2718", "-2818"], ["010", "2718", "2818"], ["김", "민준"], ["minjun.kim@", "example.com"], ["010", 27182818]],
)
def test_a_known_value_split_over_cells_masks_every_piece(row):
    masked = _masked([row])[0]
    assert all(str(cell).startswith("[") for cell in masked), masked
    assert len(set(masked)) == 1


def test_split_values_skip_lineage_masked_and_literal_columns():
    # A literal column never joins a split value: it is the model's own text.
    assert _masked([["010-2718", "-2818"]], literal=frozenset({1}))[0] == ["010-2718", "-2818"]
    masked = _masked([["김", "[이름-9]", "민준"]], kinds={1: "name"})[0]
    assert masked[0] == masked[2] == "[이름-1]"


def test_literal_columns_come_back_as_written_even_when_known():
    assert _masked([[NAME, PHONE, f"{NAME} {PHONE}"]], literal=frozenset({0, 1, 2})) == [
        [NAME, PHONE, f"{NAME} {PHONE}"]
    ]
    assert _masked([[NAME]]) == [["[이름-1]"]]


def test_own_literals_stay_next_to_data_and_the_rest_is_masked():
    own = frozenset({normalised(NAME), normalised(PHONE)})
    rows = [[f"{NAME} minjun.kim@example.com", f"{PHONE} 010-9999-8888", f"{NAME}"]]
    masked = mask_rows(
        rows, column_kinds={}, column_origins={}, vault=InMemoryVault(), known=KNOWN, own_columns={0, 1}, own_values=own
    )[0]
    assert masked[0] == f"{NAME} [이메일-1]"
    assert masked[1].startswith(PHONE + " [전화번호-") and "9999" not in masked[1]
    assert masked[2] == "[이름-1]"  # not an own column: the known value is masked


SCHEMA = {"people": {"id": None, "name": "name"}, "memos": {"id": None, "memo": FREE_TEXT}}


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
@pytest.mark.parametrize(
    "sql, literal",
    [
        ("SELECT '김민준', '홍길동'", [True, True]),
        ("SELECT '김민준' UNION ALL SELECT '홍길동' UNION ALL SELECT '이서연'", [True]),
        ("SELECT 'a' AS g FROM people WHERE name = 'x'", [True]),
        ("SELECT upper('abc'), 1 + 2", [True, True]),
        ("SELECT name, 'x' FROM people", [False, True]),
        ("SELECT '김민준' || id FROM people", [False]),
        ("SELECT memo, 'x' FROM memos", [False, True]),
        ("SELECT (SELECT 'x' FROM people LIMIT 1)", [False]),
        ("SELECT count(*) FROM people", [False]),
        ("SELECT '[이름-1]', 'b'", [False, False]),  # a token: re-identified, and the statement holds it
        ("SELECT '김철수', 'b'", [False, False]),  # a re-identified original
        ("SELECT some_udf('x')", [False]),  # an unknown function may read anything
        ("WITH c AS (SELECT 'x' AS v) SELECT v FROM c", [False]),
    ],
)
def test_which_outputs_are_only_the_models_literals(dialect, sql, literal):
    outputs = classify_outputs(sql, dialect, SCHEMA, len(literal), tainted_literals={"김철수": "name"})
    assert [o.literal for o in outputs] == literal, outputs


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": "\\uace0\\uac1d \\uae40\\ubbfc\\uc900 \\ub2d8"}', '{"a": "\\uace0\\uac1d [이름-1] \\ub2d8"}'),
        ('"\\ud83d\\ude00\\uae40\\ubbfc\\uc900"', '"\\ud83d\\ude00[이름-1]"'),
        ("https://x.example/q?n=%EA%B9%80%EB%AF%BC%EC%A4%80&x=1", "https://x.example/q?n=[이름-1]&x=1"),
        ("mailto:minjun.kim%40example.com", "mailto:[이메일-1]"),
        ("tel%3A010-2718-2818", "tel%3A[전화번호-1]"),
        ("50% off, %ZZ and %E1%84 stay", "50% off, %ZZ and %E1%84 stay"),
    ],
)
def test_escaped_and_percent_encoded_known_values_are_replaced(text, expected):
    # What json.dumps (ensure_ascii) and URL encoding make of a vault value.
    assert KNOWN.replace(text) == expected
