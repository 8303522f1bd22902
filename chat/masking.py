"""Masking tool results before they become model input (seed 000).

A masked value becomes a per-conversation token such as `[전화번호-3]`: the same
(normalised) value is always the same token within one conversation, and the
map from tokens to originals stays on the server (`chat.vault`). This module
is the pure part: token format, the vault interface, an in-memory vault for
dry runs, and the walk that masks every string of a tool result.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from governance.pii_detectors import PiiKind, mask_text, normalise

LABEL_BY_KIND: dict[str, str] = {kind.value: kind.label for kind in PiiKind}
KIND_BY_LABEL: dict[str, str] = {label: kind for kind, label in LABEL_BY_KIND.items()}
TOKEN_PATTERN = re.compile(r"\[(" + "|".join(map(re.escape, KIND_BY_LABEL)) + r")-(\d{1,9})\]")


def format_token(kind: str, number: int) -> str:
    return f"[{LABEL_BY_KIND.get(kind, kind)}-{number}]"


def parse_token(token: str) -> tuple[str, int] | None:
    match = TOKEN_PATTERN.fullmatch(token)
    if match is None:
        return None
    return KIND_BY_LABEL[match.group(1)], int(match.group(2))


def normalised_value(kind: str, value: str) -> str:
    try:
        return normalise(PiiKind(kind), value)
    except ValueError:
        return " ".join(value.split()).casefold()


class Vault(Protocol):
    def token_for(self, kind: str, value: str) -> str: ...

    def original_for(self, kind: str, number: int) -> str | None: ...


class InMemoryVault:
    """A vault that lives for one run (dry-run CLI, benchmarks, tests)."""

    def __init__(self) -> None:
        self._numbers: dict[tuple[str, str], int] = {}
        self._originals: dict[tuple[str, int], str] = {}
        self._next: Counter[str] = Counter()

    def token_for(self, kind: str, value: str) -> str:
        key = (kind, normalised_value(kind, value))
        number = self._numbers.get(key)
        if number is None:
            self._next[kind] += 1
            number = self._numbers[key] = self._next[kind]
            self._originals[(kind, number)] = value
        return format_token(kind, number)

    def original_for(self, kind: str, number: int) -> str | None:
        return self._originals.get((kind, number))


# Where a masked value came from, for the masking statistics:
# (table, column) for a classified column, ("", "") for a detector hit in text.
Origin = tuple[str, str]


class MaskCounts(Counter):
    """Counter[(table, column, kind)] of masked values."""

    def add(self, origin: Origin, kind: str) -> None:
        self[(origin[0], origin[1], kind)] += 1


def mask_string(text: str, vault: Vault, counts: MaskCounts | None = None, origin: Origin = ("", "")) -> str:
    """Replace every detector hit in `text` with its token."""

    def replace(detection) -> str:
        if counts is not None:
            counts.add(origin, detection.kind.value)
        return vault.token_for(detection.kind.value, detection.value)

    return mask_text(text, replace)


def mask_any(value: Any, vault: Vault, counts: MaskCounts | None = None, origin: Origin = ("", "")) -> Any:
    """Detectors over every string of a JSON-like value, recursively."""
    if isinstance(value, str):
        return mask_string(value, vault, counts, origin) if value else value
    if isinstance(value, list):
        return [mask_any(v, vault, counts, origin) for v in value]
    if isinstance(value, dict):
        return {k: mask_any(v, vault, counts, origin) for k, v in value.items()}
    return value


def mask_rows(
    rows: list[list[Any]],
    *,
    column_kinds: dict[int, str],
    column_origins: dict[int, Origin],
    vault: Vault,
    counts: MaskCounts | None = None,
) -> list[list[Any]]:
    """SQL result rows: a column derived from personal data is masked whole
    (token of the column's kind); every other string cell goes through the
    detectors."""
    masked: list[list[Any]] = []
    for row in rows:
        out = []
        for index, cell in enumerate(row):
            kind = column_kinds.get(index)
            origin = column_origins.get(index, ("", ""))
            if kind is not None and cell is not None and cell != "":
                if counts is not None:
                    counts.add(origin, kind)
                out.append(vault.token_for(kind, str(cell)))
            else:
                out.append(mask_any(cell, vault, counts, origin))
        masked.append(out)
    return masked


def tokens_in(text: str) -> list[tuple[str, int, int, int]]:
    """(kind, number, start, end) of every token in `text`."""
    return [(KIND_BY_LABEL[m.group(1)], int(m.group(2)), m.start(), m.end()) for m in TOKEN_PATTERN.finditer(text)]


def replace_tokens(text: str, original_for: Callable[[str, int], str | None]) -> str:
    """Swap tokens for originals where `original_for` knows them; others stay."""

    def swap(match: re.Match) -> str:
        original = original_for(KIND_BY_LABEL[match.group(1)], int(match.group(2)))
        return match.group(0) if original is None else original

    return TOKEN_PATTERN.sub(swap, text)
