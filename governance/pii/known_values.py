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

Matching is case-insensitive (both sides lowercased) and leftmost-longest, so
"김민준" wins over a vaulted "김민" at the same position, and an e-mail written
in capitals is still found.

Minimum length: values shorter than MIN_VALUE_CHARS (2) are not searched for.
A one-character value would replace that character in every word of every
result. Two characters is the shortest Korean name (e.g. "이산"), so the bar
cannot be higher without letting short names through; the price is that a
two-syllable name is also masked inside longer words that contain it, which
is the safe direction. Every other personal-data kind is far longer.

Pure module: no Django.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import ahocorasick_rs

MIN_VALUE_CHARS = 2


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


class KnownValues:
    """An immutable matcher over (original, kind, token) triples."""

    __slots__ = ("_automaton", "_entries", "size")

    def __init__(self, entries: Iterable[tuple[str, str, str]]) -> None:
        by_pattern: dict[str, tuple[str, str]] = {}
        for original, kind, token in entries:
            if not isinstance(original, str):
                continue
            pattern = _lower_same_length(original.strip())
            if len(pattern) < MIN_VALUE_CHARS:
                continue
            # Two originals that differ only in case share a pattern; either
            # token hides the value, the first one is kept.
            by_pattern.setdefault(pattern, (kind, token))
        self.size = len(by_pattern)
        self._entries: list[tuple[str, str]] = list(by_pattern.values())
        self._automaton = (
            ahocorasick_rs.AhoCorasick(list(by_pattern), matchkind=ahocorasick_rs.MatchKind.LeftmostLongest)
            if by_pattern
            else None
        )

    def __bool__(self) -> bool:
        return self._automaton is not None

    def hits(self, text: str) -> list[KnownHit]:
        """Non-overlapping occurrences in `text`, left to right."""
        if self._automaton is None or len(text) < MIN_VALUE_CHARS:
            return []
        entries = self._entries
        return [
            KnownHit(start, end, entries[index][1], entries[index][0])
            for index, start, end in self._automaton.find_matches_as_indexes(_lower_same_length(text))
        ]

    def replace(self, text: str, on_hit=None) -> str:
        """`text` with every known value replaced by its token. `on_hit(kind)`
        is called once per replacement (masking statistics)."""
        if self._automaton is None or len(text) < MIN_VALUE_CHARS:
            return text
        matches = self._automaton.find_matches_as_indexes(_lower_same_length(text))
        if not matches:
            return text
        entries = self._entries
        pieces: list[str] = []
        position = 0
        for index, start, end in matches:
            kind, token = entries[index]
            pieces.append(text[position:start])
            pieces.append(token)
            if on_hit is not None:
                on_hit(kind)
            position = end
        pieces.append(text[position:])
        return "".join(pieces)


EMPTY = KnownValues(())
