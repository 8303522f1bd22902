"""Bounds applied while a result is fetched, never after.

A query's result is read row by row from a streaming cursor (PostgreSQL's
single-row mode, MySQL's unbuffered cursor, SQLite's stepping) and reading
stops at the row cap + 1 or when the result's character budget is spent;
the rest is never transferred (the caller cancels the statement). Every cell
is cut to a character budget as it is read, with a marker saying how much
was cut, so a 50 MB cell costs the worker one copy of it in the driver's
buffer and never reaches the model.

The markers are plain text (`…[cut: 49,990,000 characters]`): the model
and the person see that something was cut and how much, and nothing cut can
be masked wrongly because it is gone.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

CUT_MARK = "…[cut: {count:,} characters]"
# How far back from the cut a word boundary is looked for: a value cut in the
# middle (a phone number's first digits) is harder for the detectors to see.
_BOUNDARY_WINDOW = 64
_DECODE_CHUNK = 1 << 20


@dataclass(frozen=True)
class FetchBounds:
    row_cap: int
    cell_chars: int = 10_000
    result_chars: int = 1_000_000


@dataclass
class CutCounter:
    cells: int = 0
    characters: int = 0

    def add(self, count: int) -> None:
        self.cells += 1
        self.characters += count


def cut_marker(count: int) -> str:
    return CUT_MARK.format(count=count)


def cut_text(text: str, limit: int, counter: CutCounter | None = None) -> str:
    """`text` cut to at most `limit` characters plus a marker saying how many were cut."""
    return text if len(text) <= limit else _cut(text, limit, len(text), counter)


def _cut(head: str, limit: int, total: int, counter: CutCounter | None) -> str:
    # The marker counts against the limit: a cut value is never cut again.
    shown = head[: max(0, limit - len(cut_marker(total)))]
    boundary = max(shown.rfind(" ", len(shown) - _BOUNDARY_WINDOW), shown.rfind("\n", len(shown) - _BOUNDARY_WINDOW))
    if boundary > 0:
        shown = shown[:boundary]
    if counter is not None:
        counter.add(total - len(shown))
    return shown + cut_marker(total - len(shown))


def cut_utf8(data: Any, limit: int, counter: CutCounter | None = None) -> str:
    """UTF-8 bytes (a driver's buffer) decoded to at most `limit` characters
    plus a marker, without ever decoding the whole buffer at once: the rest
    is decoded piecewise only to count its characters."""
    view = memoryview(data)
    if len(view) <= limit:
        return str(view, "utf-8", "replace")
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    kept: list[str] = []
    kept_len = total = 0
    for start in range(0, len(view), _DECODE_CHUNK):
        piece = decoder.decode(view[start : start + _DECODE_CHUNK], final=start + _DECODE_CHUNK >= len(view))
        if kept_len <= limit:
            kept.append(piece[: limit + 1 - kept_len])
            kept_len += len(kept[-1])
        total += len(piece)
    head = "".join(kept)
    return head if total <= limit else _cut(head, limit, total, counter)


def cap_value(value: Any, limit: int, counter: CutCounter) -> Any:
    """One cell cut to `limit` characters (strings, binary, and the strings
    inside arrays and documents)."""
    if isinstance(value, str):
        return cut_text(value, limit, counter)
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = len(memoryview(value))
        return value if size <= limit else f"<binary {size} bytes>"
    if isinstance(value, (list, tuple)):
        return type(value)(cap_value(v, limit, counter) for v in value)
    if isinstance(value, dict):
        return {cap_value(str(k), limit, counter): cap_value(v, limit, counter) for k, v in value.items()}
    return value


def value_chars(value: Any) -> int:
    if value is None or isinstance(value, (bool, int, float)):
        return 8
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return 2 + sum(value_chars(v) + 1 for v in value)
    if isinstance(value, dict):
        return 2 + sum(len(str(k)) + value_chars(v) + 2 for k, v in value.items())
    return len(str(value))


@dataclass(frozen=True)
class Collected:
    rows: list[tuple[Any, ...]]
    truncated: bool  # rows were left unread: the cap, or the character budget
    complete: bool  # every row the statement produced was read
    cut: CutCounter


def collect(rows: Iterable[Any], n_columns: int, bounds: FetchBounds, counter: CutCounter | None = None) -> Collected:
    """Read at most row_cap + 1 rows from `rows` (an iterator over a
    streaming cursor), each cell cut, stopping early when the result's
    character budget is spent. The caller must cancel what was left unread."""
    counter = counter or CutCounter()
    # One row never exceeds the whole budget, however many columns it has.
    limit = max(100, min(bounds.cell_chars, bounds.result_chars // max(1, n_columns)))
    kept: list[tuple[Any, ...]] = []
    used = 0
    iterator = iter(rows)
    for raw in iterator:
        if len(kept) >= bounds.row_cap:
            return Collected(kept, truncated=True, complete=False, cut=counter)
        row = tuple(cap_value(v, limit, counter) for v in raw)
        size = sum(value_chars(v) + 1 for v in row)
        if kept and used + size > bounds.result_chars:
            return Collected(kept, truncated=True, complete=False, cut=counter)
        kept.append(row)
        used += size
    return Collected(kept, truncated=False, complete=True, cut=counter)


# --- PostgreSQL: cut cells inside the driver, before a Python copy is made ----------


def pg_register_cutting_loaders(cursor: Any, limit: int, counter: CutCounter) -> None:
    """Text-format loaders that cut strings and binary to `limit` as they are
    decoded from libpq's buffer (a 50 MB cell never becomes a Python string)."""
    from psycopg.adapt import Loader
    from psycopg.types.json import JsonbLoader, JsonLoader
    from psycopg.types.string import ByteaLoader

    encoding = cursor.connection.info.encoding

    class CuttingTextLoader(Loader):
        def load(self, data: Any) -> str:
            if encoding in ("utf-8", "utf8"):
                return cut_utf8(data, limit, counter)
            return cut_text(bytes(data).decode(encoding, "replace"), limit, counter)

    class CuttingByteaLoader(ByteaLoader):
        def load(self, data: Any) -> Any:
            size = len(memoryview(data))
            # Text format: "\x" and two hex digits per byte.
            if size > 2 * limit + 2:
                return f"<binary {(size - 2) // 2} bytes>"
            return super().load(bytes(data))

    def cutting_json(base: type) -> type:
        class CuttingJsonLoader(base):
            # A document too big to show is shown as its cut text, never parsed whole.
            def load(self, data: Any) -> Any:
                return cut_utf8(data, limit, counter) if len(memoryview(data)) > limit else super().load(data)

        return CuttingJsonLoader

    adapters = cursor.adapters
    for name in ("text", "varchar", "bpchar", "name", "xml", 18, 705):  # 18: "char", 705: unknown
        adapters.register_loader(name, CuttingTextLoader)
    adapters.register_loader("json", cutting_json(JsonLoader))
    adapters.register_loader("jsonb", cutting_json(JsonbLoader))
    adapters.register_loader(0, CuttingTextLoader)  # every type without a loader of its own
    adapters.register_loader("bytea", CuttingByteaLoader)
