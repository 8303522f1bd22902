"""CSV exports of audit records for compliance (pure Python, stdlib ``csv``).

No Django imports: the view wraps a :class:`CsvStream` in a
``StreamingHttpResponse`` and records the export audit event itself.

Typical use in a view::

    rows = (row_for(r) for r in qs[: MAX_ROWS + 1].iterator())
    stream = stream_csv(HEADER, rows, max_rows=MAX_ROWS)
    response = StreamingHttpResponse(stream, content_type="text/csv; charset=utf-8")

Every cell goes through :func:`neutralise_cell`, so text that a spreadsheet
would run as a formula ("CSV injection") is opened as plain text instead.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal

__all__ = ["BOM", "CsvStream", "DEFAULT_CUT_NOTE", "default_cut_note", "neutralise_cell", "stream_csv"]

BOM = "\ufeff"
"""UTF-8 byte order mark: without it Excel opens UTF-8 CSV files (Korean text) as the ANSI code page."""

DEFAULT_CUT_NOTE = "# export cut at {max_rows} rows; narrow the filters to get the rest"

# Formula injection: OWASP "CSV Injection" says to prefix a cell with a single
# quote when it begins with = + - @ TAB (0x09) or CR (0x0D). Decisions:
#
# * Full-width forms (U+FF1D ＝, U+FF0B ＋, U+FF0D －, U+FF20 ＠) are also
#   triggers: Excel in CJK (Korean, Japanese, Chinese) locales can take them as
#   the ASCII operators, and our users work in such locales.
# * Leading whitespace is looked through: " =1+1" or "\u3000＝1+1" is also
#   prefixed, because some spreadsheet programs (and import wizards with "trim
#   spaces") strip leading spaces before deciding whether a cell is a formula.
#   Cost: a harmless leading ' on such rare cells. Whitespace here is whatever
#   str.lstrip() removes (ASCII and Unicode spaces, NBSP, U+3000, LF, and TAB
#   and CR themselves), so " \t1+1" is left alone: TAB and CR trigger only as
#   the very first character.
# * Only text is neutralised. int / float / Decimal values (not bool) are
#   written with str() and never prefixed: a number such as -5 cannot be a
#   formula and must stay a number for sums in the spreadsheet. A *string* "-5"
#   is prefixed ("'-5"), as OWASP recommends for any text cell. Non-finite
#   floats/Decimals ("nan", "-inf") are not numbers to a spreadsheet, so they
#   are treated as text ("-inf" -> "'-inf").
# * A dash inside text ("a-b") is untouched; only the start of the cell matters.
# * Quotes, commas and newlines are handled by the csv module's quoting
#   (QUOTE_MINIMAL), which also keeps a prefixed "'\r..." cell in one field.
_FORMULA_TRIGGERS = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")


def _needs_prefix(text: str) -> bool:
    if not text:
        return False
    if text[0] in _FORMULA_TRIGGERS:
        return True
    stripped = text.lstrip()
    return bool(stripped) and stripped[0] in _FORMULA_TRIGGERS


def _is_finite(value: float | Decimal) -> bool:
    return value.is_finite() if isinstance(value, Decimal) else math.isfinite(value)


def _to_text(value: object) -> str:
    if isinstance(value, str):
        return str.__str__(value)  # plain text of str subclasses (e.g. TextChoices members)
    if isinstance(value, dt.date | dt.time):  # dt.datetime is a dt.date subclass
        return value.isoformat()
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def neutralise_cell(value: object) -> str:
    """Return ``value`` as CSV cell text that no spreadsheet runs as a formula.

    None -> "", True/False -> "true"/"false", int and finite float/Decimal ->
    str() (never prefixed), date/datetime/time -> ISO-8601, list/tuple/dict -> JSON
    (ensure_ascii=False), anything else -> str(). Text whose first character,
    or first character after leading whitespace, is one of = + - @ TAB CR or
    a full-width ＝ ＋ － ＠ gets a leading single quote.
    """
    if value is None:
        return ""
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float | Decimal) and _is_finite(value)):
        return str(value)
    text = _to_text(value)
    return "'" + text if _needs_prefix(text) else text


def default_cut_note(max_rows: int) -> list[str]:
    return [DEFAULT_CUT_NOTE.format(max_rows=max_rows)]


class CsvStream:
    """Iterator of ``str`` chunks: BOM + header line, then one chunk per data row.

    Attributes, updated while it is consumed:

    * ``rows_written`` -- data rows handed out so far (header and cut note not
      counted); at most ``max_rows``.
    * ``was_cut`` -- True once a row beyond ``max_rows`` was seen (the final
      chunk is then the cut-note row).
    * ``finished`` -- True once the last chunk was produced; False if the
      client disconnected or the source raised part-way.

    The source is read lazily (``iter()`` is called only after the header
    chunk), at most ``max_rows + 1`` times. Pass ``qs[: max_rows + 1]`` or a
    generator over ``qs.iterator()``, not a bare QuerySet: iterating a
    QuerySet fetches all of its rows at once.
    :meth:`close` (called by Django when the response is closed, including on
    client disconnect) stops the stream and closes the source iterator if it
    has a ``close`` method (e.g. a generator over ``qs.iterator()``), which
    releases a server-side cursor early.

    Recording the export audit event: do it *before* returning the response,
    so the event exists even if the client disconnects or streaming fails.
    Take the count with the same cap as the stream::

        n = qs[: max_rows + 1].count()      # LIMIT max_rows + 1, cheap
        row_count = min(n, max_rows)
        was_cut = n > max_rows
        tool_call_audit_write(..., row_count=row_count)   # fail closed
        stream = stream_csv(header, rows_from(qs[: max_rows + 1]), max_rows=max_rows)

    Rows can change between the count and the stream; if the exact delivered
    number matters, read ``stream.rows_written`` / ``stream.finished`` in a
    callback after the response is closed (e.g. ``request_finished`` or a
    wrapper generator's ``finally``) and write a follow-up record. Never rely
    on that callback alone: it does not run if the worker dies.
    """

    def __init__(
        self,
        header: Sequence[object],
        rows: Iterable[Sequence[object]],
        *,
        max_rows: int,
        cut_note: Callable[[int], list[str]] | None = None,
    ) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0:
            raise ValueError(f"max_rows must be a non-negative int, got {max_rows!r}")
        self.max_rows = max_rows
        self.rows_written = 0
        self.was_cut = False
        self.finished = False
        self._header = list(header)
        self._rows = rows
        # iter() is deferred to the first pull: iter(QuerySet) already runs the query.
        self._source: Iterator[Sequence[object]] | None = None
        self._cut_note = cut_note or default_cut_note
        self._buf = io.StringIO()
        self._writer = csv.writer(self._buf, lineterminator="\r\n")
        self._gen = self._generate()

    def __iter__(self) -> CsvStream:
        return self

    def __next__(self) -> str:
        return next(self._gen)

    def close(self) -> None:
        self._gen.close()
        self._close_source()

    def _close_source(self) -> None:
        close = getattr(self._source, "close", None)
        if callable(close):
            close()

    def _line(self, cells: Iterable[object]) -> str:
        buf = self._buf
        buf.seek(0)
        buf.truncate(0)
        self._writer.writerow([neutralise_cell(c) for c in cells])
        return buf.getvalue()

    def _generate(self) -> Iterator[str]:
        yield BOM + self._line(self._header)
        self._source = iter(self._rows)
        sentinel = object()
        for _ in range(self.max_rows):
            row = next(self._source, sentinel)
            if row is sentinel:
                self.finished = True
                return
            chunk = self._line(row)
            self.rows_written += 1
            yield chunk
        # max_rows written: one more read tells whether the export was cut.
        if next(self._source, sentinel) is not sentinel:
            self.was_cut = True
            self._close_source()
            yield self._line(self._cut_note(self.max_rows))
        self.finished = True


def stream_csv(
    header: Sequence[object],
    rows: Iterable[Sequence[object]],
    *,
    max_rows: int,
    cut_note: Callable[[int], list[str]] | None = None,
) -> CsvStream:
    """Stream ``header`` and at most ``max_rows`` of ``rows`` as CSV text chunks.

    The first chunk starts with a UTF-8 BOM; lines end with CRLF; every cell
    (header and cut note included) goes through :func:`neutralise_cell`. When
    ``rows`` has more than ``max_rows`` items, a final row ``cut_note(max_rows)``
    (default: "# export cut at N rows; narrow the filters to get the rest") is
    appended so the file itself says it is incomplete. Returns a
    :class:`CsvStream`; see it for ``rows_written`` / ``was_cut`` and for how
    to record the audit event.
    """
    return CsvStream(header, rows, max_rows=max_rows, cut_note=cut_note)
