"""The masking hot path (governance.pii.masking.mask_string, InMemoryVault) against a
plain reference: the straightforward implementation it replaced (detect() +
mask_text with a closure, Enum lookups, normalise(PiiKind(kind), ...) for
every value). Pure functions, no DB."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from governance.pii.detectors import PiiKind, mask_text, normalise
from governance.pii.masking import (
    InMemoryVault,
    MaskCounts,
    format_token,
    mask_any,
    mask_rows,
    mask_string,
    normalised_value,
    replace_tokens,
    tokens_in,
)

FAST = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def reference_normalised_value(kind: str, value: str) -> str:
    try:
        return normalise(PiiKind(kind), value)
    except ValueError:
        return " ".join(value.split()).casefold()


class ReferenceVault:
    """InMemoryVault as it was: one normalisation per call, tuple keys."""

    def __init__(self) -> None:
        self._numbers: dict[tuple[str, str], int] = {}
        self._originals: dict[tuple[str, int], str] = {}
        self._next: Counter[str] = Counter()

    def token_for(self, kind: str, value: str) -> str:
        key = (kind, reference_normalised_value(kind, value))
        number = self._numbers.get(key)
        if number is None:
            self._next[kind] += 1
            number = self._numbers[key] = self._next[kind]
            self._originals[(kind, number)] = value
        return format_token(kind, number)

    def original_for(self, kind: str, number: int) -> str | None:
        return self._originals.get((kind, number))


def reference_mask_string(text: str, vault, counts: MaskCounts | None = None, origin=("", "")) -> str:
    def replace(detection) -> str:
        if counts is not None:
            counts.add(origin, detection.kind.value)
        return vault.token_for(detection.kind.value, detection.value)

    return mask_text(text, replace)


PIECES = [
    *("010-1234-5678", "01012345678", "+82 10-1234-5678", "010 1234 5678", "(02)123-4567", "1588-1234"),
    *("900101-1234568", "9001011234568", "850315-5123450", "4556 7890 1234 5672", "4556789012345672"),
    *("123456-01-234567", "110-123-456789", "입금계좌 198410248408", "계좌 1234567890", "Hong@Example.co.kr"),
    *("hong@example.co.kr", "여권 M12345678", "면허 11-12-345678-90", "bc65c055-1791-4871-9f3a-cf0532182727"),
    *("2024-01-15 12:34", "12,000원", "ORD-2024-000123", "고객 ", " 연락 바람, ", " / ", ", ", "\n", " ", "가"),
    *("０１０－１２３４－５６７８", "x", "-", "1", "0"),
]
TEXTS = st.lists(st.sampled_from(PIECES), max_size=10).map("".join)


@FAST
@given(st.lists(TEXTS, min_size=1, max_size=6), st.sampled_from([("", ""), ("customers", "memo")]))
def test_mask_string_matches_the_reference(texts: list[str], origin: tuple[str, str]) -> None:
    vault, reference_vault = InMemoryVault(), ReferenceVault()
    counts, reference_counts = MaskCounts(), MaskCounts()
    for text in texts * 2:  # twice: the second round hits the vault's cache
        assert mask_string(text, vault, counts, origin) == reference_mask_string(
            text, reference_vault, reference_counts, origin
        )
    assert counts == reference_counts
    for kind in PiiKind:
        for number in range(0, 12):
            assert vault.original_for(kind.value, number) == reference_vault.original_for(kind.value, number)


@FAST
@given(TEXTS)
def test_mask_string_without_counts(text: str) -> None:
    assert mask_string(text, InMemoryVault()) == reference_mask_string(text, ReferenceVault())


@pytest.mark.parametrize("kind", [*(k.value for k in PiiKind), "unknown"])
@pytest.mark.parametrize(
    "value", ["010-1234-5678", "+82 10 1234 5678", " Hong.GD@Example.CO.KR ", "m123a4567", "  홍  길동 ", "", "０１０"]
)
def test_normalised_value_matches_the_reference(kind: str, value: str) -> None:
    assert normalised_value(kind, value) == reference_normalised_value(kind, value)
    if kind != "unknown":
        assert normalised_value(PiiKind(kind), value) == reference_normalised_value(kind, value)


def test_vault_tokens_and_originals() -> None:
    vault = InMemoryVault()
    assert vault.token_for("phone", "010-1234-5678") == "[전화번호-1]"
    assert vault.token_for("phone", "+82 10-1234-5678") == "[전화번호-1]"  # same number, other spelling
    assert vault.token_for(PiiKind.PHONE, "01012345678") == "[전화번호-1]"  # an enum member is its id
    assert vault.token_for("phone", "010-2222-3333") == "[전화번호-2]"
    assert vault.token_for("email", "A@B.kr") == "[이메일-1]"  # numbered per kind
    assert vault.token_for("email", "a@b.kr") == "[이메일-1]"
    assert vault.token_for("custom", " Some  Thing ") == "[custom-1]"  # unknown kind: casefold, spaces
    assert vault.token_for("custom", "some thing") == "[custom-1]"
    assert vault.original_for("phone", 1) == "010-1234-5678"  # the first spelling seen
    assert vault.original_for(PiiKind.PHONE, 2) == "010-2222-3333"
    assert vault.original_for("email", 1) == "A@B.kr"
    assert vault.original_for("custom", 1) == " Some  Thing "
    for number in (0, -1, 3, 10**9):
        assert vault.original_for("phone", number) is None
    assert vault.original_for("card", 1) is None
    assert vault.original_for("phone", 2.0) == "010-2222-3333"  # equal numbers, as dict keys did
    assert vault.original_for("phone", "1") is None  # type: ignore[arg-type]


def test_counts_by_origin_and_kind() -> None:
    counts = MaskCounts()
    vault = InMemoryVault()
    mask_string("고객 010-1234-5678, 메일 a@b.kr, 다시 010 1234 5678", vault, counts, ("t", "c"))
    mask_string("900101-1234568", vault, counts)
    assert counts == {("t", "c", "phone"): 2, ("t", "c", "email"): 1, ("", "", "rrn"): 1}
    counts.add(("t", "c"), "phone")
    assert counts[("t", "c", "phone")] == 3


def test_masked_text_round_trips() -> None:
    vault = InMemoryVault()
    text = "입금계좌 198410248408 확인 후 출고. 연락처 010-1234-5678, hong@example.co.kr"
    masked = mask_string(text, vault)
    assert masked == "입금계좌 [계좌번호-1] 확인 후 출고. 연락처 [전화번호-1], [이메일-1]"
    assert [kind for kind, *_ in tokens_in(masked)] == ["account", "phone", "email"]
    assert replace_tokens(masked, vault.original_for) == text
    assert mask_any({"rows": [[masked, 3, None, "010 1234 5678"]]}, vault) == {
        "rows": [[masked, 3, None, "[전화번호-1]"]]
    }


def test_short_and_empty_strings() -> None:
    vault = InMemoryVault()
    for text in ("", "a@b", "홍길동", "12345"):
        assert mask_string(text, vault) == text


def test_random_uuid4_strings_are_never_altered() -> None:
    vault = InMemoryVault()
    counts = MaskCounts()
    for _ in range(2000):
        u = uuid.uuid4()
        for text in (str(u), str(u).upper(), "{" + str(u) + "}", f"주문 {u} 확인", f"요청ID:{str(u).upper()}입니다"):
            assert mask_string(text, vault, counts) == text, text
    assert not counts


@FAST
@given(st.integers(0, 2**128 - 1), st.sampled_from(["", "주문번호 ", "고객 010-1234-5678 / "]), st.booleans())
def test_uuids_stay_whole_next_to_other_values(bits: int, before: str, upper: bool) -> None:
    value = str(uuid.UUID(int=bits, version=4))
    value = value.upper() if upper else value
    masked = mask_string(f"{before}{value} 처리", InMemoryVault())
    assert value in masked


def test_a_value_cut_into_adjacent_cells_masks_every_piece() -> None:
    vault = InMemoryVault()
    counts = MaskCounts()
    rows = [
        ["홍길동", "010", "1234", "5678", 3],
        ["주민번호", "900101", "1234567"],
        ["연락처", "02", "123", "4567"],
        ["계좌", "110", "123", "456789"],
    ]
    out = mask_rows(rows, column_kinds={}, column_origins={}, vault=vault, counts=counts)
    phone = mask_string("010-1234-5678", vault)  # the same value in one cell: the same token
    assert out[0] == ["홍길동", phone, phone, phone, 3]
    assert out[1][0] == "주민번호" and out[1][1] == out[1][2] == format_token("rrn", 1)
    assert out[2][1:] == [format_token("phone", 2)] * 3
    assert out[3][1:] == [format_token("account", 1)] * 3
    assert counts[("", "", "phone")] == 6 and counts[("", "", "rrn")] == 2
    # A JSON list is cells too.
    assert mask_any({"p": ["010", "1234", "5678"]}, vault) == {"p": [phone] * 3}


def test_short_numbers_in_adjacent_cells_stay_without_a_value_layout() -> None:
    vault = InMemoryVault()
    rows = [["x", "10", "20", "30"], [2024, 1, 15], ["주문", "1234", "5678", "9012"], ["900101", "1234567"]]
    assert mask_rows(rows, column_kinds={}, column_origins={}, vault=vault) == rows
    assert mask_any(["02", "123", "4567"], vault) == ["02", "123", "4567"]  # no label, not a mobile


def test_a_piece_masked_by_lineage_breaks_the_run() -> None:
    vault = InMemoryVault()
    out = mask_rows([["010", "1234", "5678"]], column_kinds={1: "name"}, column_origins={}, vault=vault)
    assert out[0][1] == format_token("name", 1)
    assert out[0][0] == "010" and out[0][2] == "5678"  # no longer adjacent pieces of one value
