"""A rewritten text and where each of its characters came from.

Decode and fold rewrite the text the detectors read (an entity becomes its
character, a number word its digit, a separator run one space); the mask
must still cover the original. A `Mapped` text keeps, for each of its
characters, the span of the source it stands for: a character decoded from
``&#48;`` stands for all five, the digits decoded from a base64 segment
stand for the whole segment. A span of the rewritten text then maps back to
the smallest source span covering all it stands for, and what a removed
character (a tag, an invisible character) stood between is covered when
both its neighbours are."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Mapped:
    text: str
    starts: list[int]  # source start of each character
    ends: list[int]  # source end (exclusive) of each character

    def source_span(self, start: int, end: int) -> tuple[int, int]:
        return self.starts[start], self.ends[end - 1]

    def then(self, inner: Mapped) -> Mapped:
        """`inner` rewrites self.text; the result maps inner's text to self's source."""
        starts, ends = self.starts, self.ends
        return Mapped(inner.text, [starts[i] for i in inner.starts], [ends[i - 1] for i in inner.ends])


def identity(text: str) -> Mapped:
    n = len(text)
    return Mapped(text, list(range(n)), list(range(1, n + 1)))


class Builder:
    """Appends pieces of output, each with the source span it stands for."""

    __slots__ = ("pieces", "starts", "ends")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.starts: list[int] = []
        self.ends: list[int] = []

    def copy(self, source: str, start: int, end: int) -> None:
        """source[start:end] unchanged, character for character."""
        if start < end:
            self.pieces.append(source[start:end])
            self.starts.extend(range(start, end))
            self.ends.extend(range(start + 1, end + 1))

    def put(self, replacement: str, start: int, end: int) -> None:
        """`replacement` stands for source[start:end] as a whole."""
        n = len(replacement)
        if n:
            self.pieces.append(replacement)
            self.starts.extend([start] * n)
            self.ends.extend([end] * n)

    def build(self) -> Mapped:
        return Mapped("".join(self.pieces), self.starts, self.ends)
