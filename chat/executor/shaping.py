"""The shaping stage: what a tool's output becomes before the model reads it,
in this order (each step sees only what the step before left):

1. binary -> a size marker, and every value JSON-safe (`sanitise_value`);
2. credentialed URLs -> this conversation's references `[URL-n]`
   (chat.url_references: the URL stays on the server, resolvable there);
3. known values (every original this conversation's vault holds), then
   lineage (columns derived from personal data, masked whole), then the
   detectors over every other string and key -> tokens;
4. a result too big for the model's context -> a spill file (written after
   masking: the file holds tokens, never an original) and a preview;
   read_spill pages through it later.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils.translation import gettext

from chat.url_references import url_references_for
from governance.pii.masking import MaskCounts, mask_any, mask_rows, mask_with

if TYPE_CHECKING:
    from chat.context import TurnContext
    from chat.executor.pipeline import Call, Lineage, Output


def shape(call: Call, output: Output, lineage: Lineage | None) -> str:
    for key, value in output.facts.items():
        # Facts are shown unshaped, so they may only be numbers and flags.
        if value is not None and not isinstance(value, (bool, int, float)):
            raise TypeError(f"{call.tool.name}: fact {key!r} is not a number or flag")
    references = url_references_for(call.ctx.conversation_id)
    payload = {
        key: with_url_references(sanitise_value(value), references.reference_for)
        for key, value in output.payload.items()
    }
    masked = _masked(call, payload, lineage)
    result = {call.tool.result_key: call.target.name, **masked, **output.facts}
    return spill_if_large(call, result, output.items)


def _masked(call: Call, payload: dict[str, Any], lineage: Lineage | None) -> dict[str, Any]:
    known = call.known()

    def masking(vault, counts):
        out = {}
        for key, value in payload.items():
            if lineage is not None and key == lineage.key:
                out[key] = mask_rows(
                    value,
                    column_kinds=lineage.kinds,
                    column_origins=lineage.origins,
                    vault=vault,
                    counts=counts,
                    known=known,
                    literal_columns=lineage.literal,
                    own_columns=lineage.own_columns,
                    own_values=lineage.own_values,
                )
            else:
                out[key] = mask_any(value, vault, None, known=known)
        return out

    counts = MaskCounts()
    masked = mask_with(call.vault, masking, counts)
    if counts and lineage is not None and lineage.record is not None:
        lineage.record(counts)
    return masked


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

CREDENTIAL_URL = re.compile(
    r"\b[a-z][a-z0-9+.-]*://(?:[^\s/@]+@[^\s]+|[^\s]*[?&](?:token|access_token|key|api_key|apikey|sig|signature|"
    r"x-amz-signature|x-amz-credential|secret|password|auth)=[^\s]*)",
    re.IGNORECASE,
)


def shorten_credentialed_urls(value: Any, reference_for) -> Any:
    """In one string: URLs with credentials or signed tokens become
    references (`reference_for(url)`): the model needs to know a link
    exists, never the secret in it."""
    if not isinstance(value, str) or "://" not in value:
        return value
    return CREDENTIAL_URL.sub(lambda m: reference_for(m.group(0)), value)


def with_url_references(value: Any, reference_for) -> Any:
    """The same over a JSON-like value, object keys included."""
    if isinstance(value, str):
        return shorten_credentialed_urls(value, reference_for)
    if isinstance(value, list):
        return [with_url_references(v, reference_for) for v in value]
    if isinstance(value, dict):
        return {
            shorten_credentialed_urls(k, reference_for): with_url_references(v, reference_for) for k, v in value.items()
        }
    return value


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
    (already masked) and the model gets a preview and the file's name."""
    content = json.dumps(result, ensure_ascii=False)
    if len(content) <= settings.OWLAI_SPILL_CHARS or items is None or not result.get(items):
        return content
    path = spill_path(call.ctx)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = {"origin": {"tool": call.tool.name, "target": call.target.name}, "items": items, "result": result}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle, ensure_ascii=False)
    preview, shown = page(result, items, offset=0, limit=settings.OWLAI_SPILL_PREVIEW_ROWS)
    preview["spilled"] = {
        "file": path.name,
        "total": len(result[items]),
        "shown": shown,
        "note": gettext("the full (masked) result was saved; read the rest with read_spill (file, offset, limit)"),
    }
    return json.dumps(preview, ensure_ascii=False)


def page(result: dict[str, Any], items: str, *, offset: int, limit: int) -> tuple[dict[str, Any], int]:
    """`result` with only `limit` of its `items` from `offset`, fewer when
    they would not fit in OWLAI_SPILL_CHARS (at least one is always kept):
    (the page, how many items it holds)."""
    budget = settings.OWLAI_SPILL_CHARS
    chosen = result[items][offset : offset + limit]
    size = len(json.dumps({**result, items: []}, ensure_ascii=False))
    kept = 0
    for item in chosen:
        size += len(json.dumps(item, ensure_ascii=False)) + 2
        if kept and size > budget:
            break
        kept += 1
    return {**result, items: chosen[:kept]}, kept
