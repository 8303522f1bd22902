"""Fold: one spelling for the many ways a number is written.

After decoding, the text is folded with an offset map (governance.pii.detect
.offsets):

* compatibility forms, invisible characters and dashes as the match stage
  reads them (governance.pii.textforms.NORMALISE: full-width digits, circled
  numbers, zero-width spaces, soft hyphens, middle dots and 'ㅡ' as dashes);
* inside a number run (digits, number words, look-alike letters and
  separators, 8+ digits in all): Hangul number words (공/영/빵 0, 일 1, 이 2,
  삼 3, 사 4, 오 5, 육/륙 6, 칠 7, 팔 8, 구 9), as speech-to-text writes digits,
  Hanja ones (〇零 0, 一壹 1, 二貳 2, 三參 3, 四 4, 五 5, 六 6, 七 7, 八 8, 九 9),
  and letters written for digits (O/o 0, l/I 1) when they stand apart from
  other letters;
* the separators of a number run (a comma too, between number words only):
  a line break alone is dropped (a value
  wrapped by a line) unless the value has other separators, and when its groups are joined by anything but one
  and the same hyphen, dot or space (doubled, mixed, underscore, slash,
  backslash, tilde: ``010--1234--5678``, ``100000 10_100000``), every
  separator becomes one space, the form the match stage reads with context
  rules (a spaced run is an account only next to an account word; as hyphens,
  ``15/01/2024 10:30`` would be a 4-group account). Parentheses stay as they
  are: ``(02)123-4567``;
* joined (a third reading): in a run of number words (half its digits at
  least), every separator goes. Speech is grouped by its pauses, not by the value's layout: a phone
  read out in pairs (``공일 공일 이삼 사오 육칠 팔``) folds to groups no
  format has, and only the bare digits (``01012345678``) read as the
  phone. A bare run must then be a value whole (an account needs its word
  as ever), so prose with a few number words stays prose (``사오 개``)."""

from __future__ import annotations

import re

from governance.pii.detect.match import opaque_runs
from governance.pii.detect.offsets import Builder, Mapped
from governance.pii.detect.prefilter import normalised_text
from governance.pii.textforms import NORMALISE

_WORD_DIGITS = {
    **dict.fromkeys("공영빵〇零", "0"),
    **dict.fromkeys("일一壹", "1"),
    **dict.fromkeys("이二貳", "2"),
    **dict.fromkeys("삼三參", "3"),
    **dict.fromkeys("사四", "4"),
    **dict.fromkeys("오五", "5"),
    **dict.fromkeys("육륙六", "6"),
    **dict.fromkeys("칠七", "7"),
    **dict.fromkeys("팔八", "8"),
    **dict.fromkeys("구九", "9"),
}
_LOOKALIKES = {"O": "0", "o": "0", "l": "1", "I": "1"}
_WORDS = "".join(_WORD_DIGITS)
_SEPARATORS = " \t\r\n\\-._/~()"  # parentheses: "(02)123-4567", kept as they are
# A number run: digit-like characters and short separator runs, starting and
# ending with a digit-like character. Checked further in _fold_run.
# Look-alike letters count only as a run that stands apart from other letters
# ("O1O-l234-5678", "1OO1", not "Hello" or "Iowa").
_UNIT = rf"(?:[0-9{_WORDS}]|(?<![A-Za-z])[OolI]+(?![A-Za-z]))"
# A comma separates groups only between number words, where speech-to-text
# puts one at a pause (공일영, 팔육육오, 팔구사칠); between digits it is an
# amount's or a list's (1,234,567).
_WORD_COMMA = rf"(?<=[{_WORDS}]),[ \t]?(?=[{_WORDS}])"
_RUN = re.compile(rf"{_UNIT}(?:(?:[{re.escape(_SEPARATORS)}]{{0,4}}|{_WORD_COMMA}){_UNIT})+")
_MIN_DIGITS = 8
_GROUPS = re.compile(rf"[0-9]+|[{re.escape(_SEPARATORS)},]+")
_LINE_BREAKS = str.maketrans("", "", "\r\n")


def fold(text: str, hyphens: bool = False, joined: bool = False) -> Mapped | None:
    """The folded text with its offset map, or None when nothing folds.

    `hyphens`: odd separators without spaces become hyphens instead (a run
    with a space ends a value: ``010-1234-5678 12:30``, ``a / b``; dots stay
    as written: ``10.0.0.1``).
    The pipeline reads both forms: a layout that is an account by itself
    (``011--016--7106``) needs hyphens; spaced groups need an account word.
    `joined`: only runs with number words fold, their separators dropped."""
    out = Builder()
    changed = False
    first = normalised_text(text)
    if first is not text and first != text:
        for i, ch in enumerate(text):
            out.put(NORMALISE.get(ord(ch), ch), i, i + 1)
        mapped = out.build()
        changed = True
    else:
        mapped = None
    folded = _fold_runs(first, hyphens, joined)
    if folded is None:
        return mapped if changed else None
    return mapped.then(folded) if mapped is not None else folded


def _fold_runs(text: str, hyphens: bool, joined: bool = False) -> Mapped | None:
    out = Builder()
    pos = 0
    changed = False
    # Hex tokens (UUIDs, hashes) are opaque to the match stage; folding their
    # hyphens away would make their digits look like values.
    opaque = opaque_runs(text) if "-" in text else []
    for m in _RUN.finditer(text):
        if opaque and any(s < m.end() and m.start() < e for s, e in opaque):
            continue
        run = _fold_run(text, m.start(), m.end(), hyphens, joined)
        if run is None:
            continue
        out.copy(text, pos, m.start())
        for piece, s, e in run:
            out.put(piece, s, e)
        pos = m.end()
        changed = True
    if not changed:
        return None
    out.copy(text, pos, len(text))
    return out.build()


def _fold_run(
    text: str, start: int, end: int, hyphens: bool, joined: bool = False
) -> list[tuple[str, int, int]] | None:
    """The pieces (replacement, source start, source end) of one run, or None to keep it."""
    chars: list[tuple[str, int]] = []  # (character, source offset), digits made ASCII
    words = spoken = 0
    for i in range(start, end):
        ch = text[i]
        if ch in _WORD_DIGITS:
            chars.append((_WORD_DIGITS[ch], i))
            words += 1
            spoken += 1
        elif ch in _LOOKALIKES:
            chars.append((_LOOKALIKES[ch], i))
            words += 1
        else:
            chars.append((ch, i))
    digits = "".join(ch for ch, _ in chars)
    groups = _GROUPS.findall(digits)
    n_digits = sum(len(g) for g in groups if g[0].isdigit())
    if n_digits < _MIN_DIGITS:
        return None
    if joined:
        if spoken * 2 < n_digits:
            return None  # mostly digits (and look-alike letters): their layout stands as written
        joined_pieces = []
        k = seen = 0
        for group in groups:
            n = len(group)
            if group[0].isdigit():
                joined_pieces.extend((d, i, i + 1) for d, (_, i) in zip(group, chars[k : k + n], strict=True))
                seen += n
            else:  # a pause goes; parentheses stay, as in the other readings
                kept = group if "(" in group or ")" in group else ""
                if seen == 2 and digits[:2] == "82":
                    kept = " "  # the country code stands apart: 팔이 일공 ... is +82 10-...
                joined_pieces.append((kept, chars[k][1], chars[k + n - 1][1] + 1))
            k += n
        return joined_pieces
    separators = [g for g in groups if not g[0].isdigit() and "(" not in g and ")" not in g]
    uniform = all(len(s) == 1 and s in "-. " for s in separators) and len(set(separators)) <= 1
    if uniform and not words:
        return None
    # A line break alone joins the groups around it (a value wrapped inside a
    # group) unless the value has other separators: then the break stands
    # where one of them stood (4000-0000-0000 / 0002 wrapped at the end).
    breaks_separate = any(s.translate(_LINE_BREAKS) for s in separators)
    pieces = []
    k = 0
    for group in groups:
        n = len(group)
        offsets = [i for _, i in chars[k : k + n]]
        if group[0].isdigit():
            pieces.extend((d, i, i + 1) for d, i in zip(group, offsets, strict=True))
        elif not uniform and "(" not in group and ")" not in group:
            kept = group.translate(_LINE_BREAKS)
            if not hyphens:
                joiner = " "
            elif " " in kept or not kept.strip("."):
                joiner = " " if " " in kept else kept  # spaced runs end a value; dots stay as written
            else:
                joiner = "-"
            pieces.append((joiner if kept or breaks_separate else "", offsets[0], offsets[-1] + 1))
        else:
            pieces.append((group, offsets[0], offsets[-1] + 1))
        k += n
    return pieces
