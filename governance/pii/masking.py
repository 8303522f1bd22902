"""Masking tool results before they become model input.

A masked value becomes a per-conversation token such as `[전화번호-3]`: the same
(normalised) value is always the same token within one conversation, and the
map from tokens to originals stays on the server (`chat.vault`). This module
is the pure part: token format, the vault interface, an in-memory vault for
dry runs, and the walk that masks every string of a tool result.

`mask_string` runs once per string cell of every tool result, so it is on the
hot path: it works on the detectors' plain tuples (`detect_spans`, kind ids as
`str`), builds no closure or Detection object, and the in-memory vault
remembers each value as written, so a value seen before is not normalised
again.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from governance.pii.detect.labels import pieces
from governance.pii.detect.match import detect_spans as _match_spans
from governance.pii.detect.pipeline import HINTED_READER
from governance.pii.detectors import NORMALISERS
from governance.pii.kinds import TOKEN_LABELS
from governance.pii.known_values import EMPTY, KnownValues, normalised

LABEL_BY_KIND: dict[str, str] = {kind.value: label for kind, label in TOKEN_LABELS.items()}
KIND_BY_LABEL: dict[str, str] = {label: kind for kind, label in LABEL_BY_KIND.items()}
TOKEN_PATTERN = re.compile(r"\[(" + "|".join(map(re.escape, KIND_BY_LABEL)) + r")-(\d{1,9})\]")


def format_token(kind: str, number: int) -> str:
    return f"[{LABEL_BY_KIND.get(kind, kind)}-{number}]"


def parse_token(token: str) -> tuple[str, int] | None:
    match = TOKEN_PATTERN.fullmatch(token)
    if match is None:
        return None
    return KIND_BY_LABEL[match.group(1)], int(match.group(2))


def _normalise_unknown(value: str) -> str:
    return " ".join(value.split()).casefold()


def _normaliser(kind: str) -> Callable[[str], str]:
    # normalise(PiiKind(kind), .) for a known kind, without the Enum lookup (a
    # PiiKind member finds its entry too: it hashes like its id).
    return NORMALISERS.get(kind, _normalise_unknown)


def normalised_value(kind: str, value: str) -> str:
    return NORMALISERS.get(kind, _normalise_unknown)(value)


class Vault(Protocol):
    def token_for(self, kind: str, value: str) -> str: ...

    def original_for(self, kind: str, number: int) -> str | None: ...

    def known_values(self, turn_id: int | None = None) -> KnownValues: ...


_KindEntries = tuple[dict[str, str], dict[str, str], list[str], str, Callable[[str], str]]


class InMemoryVault:
    """A vault that lives for one run (dry-run CLI, benchmarks, tests)."""

    def __init__(self) -> None:
        # Per kind: (token by value as written, token by normalised value,
        # originals in number order, token prefix "[전화번호-", the kind's
        # normaliser). A value seen before as written skips normalisation:
        # equal raw values always normalise alike. A PiiKind member and its id
        # share one entry (they are equal and hash alike).
        self._kinds: dict[str, _KindEntries] = {}

    def token_for(self, kind: str, value: str) -> str:
        entries = self._kinds.get(kind)
        if entries is None:
            entries = self._kinds[kind] = ({}, {}, [], format_token(kind, 0)[:-2], _normaliser(kind))
        token = entries[0].get(value)
        if token is None:
            by_value, by_normalised, originals, prefix, normalise = entries
            normalised = normalise(value)  # == normalised_value(kind, value)
            token = by_normalised.get(normalised)
            if token is None:
                originals.append(value)
                # == format_token(kind, len(originals))
                token = by_normalised[normalised] = f"{prefix}{len(originals)}]"
            by_value[value] = token
        return token

    def known_values(self, turn_id: int | None = None) -> KnownValues:
        """Every original this vault holds, as one matcher."""
        return KnownValues(
            (original, kind, format_token(kind, number))
            for kind, entries in self._kinds.items()
            for number, original in enumerate(entries[2], 1)
        )

    def original_for(self, kind: str, number: int) -> str | None:
        entries = self._kinds.get(kind)
        if entries is None:
            return None
        originals = entries[2]
        if type(number) is not int:  # 1.0, True, ...: equal numbers find the entry, as dict keys did
            return next((original for i, original in enumerate(originals, 1) if i == number), None)
        return originals[number - 1] if 1 <= number <= len(originals) else None


class RecordingVault:
    """Stands in for a vault in a first masking pass: records every (kind,
    value) the pass asks a token for, so a database vault can resolve them
    all at once (DbVault.prefetch) before the real pass."""

    STAND_IN = "[?]"

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str], None] = {}

    def token_for(self, kind: str, value: str) -> str:
        self.requests[(kind, value)] = None
        return self.STAND_IN

    def original_for(self, kind: str, number: int) -> str | None:
        return None


def mask_with(
    vault: Vault, masking: Callable[[Vault, MaskCounts | None], Any], counts: MaskCounts | None = None
) -> Any:
    """Run `masking(vault, counts)` so that a vault with `prefetch` (the
    database vault) is asked once for all values instead of once per value.

    A first pass with a RecordingVault notes what would be tokenised. With
    nothing to tokenise, its result is already the final one (no token was
    put in it) and nothing was counted; otherwise the vault prefetches every
    value and the real pass runs. The second detector pass is paid only by
    results that hold personal data, and saves a query per value."""
    prefetch = getattr(vault, "prefetch", None)
    if prefetch is None:
        return masking(vault, counts)
    recording = RecordingVault()
    first = masking(recording, None)
    if not recording.requests:
        return first
    prefetch(recording.requests)
    return masking(vault, counts)


# Where a masked value came from, for the masking statistics:
# (table, column) for a classified column, ("", "") for a detector hit in text.
Origin = tuple[str, str]


class MaskCounts(Counter):
    """Counter[(table, column, kind)] of masked values."""

    def add(self, origin: Origin, kind: str) -> None:
        self[(origin[0], origin[1], kind)] += 1


def mask_string(
    text: str,
    vault: Vault,
    counts: MaskCounts | None = None,
    origin: Origin = ("", ""),
    known: KnownValues = EMPTY,
    own: frozenset[str] = frozenset(),
) -> str:
    """Replace every value the vault already holds (`known`), then every
    detector hit, in `text` with its token. A detector hit that is one of
    `own` (normalised: the model's own literals) stays: its token would say
    whether the vault already held it."""
    if known is not EMPTY and known:  # the identity test first: KnownValues.__bool__ is a Python call
        tokens = [m.span() for m in TOKEN_PATTERN.finditer(text)] if "[" in text else None
        if counts is None:
            text = known.replace(text, keep=tokens)
        else:
            text = known.replace(text, lambda kind: counts.add(origin, kind), keep=tokens)
    if len(text) < 6:
        return text  # shorter than any value (detect_spans says the same, one call later)
    # (kind id, start, end, confidence), left to right: detectors.detect_spans
    # without its wrapper (one Python call less per cell).
    spans = _match_spans(text, HINTED_READER)
    if spans and own:
        spans = [span for span in spans if normalised(text[span[1] : span[2]]) not in own]
    if not spans:
        return text
    if len(spans) == 1:  # the usual case: a cell that is one value, or a memo with one
        kind, start, end, _ = spans[0]
        token = vault.token_for(kind, text[start:end])
        if counts is not None:
            counts[origin[0], origin[1], kind] += 1  # == counts.add(origin, kind), one call less
        if start == 0 and end == len(text):
            return token
        return text[:start] + token + text[end:]
    token_for = vault.token_for
    pieces: list[str] = []
    pos = 0
    for kind, start, end, _ in spans:
        pieces.append(text[pos:start])
        pieces.append(token_for(kind, text[start:end]))
        if counts is not None:
            counts[origin[0], origin[1], kind] += 1
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)


def mask_any(
    value: Any,
    vault: Vault,
    counts: MaskCounts | None = None,
    origin: Origin = ("", ""),
    known: KnownValues = EMPTY,
    own: frozenset[str] = frozenset(),
) -> Any:
    """Known values and detectors over every string of a JSON-like value,
    recursively, object keys included: a key can carry a value as well as a
    string can (`json_object_agg(name, 1)`)."""
    if isinstance(value, str):
        return mask_string(value, vault, counts, origin, known, own) if value else value
    if isinstance(value, int | float) and not isinstance(value, bool):
        # A number can be personal data as well as a string can (a resident
        # registration or phone number sent as a JSON number): checked in its
        # written form, replaced by the token when it is one.
        written = str(value)
        masked = mask_string(written, vault, counts, origin, known, own)
        if masked == written and isinstance(value, int) and value > 0:
            # A phone number stored as a number has lost its leading zero.
            padded = "0" + written
            masked = mask_string(padded, vault, counts, origin, known, own)
            return value if masked == padded else masked
        return value if masked == written else masked
    if isinstance(value, list):
        cut = piece_cells(value) if len(value) > 1 else None
        if cut:
            return [
                _piece_token(cut[i], vault, counts, origin)
                if i in cut
                else mask_any(v, vault, counts, origin, known, own)
                for i, v in enumerate(value)
            ]
        return [mask_any(v, vault, counts, origin, known, own) for v in value]
    if isinstance(value, dict):
        masked: dict = {}
        for k, v in value.items():
            key = mask_string(k, vault, counts, origin, known, own) if isinstance(k, str) and k else k
            # Two keys masked to one token must not drop a value: keep both.
            while key in masked:
                key = f"{key}#"
            masked[key] = mask_any(v, vault, counts, origin, known, own)
        return masked
    return value


def mask_known_any(value: Any, known: KnownValues) -> Any:
    """Only the values the vault already holds, replaced by their tokens, in
    every string (and number) of a JSON-like value; nothing detected anew.
    For what a person is shown as the model wrote it (an approval card): a
    destination the model chose must be seen as written, and only what the
    run itself keeps masked stays masked."""
    if not known:
        return value
    if isinstance(value, str):
        if not value:
            return value
        tokens = [m.span() for m in TOKEN_PATTERN.finditer(value)] if "[" in value else None
        return known.replace(value, keep=tokens)
    if isinstance(value, int | float) and not isinstance(value, bool):
        written = str(value)
        masked = mask_known_any(written, known)
        return value if masked == written else masked
    if isinstance(value, list):
        return [mask_known_any(v, known) for v in value]
    if isinstance(value, dict):
        masked: dict = {}
        for k, v in value.items():
            key = mask_known_any(k, known) if isinstance(k, str) else k
            while key in masked:
                key = f"{key}#"
            masked[key] = mask_known_any(v, known)
        return masked
    return value


def mask_rows(
    rows: list[list[Any]],
    *,
    column_kinds: dict[int, str],
    column_origins: dict[int, Origin],
    vault: Vault,
    counts: MaskCounts | None = None,
    known: KnownValues = EMPTY,
    literal_columns: frozenset[int] | set[int] = frozenset(),
    own_columns: frozenset[int] | set[int] = frozenset(),
    own_values: frozenset[str] = frozenset(),
) -> list[list[Any]]:
    """SQL result rows: a column derived from personal data is masked whole
    (token of the column's kind); a column made only of the model's own
    literals (`literal_columns`: nothing read, nothing re-identified) comes
    back as written, so that matching it against the vault cannot tell the
    model which of its guesses the vault holds; every other cell goes through
    the known values, then the detectors. A known value split over several
    cells of one row ("010-1234" | "5678") masks each of those cells whole.
    In `own_columns` (literals next to data that is not free text) the
    model's own literals (`own_values`, normalised) are left as written,
    however the vault or the detectors would see them: no oracle either."""
    own_known = known.excluding(own_values) if own_columns and own_values else known
    own = own_values if own_columns else frozenset()
    skipped = set(column_kinds) | set(literal_columns)
    masked: list[list[Any]] = []
    for row in rows:
        split = _split_known_values(row, column_kinds, literal_columns, own_known) if known else None
        cut = piece_cells(row, skipped) if len(row) > 1 else None
        out = []
        for index, cell in enumerate(row):
            kind = column_kinds.get(index)
            origin = column_origins.get(index, ("", ""))
            if kind is not None and cell is not None and cell != "":
                if counts is not None:
                    counts.add(origin, kind)
                out.append(vault.token_for(kind, str(cell)))
            elif index in literal_columns:
                out.append(cell)
            elif split and index in split:
                token, hit_kind = split[index]
                if counts is not None:
                    counts.add(origin, hit_kind)
                out.append(token)
            elif cut and index in cut:
                out.append(_piece_token(cut[index], vault, counts, origin))
            elif index in own_columns:
                out.append(mask_any(cell, vault, counts, origin, own_known, own))
            else:
                out.append(mask_any(cell, vault, counts, origin, known))
        masked.append(out)
    return masked


def _split_known_values(
    row: list[Any], column_kinds: dict[int, str], literal_columns: frozenset[int] | set[int], known: KnownValues
) -> dict[int, tuple[str, str]]:
    """Cells of `row` holding a piece of a known value that spans several
    cells (read in column order, as the model reads them): index -> (token,
    kind). Cells masked by lineage or made of literals take no part."""
    spans: list[tuple[int, int, int]] = []  # (cell index, start, end) in the joined text
    parts: list[str] = []
    position = 0
    for index, cell in enumerate(row):
        if index in column_kinds or index in literal_columns or isinstance(cell, bool):
            continue
        if isinstance(cell, str | int | float) and cell != "":
            text = str(cell)
            spans.append((index, position, position + len(text)))
            parts.append(text)
            position += len(text)
    if len(spans) < 2:
        return {}
    found: dict[int, tuple[str, str]] = {}
    for hit in known.hits("".join(parts)):
        touched = [index for index, start, end in spans if start < hit.end and hit.start < end]
        if len(touched) > 1:
            for index in touched:
                found[index] = (hit.token, hit.kind)
    return found


def piece_cells(cells: list[Any], skipped: set[int] | frozenset[int] = frozenset()) -> dict[int, tuple[str, str]]:
    """Cells that each hold a piece of one value (a row or list read in
    order: "010" | "1234" | "5678", or a label cell then the pieces):
    index -> (kind, the value as the pieces spell it). Each such cell is
    masked whole with the value's token; alone, none is a value.

    Only short digit strings and numbers (2-7 digits) are pieces; `skipped`
    cells (masked by lineage, the model's literals) take no part and break
    adjacency, and the cells are joined with " | " and read by the
    detectors' pieces finder (governance.pii.detect.labels.pieces)."""
    short = 0
    for index, cell in enumerate(cells):
        if index not in skipped and _is_piece(cell):
            short += 1
            if short > 1:
                break
        else:
            short = 0
    else:
        return {}
    spans: list[tuple[int, int, int]] = []  # (cell index, start, end) in the joined text
    parts: list[str] = []
    position = 0
    for index, cell in enumerate(cells):
        # A skipped cell stands as a letter: no piece run reaches across it.
        text = "x" if index in skipped or isinstance(cell, bool) else _piece_text(cell)
        spans.append((index, position, position + len(text)))
        parts.append(text)
        position += len(text) + len(_PIECE_JOINER)
    joined = _PIECE_JOINER.join(parts)
    found: dict[int, tuple[str, str]] = {}
    for kind, start, end in pieces(joined):
        touched = [index for index, s, e in spans if s < end and start < e]
        if len(touched) > 1 and all(_is_piece(cells[index]) for index in touched):
            for index in touched:
                found[index] = (kind, joined[start:end])
    return found


_PIECE_JOINER = " | "


def _piece_text(cell: Any) -> str:
    if isinstance(cell, str):
        return cell
    if isinstance(cell, int | float):
        return str(cell)
    return ""


def _is_piece(cell: Any) -> bool:
    if isinstance(cell, str):
        return 2 <= len(cell) <= 7 and cell.isascii() and cell.isdigit()
    return isinstance(cell, int) and not isinstance(cell, bool) and 10 <= cell < 10_000_000


def _piece_token(hit: tuple[str, str], vault: Vault, counts: MaskCounts | None, origin: Origin) -> str:
    kind, value = hit
    if counts is not None:
        counts.add(origin, kind)
    return vault.token_for(kind, value)


def tokens_in(text: str) -> list[tuple[str, int, int, int]]:
    """(kind, number, start, end) of every token in `text`."""
    return [(KIND_BY_LABEL[m.group(1)], int(m.group(2)), m.start(), m.end()) for m in TOKEN_PATTERN.finditer(text)]


def replace_tokens(text: str, original_for: Callable[[str, int], str | None]) -> str:
    """Swap tokens for originals where `original_for` knows them; others stay."""

    def swap(match: re.Match) -> str:
        original = original_for(KIND_BY_LABEL[match.group(1)], int(match.group(2)))
        return match.group(0) if original is None else original

    return TOKEN_PATTERN.sub(swap, text)
