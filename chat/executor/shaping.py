"""The shaping stage: what a tool's output becomes before the model reads it,
in this order (each step sees only what the step before left):

1. binary -> a size marker, and every value JSON-safe (`sanitise_value`);
2. URLs that may carry a secret (all but provably plain ones) -> this
   conversation's references `[URL-n]` (chat.url_references: the URL stays
   on the server, resolvable there);
3. known values (every original this conversation's vault holds), then
   lineage (columns derived from personal data, masked whole), then the
   detectors over every other string and key -> tokens;
4. a result too big for the model's context -> a spill file (written after
   masking: the file holds tokens, never an original) and a preview, cut to
   the budget whatever its shape (`fit`); read_spill pages through it later.
   The file is written under a name read_spill never lists and renamed once
   complete, so a full or read-only disk leaves no half-written file behind:
   the call fails (SpillUnwritable), its result withheld (chat.executor.pipeline).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import errno
import json
import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils.translation import gettext

from chat.url_references import references_in_text, url_is_plain, url_references_for
from governance.pii.masking import MaskCounts, mask_any, mask_rows, mask_string, mask_with

if TYPE_CHECKING:
    from chat.context import TurnContext
    from chat.executor.pipeline import Call, Lineage, Output


def shape(call: Call, output: Output, lineage: Lineage | None) -> str:
    for key, value in output.facts.items():
        # Facts are shown unshaped, so they may only be numbers and flags.
        if value is not None and not isinstance(value, (bool, int, float)):
            raise TypeError(f"{call.tool.name}: fact {key!r} is not a number or flag")
    references = url_references_for(call.ctx.conversation_id)
    payload = _with_references({key: sanitise_value(value) for key, value in output.payload.items()}, references)
    masked = _masked(call, payload, lineage)
    result = {call.tool.result_key: call.target.name, **masked, **output.facts}
    return spill_if_large(call, result, output.items)


def _masked(call: Call, payload: dict[str, Any], lineage: Lineage | None) -> dict[str, Any]:
    known = call.known()
    counts = MaskCounts()
    kinds, literal = (lineage.kinds, lineage.literal) if lineage is not None else ({}, frozenset())
    if lineage is not None and lineage.derived and isinstance(payload.get(lineage.key), list):
        rows, kinds, literal = derived_cells(
            payload[lineage.key], kinds, lineage.origins, literal, lineage.derived, call.vault, counts
        )
        payload = {**payload, lineage.key: rows}

    def masking(vault, counts):
        out = {}
        for key, value in payload.items():
            if lineage is not None and key == lineage.key:
                out[key] = mask_rows(
                    value,
                    column_kinds=kinds,
                    column_origins=lineage.origins,
                    vault=vault,
                    counts=counts,
                    known=known,
                    literal_columns=literal,
                    own_columns=lineage.own_columns,
                    own_values=lineage.own_values,
                )
            else:
                out[key] = mask_value(value, vault, known)
        return out

    masked = mask_with(call.vault, masking, counts)
    if counts and lineage is not None and lineage.record is not None:
        lineage.record(counts)
    return masked


def derived_cells(
    rows: list,
    kinds: dict[int, str],
    origins: dict[int, tuple[str, str]],
    literal: frozenset[int],
    derived: frozenset[int],
    vault,
    counts: MaskCounts,
) -> tuple[list, dict[int, str], frozenset[int]]:
    """The cells of the `derived` columns (masked whole, computed by the
    statement) replaced by their tokens from `vault.derived_tokens`: each
    its own token, never a known value (a vault without it, e.g. the
    in-memory one, gives the usual token). Returns (rows, the kinds left to
    mask_rows, the columns mask_rows returns as they are: the literals and
    these, now tokens)."""
    columns = {index: kind for index, kind in kinds.items() if index in derived}
    wanted: list[tuple[str, str]] = []
    for row in rows:
        for index, kind in columns.items():
            cell = row[index] if index < len(row) else None
            if cell is not None and cell != "":
                wanted.append((kind, str(cell)))
    tokens = iter(
        vault.derived_tokens(wanted)
        if hasattr(vault, "derived_tokens")
        else [vault.token_for(kind, value) for kind, value in wanted]
    )
    out = []
    for row in rows:
        row = list(row)
        for index, kind in columns.items():
            if index < len(row) and row[index] is not None and row[index] != "":
                row[index] = next(tokens)
                counts.add(origins.get(index, ("", "")), kind)
        out.append(row)
    remaining = {index: kind for index, kind in kinds.items() if index not in derived}
    return out, remaining, literal | frozenset(columns)


# A number written as a float inside text (a dataframe's CSV: "1012345678.0",
# "1.012345678e9"): read as the whole number it is.
_FLOAT_LITERAL = re.compile(r"(?<![\w.])\d{1,16}(?:\.\d+)?(?:[eE][+-]?\d{1,2})?(?![\w.])")


def mask_value(value: Any, vault, known) -> Any:
    """mask_any over a JSON-like value, and a number is also read as an
    international phone number (821012345678 is +82 10-1234-5678), whether
    a JSON number or a float written in text: what a spreadsheet or
    dataframe export gives for a phone column."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return _mask_text(value, vault, known)
    if isinstance(value, int):
        masked = mask_any(value, vault, None, known=known)
        if masked is value and 10 <= len(str(abs(value))) <= 15:
            written = f"+{abs(value)}"
            international = mask_string(written, vault, known=known)
            return value if international == written else international
        return masked
    if isinstance(value, list):
        return [mask_value(v, vault, known) for v in value]
    if isinstance(value, dict):
        out: dict = {}
        for key, item in value.items():
            name = _mask_text(key, vault, known) if isinstance(key, str) and key else key
            while name in out:  # two keys masked to one token: both values stay
                name = f"{name}#"
            out[name] = mask_value(item, vault, known)
        return out
    return mask_any(value, vault, None, known=known)


def _mask_text(text: str, vault, known) -> str:
    if "." in text or "e" in text or "E" in text:
        text = _FLOAT_LITERAL.sub(lambda m: _float_literal(m.group(0), vault, known), text)
    return mask_string(text, vault, known=known) if text else text


def _float_literal(written: str, vault, known) -> str:
    """The token for a float literal whose whole number is personal data, or
    the literal as written."""
    if "." not in written and "e" not in written.lower():
        return written
    try:
        number = float(written)
    except ValueError:
        return written
    if not number.is_integer() or not 9 <= len(str(int(number))) <= 15:
        return written
    masked = mask_value(int(number), vault, known)
    return masked if isinstance(masked, str) else written


# --- 1. binary and JSON-safety ----------------------------------------------------


def sanitise_value(value: Any) -> Any:
    """Make one value JSON-safe for the model; binary becomes a size marker."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<binary {len(bytes(value))} bytes>"
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [sanitise_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): sanitise_value(v) for k, v in value.items()}
    return str(value)


# --- 2. credentialed URLs ---------------------------------------------------------


def shorten_credentialed_urls(value: Any, reference_for) -> Any:
    """In one string: every URL that may carry a secret becomes a reference
    (`reference_for(url)`), the others are shown percent-decoded
    (chat.url_references.references_in_text: an allowlist, a doubt is a
    reference). The model needs to know a link exists, never the secret in it."""
    if not isinstance(value, str):
        return value
    return references_in_text(value, reference_for)


def _with_references(payload: dict[str, Any], references) -> dict[str, Any]:
    """`with_url_references` over a payload, the references of all its URLs
    resolved at once where the store can (a link in every row of a result
    is one query, not one per row). A first pass notes the URLs; without
    any, its result is already the final one."""
    prefetch = getattr(references, "prefetch", None)
    if prefetch is None:
        return with_url_references(payload, references.reference_for)
    noted: list[str] = []
    first = with_url_references(payload, lambda url: noted.append(url) or "")
    if not noted:
        return first
    prefetch(noted)
    return with_url_references(payload, references.reference_for)


def with_url_references(value: Any, reference_for) -> Any:
    """The same over a JSON-like value, object keys included."""
    if isinstance(value, str):
        return shorten_credentialed_urls(value, reference_for)
    if isinstance(value, list):
        return [with_url_references(v, reference_for) for v in value]
    if isinstance(value, dict):
        return {
            shorten_credentialed_urls(k, reference_for): _field_with_url_references(k, v, reference_for)
            for k, v in value.items()
        }
    return value


# A field whose name says it holds a link may hold one without its host
# ("webhook_path": "/services/T.../B.../secret", "next": "?session=...").
_LINK_FIELD = re.compile(r"(?:url|uri|href|link|src|path|webhook|callback|redirect|endpoint|location|next)s?$", re.I)


def _field_with_url_references(key: Any, value: Any, reference_for) -> Any:
    shown = with_url_references(value, reference_for)
    if (
        isinstance(value, str)
        and shown == value
        and value[:1] in ("/", "?", "#")
        and isinstance(key, str)
        and _LINK_FIELD.search(key)
        and not url_is_plain("relative.invalid" + value)
    ):
        return reference_for(value)
    return shown


# --- 4. spill -----------------------------------------------------------------------

SPILL_NAME = re.compile(r"turn\d{1,12}-[0-9a-f]{8}\.json")


def spill_folder(conversation_id) -> Path:
    """Where a conversation's spill files live (purged with it: chat.retention)."""
    return Path(settings.VAR_DIR) / "spill" / str(conversation_id or "no-conversation")


def spill_path(ctx: TurnContext) -> Path:
    return spill_folder(ctx.conversation_id) / f"turn{ctx.turn_id or 0}-{uuid.uuid4().hex[:8]}.json"


def spill_files(conversation_id) -> list[str]:
    """This conversation's spill file names, oldest first."""
    if not conversation_id:
        return []
    folder = spill_folder(conversation_id)
    try:
        entries = [e for e in os.scandir(folder) if SPILL_NAME.fullmatch(e.name) and e.is_file(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    return [e.name for e in sorted(entries, key=lambda e: e.stat(follow_symlinks=False).st_mtime)]


def spill_if_large(call: Call, result: dict[str, Any], items: str | None) -> str:
    """A result too big for the model's context goes to a per-conversation file
    (already masked) and the model gets a preview and the file's name. What
    the model gets is bounded whatever the result's shape: a single item
    bigger than the budget (one huge text block, one 50 MB cell) is cut in
    the preview, and so are big values beside the items."""
    content = json.dumps(result, ensure_ascii=False)
    budget = settings.OWLAI_SPILL_CHARS
    if len(content) <= budget:
        return content
    if items is None or not isinstance(result.get(items), list) or not result[items]:
        return json.dumps(fit(result, budget), ensure_ascii=False)
    path = spill_path(call.ctx)
    record = {"origin": {"tool": call.tool.name, "target": call.target.name}, "items": items, "result": result}
    write_spill(path, record)
    call.spilled = path
    preview, shown = page(result, items, offset=0, limit=settings.OWLAI_SPILL_PREVIEW_ROWS)
    spilled = {
        "file": path.name,
        "total": len(result[items]),
        "shown": shown,
        "note": gettext("the full (masked) result was saved; read the rest with read_spill (file, offset, limit)"),
    }
    preview = fit(preview, budget - len(json.dumps(spilled, ensure_ascii=False)) - 16)
    # First: a history trimmed to its start still names the file.
    return json.dumps({"spilled": spilled, **preview}, ensure_ascii=False)


class SpillUnwritable(Exception):
    """The spill file could not be written (read-only folder, full disk).
    `code` is the error's symbolic name (ENOSPC, EROFS): value-free, it is
    what the audit outcome records."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def write_spill(path: Path, record: dict) -> None:
    """`record` as the file `path`, complete or not at all: written under a
    name `spill_files` never lists (".<name>.partial"), then renamed. Any
    failure removes the partial file and raises SpillUnwritable."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        # Closing flushes: a full disk may say so only then, still inside the try.
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, ensure_ascii=False)
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise SpillUnwritable(errno.errorcode.get(exc.errno or 0, type(exc).__name__)) from exc


def spill_discard(path: Path | None) -> None:
    """A spill file whose call's result was withheld after all (its outcome
    could not be recorded): nobody may page through it."""
    if path is not None:
        with contextlib.suppress(OSError):
            os.unlink(path)


def page(result: dict[str, Any], items: str, *, offset: int, limit: int) -> tuple[dict[str, Any], int]:
    """`result` with only `limit` of its `items` from `offset`, fewer when
    they would not fit in OWLAI_SPILL_CHARS (at least one is always kept,
    cut to fit when it alone is too big): (the page, how many items it holds)."""
    budget = settings.OWLAI_SPILL_CHARS
    chosen = result[items][offset : offset + limit]
    head = len(json.dumps({**result, items: []}, ensure_ascii=False))
    size = head
    kept = 0
    for item in chosen:
        size += len(json.dumps(item, ensure_ascii=False)) + 2
        if kept and size > budget:
            break
        kept += 1
    shown = chosen[:kept]
    if shown:
        # The one item kept whatever its size gets what the rest leaves, and
        # at least half the budget.
        shown[0] = fit(shown[0], max(budget - head, budget // 2))
    return {**result, items: shown}, kept


# --- 5. bounds -------------------------------------------------------------------------

# Strings of this length and lists or objects of this many entries are cut
# only when a value is still more than _CUT_SLACK characters with everything
# else cut to them (tokens, names, a row's columns stay whole).
_CUT_FLOOR = 64
_CUT_SLACK = 4_096


def fit(value: Any, budget: int) -> Any:
    """`value` with its longest strings and lists cut (each with a marker
    saying how much) until its JSON fits in `budget` characters: the
    largest per-value limit that fits, found by halving."""
    if _size(value) <= budget:
        return value
    value = _cut(value, max(budget, _CUT_FLOOR))  # one pass first: what is left is at most budget per value
    at_floor = _cut(value, _CUT_FLOOR)
    if _size(at_floor) > budget:
        if _size(at_floor) <= max(budget, _CUT_SLACK):
            return at_floor
        return _largest_cut(value, budget, 0, _CUT_FLOOR)
    return _largest_cut(value, budget, _CUT_FLOOR, max(budget, _CUT_FLOOR))


def _largest_cut(value: Any, budget: int, low: int, high: int) -> Any:
    """`value` cut at the largest limit in [low, high] whose JSON fits (at
    `low` when none does)."""
    best = _cut(value, low)
    while low < high:
        middle = (low + high + 1) // 2
        candidate = _cut(value, middle)
        if _size(candidate) <= budget:
            low, best = middle, candidate
        else:
            high = middle - 1
    return best


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + gettext("… [%(count)s more characters]") % {"count": len(value) - limit}
    if isinstance(value, list):
        out = [_cut(v, limit) for v in value[:limit]]
        if len(value) > limit:
            out.append(gettext("… [%(count)s more items]") % {"count": len(value) - limit})
        return out
    if isinstance(value, dict):
        cut = {k: _cut(v, limit) for k, v in list(value.items())[:limit]}
        if len(value) > limit:
            cut["…"] = gettext("[%(count)s more keys]") % {"count": len(value) - limit}
        return cut
    return value
