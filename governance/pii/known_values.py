"""Known-value masking: every original the conversation's vault holds becomes
its token wherever it appears in a tool's output, before the format detectors.

Lineage decides which SQL outputs derive from personal-data columns, and the
detectors find values by their shape; neither sees a name that reaches an
output some other way (echoed back from a literal, quoted in an error
message, inside a JSON key, in a document hit, in a column nobody classified).
But once a value has been masked in a conversation, the vault knows it, so
any later occurrence of it in any output can be replaced exactly.

One multi-pattern automaton (Aho-Corasick, `ahocorasick_rs`) per vault
content: a search costs time in the length of the text, not in the number of
values, so a conversation with 100,000 vaulted values costs what one with 10
does (bench/executor.py measures it). Building the automaton is linear in the
total length of the values and is cached by whoever owns the vault.

Matching is on a NORMALISED form of both sides (`normalised_with_offsets`):
NFKC (full-width digits, composed Hangul from decomposed jamo as macOS file
names write it), lowercased, and without any character that is not a letter
or digit (spaces, punctuation, dashes, dots, invisible and format
characters such as zero-width spaces or soft hyphens). "김 민준", "김\u200b민준",
"０１０.１２３４.５６７８" and "010 - 1234 - 5678" are all the vaulted value; the
replacement covers the span of the text as written. Leftmost-longest, so
"김민준" wins over a vaulted "김민" at the same position.

Minimum length: values shorter than MIN_VALUE_CHARS (2) are not searched for.
A one-character value would replace that character in every word of every
result. Two characters is the shortest Korean name (e.g. "이산"), so the bar
cannot be higher without letting short names through; the price is that a
two-syllable name is also masked inside longer words that contain it, which
is the safe direction. Every other personal-data kind is far longer.

Pure module: no Django.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import ahocorasick_rs

MIN_VALUE_CHARS = 2

# Runs of letters and digits; everything between them is dropped by the
# normalisation (an underscore counts as punctuation).
_KEPT_RUN = re.compile(r"[^\W_]+")
# Runs of JSON / JavaScript escapes (`json.dumps` writes "\uae40\ubbfc\uc900"
# for 김민준) or of percent-encoded UTF-8 (a name in a URL): read decoded.
_ENCODED_RUN = re.compile(r"(?:\\u[0-9a-fA-F]{4})+|(?:%[0-9a-fA-F]{2})+")
_RUN = re.compile(_ENCODED_RUN.pattern + r"|[^\W_]+")
# What the normalisation drops from text NFKC leaves alone.
_DROPPED = re.compile(r"[\W_]+")
# A run that NFKC leaves alone needs no per-character offset map.
_PLAIN_RUN = re.compile(r"[a-z0-9\uac00-\ud7a3]+")


def _clusters(run: str):
    """(start, end) of each base character with the jamo vowels / finals and
    combining marks that follow it (they compose with it under NFKC)."""
    start = 0
    for position in range(1, len(run) + 1):
        if position < len(run):
            ch = run[position]
            if "\u1160" <= ch <= "\u11ff" or unicodedata.combining(ch):
                continue
        yield start, position
        start = position


def _decoded(run: str) -> list[tuple[str, int, int]] | None:
    """(character, start, end) of an escaped or percent-encoded run, offsets
    within the run; None when it does not decode (then read as written)."""
    out: list[tuple[str, int, int]] = []
    if run.startswith("\\"):
        codes = [int(run[i + 2 : i + 6], 16) for i in range(0, len(run), 6)]
        i = 0
        while i < len(codes):
            code, width = codes[i], 1
            if 0xD800 <= code < 0xDC00 and i + 1 < len(codes) and 0xDC00 <= codes[i + 1] < 0xE000:
                code, width = 0x10000 + ((code - 0xD800) << 10) + (codes[i + 1] - 0xDC00), 2
            out.append((chr(code), i * 6, (i + width) * 6))
            i += width
        return out
    data = bytes(int(run[i + 1 : i + 3], 16) for i in range(0, len(run), 3))
    position = 0
    while position < len(data):
        for width in (1, 2, 3, 4):
            try:
                char = data[position : position + width].decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append((char, position * 3, (position + width) * 3))
            position += width
            break
        else:
            return None
    return out


def normalised_with_offsets(text: str) -> tuple[str, list[int], list[int]]:
    """`text` normalised for matching, with for each of its characters the
    start and end offset in `text` of what it came from."""
    pieces: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    encoded = "\\u" in text or "%" in text
    for match in (_RUN if encoded else _KEPT_RUN).finditer(text):
        run, base = match.group(0), match.start()
        if encoded and run[0] in "\\%":
            decoded = _decoded(run)
            if decoded is not None:
                for char, start, end in decoded:
                    folded = "".join(_KEPT_RUN.findall(_lower_same_length(unicodedata.normalize("NFKC", char))))
                    pieces.append(folded)
                    starts.extend([base + start] * len(folded))
                    ends.extend([base + end] * len(folded))
                continue
            run_match = _KEPT_RUN.search(run)  # undecodable: its letters and digits as written
            if run_match is None:
                continue
            base += run_match.start()
            run = run_match.group(0)
        lowered = _lower_same_length(run)
        if _PLAIN_RUN.fullmatch(lowered):
            pieces.append(lowered)
            starts.extend(range(base, base + len(run)))
            ends.extend(range(base + 1, base + len(run) + 1))
            continue
        for start, end in _clusters(run):
            folded = _lower_same_length(unicodedata.normalize("NFKC", run[start:end]))
            folded = "".join(_KEPT_RUN.findall(folded))
            pieces.append(folded)
            starts.extend([base + start] * len(folded))
            ends.extend([base + end] * len(folded))
    return "".join(pieces), starts, ends


def normalised(text: str) -> str:
    """The form known values are matched on (see the module docstring)."""
    return normalised_with_offsets(text)[0]


def _lower_same_length(text: str) -> str:
    """`text.lower()` with every offset kept: a character whose lowercase is
    longer (U+0130 -> "i̇") stays as it is, so positions in the lowered text
    are positions in `text`."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(low if len(low := ch.lower()) == 1 else ch for ch in text)


@dataclass(frozen=True)
class KnownHit:
    start: int
    end: int
    token: str
    kind: str


class _Layer:
    """One immutable automaton over some patterns."""

    __slots__ = ("automaton", "entries", "patterns")

    def __init__(self, by_pattern: dict[str, tuple[str, str]]) -> None:
        self.patterns = list(by_pattern)
        self.entries = list(by_pattern.values())  # (kind, token) per pattern
        self.automaton = ahocorasick_rs.AhoCorasick(self.patterns, matchkind=ahocorasick_rs.MatchKind.LeftmostLongest)

    def matches(self, lowered: str) -> list[tuple[int, int, int]]:
        return self.automaton.find_matches_as_indexes(lowered)


def _patterns(entries: Iterable[tuple[str, str, str]], known: set[str] | None = None) -> dict[str, tuple[str, str]]:
    by_pattern: dict[str, tuple[str, str]] = {}
    for original, kind, token in entries:
        if not isinstance(original, str):
            continue
        pattern = normalised(original)
        if len(pattern) < MIN_VALUE_CHARS or (known is not None and pattern in known):
            continue
        # Two originals that differ only in case share a pattern; either
        # token hides the value, the first one is kept.
        by_pattern.setdefault(pattern, (kind, token))
    return by_pattern


class KnownValues:
    """An immutable matcher over (original, kind, token) triples.

    A vault only grows, so a matcher is extended rather than rebuilt: new
    values go into a new small automaton (a layer), and layers are merged
    when a newer one reaches a quarter of the size of the one before it. A
    value then costs O(log n) rebuild work in total, and a search runs over
    O(log n) layers (a handful even at 100,000 values)."""

    __slots__ = ("_excluded", "_layers", "size")

    def __init__(
        self,
        entries: Iterable[tuple[str, str, str]] = (),
        *,
        _layers: tuple[_Layer, ...] | None = None,
        _excluded: frozenset[str] = frozenset(),
    ):
        if _layers is None:
            by_pattern = _patterns(entries)
            _layers = (_Layer(by_pattern),) if by_pattern else ()
        self._layers = _layers
        self._excluded = _excluded
        self.size = sum(len(layer.patterns) for layer in _layers)

    def excluding(self, values: Iterable[str]) -> KnownValues:
        """The same matcher, except that it leaves `values` (in any spelling)
        where they are: the model's own literals, echoed back next to data."""
        excluded = frozenset(n for v in values if isinstance(v, str) and len(n := normalised(v)) >= MIN_VALUE_CHARS)
        if not excluded or not self._layers:
            return self
        return KnownValues(_layers=self._layers, _excluded=self._excluded | excluded)

    def __bool__(self) -> bool:
        return bool(self._layers)

    def extended(self, entries: Iterable[tuple[str, str, str]]) -> KnownValues:
        """A matcher that also knows `entries`; `self` is unchanged."""
        known = {pattern for layer in self._layers for pattern in layer.patterns} if self._layers else set()
        by_pattern = _patterns(entries, known)
        if not by_pattern:
            return self
        layers = [*self._layers, _Layer(by_pattern)]
        while len(layers) > 1 and len(layers[-1].patterns) * 4 >= len(layers[-2].patterns):
            newer, older = layers.pop(), layers.pop()
            merged = dict(zip(older.patterns, older.entries, strict=True))
            merged.update(zip(newer.patterns, newer.entries, strict=True))
            layers.append(_Layer(merged))
        return KnownValues(_layers=tuple(layers), _excluded=self._excluded)

    def _matches(self, text: str) -> list[tuple[int, int, str, str]]:
        """(start, end, kind, token) in `text` as written, non-overlapping,
        left to right; across layers the leftmost, then the longest, match
        wins."""
        if unicodedata.is_normalized("NFKC", text) and "\\u" not in text and "%" not in text:
            # The usual case, and mostly without a match: the folded text
            # without building the offset map first (C speed).
            folded = _DROPPED.sub("", _lower_same_length(text))
            if len(folded) < MIN_VALUE_CHARS or not self._folded(folded):
                return []
        folded, starts, ends = normalised_with_offsets(text)
        if len(folded) < MIN_VALUE_CHARS:
            return []
        excluded = self._excluded
        return [
            (starts[start], ends[end - 1], kind, token)
            for start, end, kind, token in self._folded(folded)
            if not excluded or folded[start:end] not in excluded
        ]

    def _folded(self, lowered: str) -> list[tuple[int, int, str, str]]:
        if len(self._layers) == 1:
            layer = self._layers[0]
            entries = layer.entries
            return [(start, end, *entries[index]) for index, start, end in layer.matches(lowered)]
        found = []
        for layer in self._layers:
            entries = layer.entries
            found.extend((start, end, *entries[index]) for index, start, end in layer.matches(lowered))
        if not found:
            return found
        found.sort(key=lambda hit: (hit[0], hit[0] - hit[1]))
        chosen = []
        position = 0
        for hit in found:
            if hit[0] >= position:
                chosen.append(hit)
                position = hit[1]
        return chosen

    def hits(self, text: str) -> list[KnownHit]:
        """Non-overlapping occurrences in `text`, left to right."""
        if not self._layers or len(text) < MIN_VALUE_CHARS:
            return []
        return [KnownHit(start, end, token, kind) for start, end, kind, token in self._matches(text)]

    def replace(self, text: str, on_hit=None, keep: list[tuple[int, int]] | None = None) -> str:
        """`text` with every known value replaced by its token. `on_hit(kind)`
        is called once per replacement (masking statistics). Matches that
        overlap a span in `keep` (tokens already in the text: a value may be
        spelled inside a token's label, "메일" in "[이메일-1]") are left alone."""
        if not self._layers or len(text) < MIN_VALUE_CHARS:
            return text
        matches = self._matches(text)
        if matches and keep:
            matches = [m for m in matches if not any(m[0] < end and start < m[1] for start, end in keep)]
        if not matches:
            return text
        pieces: list[str] = []
        position = 0
        for start, end, kind, token in matches:
            pieces.append(text[position:start])
            pieces.append(token)
            if on_hit is not None:
                on_hit(kind)
            position = end
        pieces.append(text[position:])
        return "".join(pieces)


EMPTY = KnownValues(())
