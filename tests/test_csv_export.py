"""audit.csv_export: formula neutralisation, BOM/encoding, row cap, streaming (no DB)."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest

from audit.csv_export import CsvStream, neutralise_cell, stream_csv

BOM_BYTES = b"\xef\xbb\xbf"
DANGEROUS_FIRST = ["=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20"]


def parse(chunks) -> list[list[str]]:
    """Join the chunks, check the BOM on the UTF-8 bytes, parse back with csv.reader."""
    data = "".join(chunks).encode("utf-8")
    assert data.startswith(BOM_BYTES)
    assert not data[3:].startswith(BOM_BYTES)
    text = data[len(BOM_BYTES) :].decode("utf-8")
    return list(csv.reader(io.StringIO(text, newline="")))


def export(rows, *, header=("a", "b"), max_rows=100, **kwargs) -> tuple[CsvStream, list[list[str]]]:
    stream = stream_csv(list(header), rows, max_rows=max_rows, **kwargs)
    return stream, parse(stream)


class Tripwire:
    """Iterator of `n` rows that fails the test if pulled beyond `limit` times."""

    def __init__(self, n: int, limit: int):
        self.n, self.limit, self.pulled = n, limit, 0
        self.closed = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.pulled >= self.limit:
            raise AssertionError(f"source pulled more than {self.limit} times")
        self.pulled += 1
        if self.pulled > self.n:
            raise StopIteration
        return [self.pulled, f"r{self.pulled}"]

    def close(self):
        self.closed = True


# --- neutralise_cell -------------------------------------------------------


@pytest.mark.parametrize("first", DANGEROUS_FIRST)
def test_dangerous_first_character_is_prefixed(first):
    value = f'{first}HYPERLINK("http://evil")'
    assert neutralise_cell(value) == "'" + value


@pytest.mark.parametrize("first", [c for c in DANGEROUS_FIRST if not c.isspace()])
def test_dangerous_character_after_leading_whitespace_is_prefixed(first):
    for ws in (" ", "  ", "\u00a0", "\u3000", "\n", " \t\r\n"):
        value = f"{ws}{first}1+1"
        assert neutralise_cell(value) == "'" + value


def test_whitespace_then_harmless_text_is_untouched():
    # TAB and CR matter only as the very first character; after other
    # whitespace they are looked through like any whitespace.
    assert neutralise_cell(" \t1+1") == " \t1+1"
    assert neutralise_cell("\n\r abc") == "\n\r abc"


@pytest.mark.parametrize(
    "value",
    ["hello", "a-b", "a=b", "user@example.com", "5-3", "안녕하세요", "# comment", "'already", " x", "   ", ""],
)
def test_ordinary_text_is_untouched(value):
    assert neutralise_cell(value) == value


def test_numbers_are_not_prefixed_but_numeric_strings_are():
    assert neutralise_cell(-5) == "-5"
    assert neutralise_cell(0) == "0"
    assert neutralise_cell(42) == "42"
    assert neutralise_cell(-1.5) == "-1.5"
    assert neutralise_cell(2.25) == "2.25"
    assert neutralise_cell(Decimal("-3.10")) == "-3.10"
    assert neutralise_cell("-5") == "'-5"
    assert neutralise_cell("+82 10 1234 5678") == "'+82 10 1234 5678"


def test_non_finite_floats_are_treated_as_text():
    assert neutralise_cell(float("-inf")) == "'-inf"
    assert neutralise_cell(float("inf")) == "inf"
    assert neutralise_cell(float("nan")) == "nan"
    assert neutralise_cell(Decimal("-Infinity")) == "'-Infinity"


def test_type_conversions():
    assert neutralise_cell(None) == ""
    assert neutralise_cell(True) == "true"
    assert neutralise_cell(False) == "false"
    tz = dt.timezone(dt.timedelta(hours=9))
    assert neutralise_cell(dt.datetime(2025, 3, 1, 12, 30, 5, tzinfo=tz)) == "2025-03-01T12:30:05+09:00"
    assert neutralise_cell(dt.date(2025, 3, 1)) == "2025-03-01"
    assert neutralise_cell(["표", "orders"]) == '["표", "orders"]'
    assert neutralise_cell({"테이블": 1}) == '{"테이블": 1}'
    assert neutralise_cell(("x",)) == '["x"]'


def test_str_subclass_gives_plain_text():
    class Label(str):
        def __str__(self):
            return "not the value"

    assert neutralise_cell(Label("ok")) == "ok"
    assert neutralise_cell(Label("=1")) == "'=1"


# --- stream_csv: encoding and quoting --------------------------------------


def test_bom_header_and_korean_round_trip():
    stream, rows = export([["김철수", "주문 테이블 조회"], ["이영희", "매출"]], header=["사용자", "내용"])
    assert rows == [["사용자", "내용"], ["김철수", "주문 테이블 조회"], ["이영희", "매출"]]
    assert stream.rows_written == 2
    assert stream.was_cut is False
    assert stream.finished is True


def test_first_chunk_starts_with_bom_and_lines_end_with_crlf():
    chunks = list(stream_csv(["a"], [["x"], ["y"]], max_rows=10))
    assert chunks[0].startswith("\ufeff")
    assert chunks[0] == "\ufeffa\r\n"
    assert chunks[1:] == ["x\r\n", "y\r\n"]


def test_every_dangerous_cell_is_neutralised_in_the_file():
    data = [[f"{c}cmd|' /C calc'!A0", "ok"] for c in DANGEROUS_FIRST]
    _, rows = export(data)
    for (first, _), parsed in zip(data, rows[1:], strict=True):
        assert parsed[0] == "'" + first
        assert parsed[1] == "ok"


def test_untouched_values_in_the_file():
    _, rows = export([["hello", "a-b"], [-5, 3.5], [None, True]])
    assert rows[1:] == [["hello", "a-b"], ["-5", "3.5"], ["", "true"]]


def test_commas_quotes_and_newlines_are_quoted():
    tricky = ["a,b", 'say "hi"', "line1\nline2", "cr\r\nlf", "=1,2\n3"]
    stream = stream_csv(["v"], [[t] for t in tricky], max_rows=10)
    text = "".join(stream)
    assert '"a,b"' in text
    assert '"say ""hi"""' in text
    rows = parse([text])
    assert [r[0] for r in rows[1:]] == ["a,b", 'say "hi"', "line1\nline2", "cr\r\nlf", "'=1,2\n3"]
    assert all(len(r) == 1 for r in rows)


def test_header_is_neutralised_too():
    _, rows = export([], header=["=evil", "ok"])
    assert rows == [["'=evil", "ok"]]


# --- stream_csv: row cap ----------------------------------------------------


def test_more_than_max_rows_is_cut_with_a_note():
    source = Tripwire(n=10, limit=4)
    stream, rows = export(source, max_rows=3)
    assert rows[0] == ["a", "b"]
    assert rows[1:4] == [["1", "r1"], ["2", "r2"], ["3", "r3"]]
    assert rows[4] == ["# export cut at 3 rows; narrow the filters to get the rest"]
    assert len(rows) == 5
    assert stream.rows_written == 3
    assert stream.was_cut is True
    assert stream.finished is True
    assert source.pulled == 4  # max_rows + 1, never more
    assert source.closed is True


def test_exactly_max_rows_has_no_note():
    source = Tripwire(n=3, limit=4)
    stream, rows = export(source, max_rows=3)
    assert rows[1:] == [["1", "r1"], ["2", "r2"], ["3", "r3"]]
    assert stream.rows_written == 3
    assert stream.was_cut is False
    assert stream.finished is True
    assert source.pulled == 4


def test_fewer_than_max_rows():
    stream, rows = export(Tripwire(n=2, limit=3), max_rows=5)
    assert len(rows) == 3
    assert stream.rows_written == 2
    assert stream.was_cut is False


def test_generator_source_not_consumed_beyond_max_rows_plus_one():
    pulled = []

    def gen():
        for i in range(1, 1000):
            if i > 6:
                raise AssertionError("pulled beyond max_rows + 1")
            pulled.append(i)
            yield [i, "x"]

    stream, rows = export(gen(), max_rows=5)
    assert pulled == [1, 2, 3, 4, 5, 6]
    assert len(rows) == 1 + 5 + 1
    assert stream.rows_written == 5
    assert stream.was_cut is True


def test_custom_cut_note():
    stream, rows = export(
        [[i, i] for i in range(5)], max_rows=2, cut_note=lambda n: ["잘림", f"{n}행까지", "=not a formula"]
    )
    assert rows[-1] == ["잘림", "2행까지", "'=not a formula"]
    assert stream.was_cut is True


def test_max_rows_zero():
    stream, rows = export([[1, 2]], max_rows=0)
    assert rows == [["a", "b"], ["# export cut at 0 rows; narrow the filters to get the rest"]]
    assert stream.rows_written == 0
    assert stream.was_cut is True


@pytest.mark.parametrize("bad", [-1, 1.5, None, True])
def test_invalid_max_rows(bad):
    with pytest.raises(ValueError):
        stream_csv(["a"], [], max_rows=bad)


def test_default_cut_note_with_5000():
    stream, rows = export(([i, i] for i in range(5001)), max_rows=5000)
    assert len(rows) == 1 + 5000 + 1
    assert rows[-1] == ["# export cut at 5000 rows; narrow the filters to get the rest"]
    assert stream.rows_written == 5000


# --- stream_csv: laziness and partial consumption ---------------------------


def test_source_is_not_touched_before_iteration():
    class Exploding:
        def __iter__(self):
            raise AssertionError("iter() called too early")

    stream = stream_csv(["a"], Exploding(), max_rows=5)
    assert stream.rows_written == 0
    assert next(stream) == "\ufeffa\r\n"  # header does not need the source


def test_counters_track_partial_consumption_and_close():
    source = Tripwire(n=10, limit=11)
    stream = stream_csv(["a", "b"], source, max_rows=10)
    assert iter(stream) is stream
    next(stream)  # header
    next(stream)
    next(stream)
    assert stream.rows_written == 2
    assert stream.finished is False
    stream.close()  # what Django does when the client disconnects
    assert source.closed is True
    assert source.pulled == 2
    assert stream.rows_written == 2
    assert stream.was_cut is False
    assert stream.finished is False
    with pytest.raises(StopIteration):
        next(stream)


def test_source_error_propagates_and_leaves_stream_unfinished():
    def gen():
        yield ["1", "x"]
        raise RuntimeError("db went away")

    stream = stream_csv(["a", "b"], gen(), max_rows=10)
    with pytest.raises(RuntimeError):
        list(stream)
    assert stream.rows_written == 1
    assert stream.finished is False
