"""Stage 1 of the match stage: the prefilter, one cheap search over the raw
text (governance.pii.detect.match runs it, then its finders).

It finds the regions where a numeric format can be (a run of 9+ digits and
separators), and in non-ASCII text stops as well at a character that
normalisation changes or at a hint that the text may hide a value (number
words, escapes and markup, look-alike letters, odd separators, obfuscated
e-mails, labels that name a value), so that the text goes to the pipeline's
decode and fold (governance.pii.detect.pipeline) instead. Also here: the
normalised copy of a text that the match stage reads on a second pass, with
its offset map, and the slash/underscore separators between digits."""

from __future__ import annotations

import re
from bisect import bisect_right

from governance.pii.textforms import NORMALISE as _NORMALISE


def _char_class(code_points: list[int]) -> str:
    """A regex character class body for `code_points`, as ranges."""
    parts = []
    cps = sorted(code_points)
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo, hi = cps[i], cps[j]
        parts.append(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}")
        i = j + 1
    return "".join(parts)


# The BMP characters to normalise, and below (_STAGE1_RAW) every astral one:
# one range costs nothing, while the ~1,100 astral code points in the table
# (math digits, enclosed alphanumerics, tags) as ranges would make every
# search several times slower. An astral character (an emoji too) just sends
# the text through normalisation.
NORMALISABLE_BMP = _char_class([cp for cp in _NORMALISE if cp < 0x10000])
# Characters whose replacement is not one character ("" or "10" for ⑩):
# only these move offsets, so only these are recorded in the offset map.
_RESIZING = re.compile(f"[{_char_class([cp for cp, rep in _NORMALISE.items() if len(rep) != 1])}]")
# Any character the table may change. str.translate with the table (a dict
# of ~2,000 entries) looks every character up, which costs ten times this
# search on a memo; text without such a character (the usual Korean text on
# the slow path) is returned as it is.
_NORMALISABLE = re.compile(f"[{NORMALISABLE_BMP}\\U00010000-\\U0010ffff]")


def normalised_text(text: str) -> str:
    """text.translate(NORMALISE), without the translation when nothing would change."""
    return text if _NORMALISABLE.search(text) is None else text.translate(_NORMALISE)


# Slash and underscore between digits: "010/1234/5678", "900101_1234567".
_DIGIT_SEP = re.compile(r"[0-9][/_][0-9]", re.ASCII)
_SLASHED_RUN = re.compile(r"[0-9]+(?:[/_][0-9]+)+", re.ASCII)
_SLASH_AS_HYPHEN = str.maketrans("/_", "--")
_SLASH_AS_SPACE = str.maketrans("/_", "  ")

# The only regions where a numeric format can be: a run of 9+ digits and
# separators that starts and ends with a digit. A single character-class run
# is what `re` scans fastest (an alternation would disable that); the digit
# count is checked in Python. Amounts (commas), times (colons), short numbers
# and plain text never match, so most cells cost just this search. ASCII
# classes only (a bitmap test per character, much cheaper than Unicode `\d`):
# regions are looked for in normalised text, where full-width digits are ASCII.
#
# A region starts at the first digit of its run: an attempt at a digit that
# follows a digit is cut short by the lookbehind. A bare date (``2024-01-15``,
# also followed by `` 12:``, the hour, which _find_numbers would drop) has 8
# digits and never holds a value: the lookahead skips it in C.
# The first test, 8 more region characters, rejects most digits in prose
# ("3월", "12,000원") at once.
_REGION_TAIL = (
    r"(?=[0-9\-.()+ \t]{8})(?<![0-9][0-9])"
    r"(?![0-9]{3}[-./][0-9][0-9][-./][0-9][0-9](?:(?![-.()+ \t]*[0-9])| [0-9][0-9]?:))"
    r"[0-9\-.()+ \t]{8,}(?<=[0-9])"
)
_STAGE1 = re.compile(f"[0-9]{_REGION_TAIL}")
# A value cut into pieces (전화 "010" "1234" "5678", 010 | 1234 | 5678):
# digit groups set apart by quotes, bars, commas, semicolons or square
# brackets, read by governance.pii.detect.labels.pieces on the slow path. A
# comma right before a digit is an amount's (12,000원), and parentheses
# alone are a phone's ((02)123-4567). As a tail, after the first digit of a group.
_PIECE_SEP = r"[ \t]*(?:[\"'`‘’“”|;\[\]]|,(?![0-9]))[ \t\"'`‘’“”|;+,()\[\]]{0,5}"
_PIECE_TAIL = rf"(?<![0-9][0-9])(?=[0-9]{{1,6}}{_PIECE_SEP}[0-9]{{2}})"
_PIECE_HINT = re.compile(rf"(?<![0-9])[0-9]{{2,7}}{_PIECE_SEP}[0-9]{{2}}")
# Non-ASCII text: the same search also stops at the first character that
# normalisation changes (a one-character match), so one pass finds the regions
# or tells that the text must be normalised first. The leading class is the
# charset `re` skips ahead with; the first branch takes such a character.
# So does any slash or underscore (for 010/1234/5678 in Korean text), and
# _find_all_numbers goes on when it is not between digits: cheaper than
# substring tests on every non-ASCII text (an ASCII needle is widened first)
# or a branch tried at every digit. The search resumes at a region's end, so
# a slash right after a region is seen too.
# The same search also stops (a one-character match) at a hint that the text
# may hide a value from these formats, for the pipeline's decode and fold
# (governance.pii.detect.pipeline): three number words in a row (digits
# spoken in Hangul or Hanja), an escape or tag, a line break before a digit,
# an e-mail's "at" or "dot" in brackets or as a word, a look-alike letter or
# a base64 run touching a digit, a label that names a value on its own.
# Lookaheads only, so the match stays one character; the stop costs nothing
# in text without these (the class is scanned anyway).
_NUMBER_WORDS = "공영빵일이삼사오육륙칠팔구〇零一二三四五六七八九壹貳參"
# After "@": a domain label and a word for "dot" (hong@naver dot com, hong@naver닷컴).
_AT_DOT_WORD = (
    r"[A-Za-z0-9.-]{1,63}(?:(?:[ \t]*[\[({<][ \t]*|[ \t]+)(?:[Dd][Oo][Tt]|punto|point|ponto|punkt)|[ \t]*[닷점쩜])"
)
_WORD_SEP = r"[-. _/~\\\t\n]"  # a separator next to number words
_OTHER_HINT_STARTS = '골앳주외여면닷점쩜~&<%\\\\\r\n"@\\[({aAdD'  # a class body: backslash, CR, LF escaped
# The number words a spoken number can hardly do without (공/영 for 0, and the
# rarer syllables): a run of eight digits all written 일, 이, 사 or 오 is
# (4/10)^8, and those four are the commonest syllables of Korean prose.
_RARE_WORDS = "".join(ch for ch in _NUMBER_WORDS if ch not in "일이사오")
# English labels that name a value on their own (a spaced passport or
# licence number, an RRN's half), any case: in Korean text these letters are
# rare, so a stop at each costs little (ASCII text tests substrings instead).
_LABEL_HINT_STARTS = "pPdDlLrR"
_LABEL_HINT_TAILS = (
    r"(?<=[pP])(?=[aA][sS][sS][pP][oO][rR][tT])|(?<=[dD])(?=[rR][iI][vV][eE][rR])"
    r"|(?<=[lL])(?=[iI][cC][eE][nN][cCsS][eE])|(?<=[rR])(?=[rR][nN]|[eE][sS][iI][dD][eE][nN][tT])"
)
_HINT_STARTS = _NUMBER_WORDS + _OTHER_HINT_STARTS + "OolIA-Zpdr"
_OTHER_HINT_TAILS = (
    r"(?<=[골앳주외여면])(?:(?<=골)(?=뱅)|(?<=앳)|(?<=주)(?=민)|(?<=외)(?=국인)|(?<=여)(?=권)|(?<=면)(?=허))"
    r"|(?<=[닷점쩜])(?:(?<=[A-Za-z0-9].)|(?<=[A-Za-z0-9] .))(?=[ \t]?[A-Za-z컴넷])"  # naver닷컴, naver 점 com
    r"|(?<=[0-9][~\\])(?=[0-9])"  # 010~1234~5678
    r"|(?<=[&<%\\\r\n])(?:(?<=&)(?=#|[A-Za-z]{2,8};)|(?<=<)(?=[A-Za-z/!?])|(?<=%)(?=[0-9A-Fa-f]{2})"
    r"|(?<=\\)(?=u[0-9A-Fa-f]{4})|(?<=[\r\n])(?=[ \t]*[0-9]))"
    r"|(?<=[\"@\[({])(?:(?<=\")(?=@)|(?<=@)(?=[\[ ]|" + _AT_DOT_WORD + r")|(?<= @)"
    r"|(?<=[\[({])(?=[ \t]*(?:[Aa][Tt]|@|[Dd][Oo][Tt]|\.)[ \t]*[\]})]))"
    r"|(?<=[ ][aA])(?=[tT] |rroba |robase )|(?<=[ ][dD])(?=[oO][tT] )"
)
# At a letter: a look-alike letter next to a digit, or a base64 run (of
# text: both letter cases, a capital early). Letters are rare in Korean
# text; at a digit, these tails would cost more than the rest of the search.
_LETTER_HINT_STARTS = "OolIA-Z"
# The first of a run of look-alike letters that stands apart from other
# letters and touches a digit (O1O, 1OO1, l234), not "Hello" or "Iowa".
_LOOKALIKE_RUN = (
    r"(?<![A-Za-z][OolI])(?=[OolI]*(?![A-Za-z]))"
    r"(?:(?<=[0-9][OolI])|(?<=[0-9][-. _/][OolI])|(?<=[0-9][-. _/]{2}[OolI])|(?=[OolI]*[-. _/]{0,3}[0-9]))"
)
_LETTER_HINT_TAILS = (
    rf"(?<=[OolI]){_LOOKALIKE_RUN}"
    r"|(?<=[A-Za-z0-9+/]{3}[A-Z])(?=[A-Za-z0-9+/]{3})(?=[A-Z+/]{0,8}[a-z0-9])"
)
# Branches in order of frequency, each behind one lookbehind on the character
# that started the match: a digit (a region), a number word, another hint,
# and last a character to normalise (matched alone). A digit that starts no
# region is done after two lookbehinds: `re` tries every branch in turn, and
# digits in prose ("3월 15일", "12,000원") are the commonest stops, so the
# other branches sit behind one (?<![0-9]) (a fifth of the search's time).
_STAGE1_RAW = re.compile(
    f"[0-9/_{NORMALISABLE_BMP}\\U00010000-\\U0010ffff{_HINT_STARTS}]"
    f"(?:(?<=[0-9])(?:{_REGION_TAIL}|{_PIECE_TAIL})|(?<![0-9])(?:"
    f"(?<=[{_RARE_WORDS}])(?:(?={_WORD_SEP}?[{_NUMBER_WORDS}0-9])|(?<=[{_NUMBER_WORDS}0-9].)"
    f"|(?<=[{_NUMBER_WORDS}0-9]{_WORD_SEP}.))"
    # the common four count between a digit and a number: 010-일이사오-5678,
    # 010--일일일일--0000 (not "15일 오후", a date: no space after); alone, in a run as long as
    # an RRN's front half (이이일이일일, 6 words: prose has no such run) or
    # of four touching a digit (사일일일-0000)
    f"|(?<=[일이사오])(?:(?:(?<=[0-9].)|(?<=[0-9]{_WORD_SEP}.)|(?<=[0-9]{_WORD_SEP}{{2}}.))"
    f"(?=[-._/~]{{0,2}}[{_NUMBER_WORDS}0-9])"
    f"|(?=[{_NUMBER_WORDS}]{{5}}|[{_NUMBER_WORDS}]{{3}}{_WORD_SEP}{{0,2}}[0-9]))"
    f"|(?<=[{_OTHER_HINT_STARTS}])(?:{_OTHER_HINT_TAILS})"
    f"|(?<=[{_LETTER_HINT_STARTS}])(?:{_LETTER_HINT_TAILS})"
    f"|(?<=[{_LABEL_HINT_STARTS}])(?:{_LABEL_HINT_TAILS})"
    f"|(?<![0-9{_HINT_STARTS}])))"
)
# ASCII text: the hints of a hidden value, in one search after the whole-cell
# shortcuts (each branch told apart by a lookbehind on the character that
# started it, so `re` tries the tails only at these characters).
_HINT_ASCII = re.compile(
    r"[&<%\\\r\n\"@\[({~_/\-. OolIA-Z]"
    r"(?:(?<=[&<%\\\r\n\"@\[({~_/])"  # escapes, markup, line breaks, e-mail brackets, odd separators
    r"(?:(?<=&)(?:#|[A-Za-z]{2,8};)|(?<=<)[A-Za-z/!?]|(?<=%)[0-9A-Fa-f]{2}|(?<=\\)u[0-9A-Fa-f]{4}"
    rf"|(?<=[\r\n])[ \t]*[0-9]|(?<=[0-9][~_/\\])[-. _/~\\]*[0-9]|(?<=\")@|(?<=@)(?:[\[ ]|{_AT_DOT_WORD})|(?<= @)"
    r"|(?<=[\[({])[ \t]*(?:[Aa][Tt]|@|[Dd][Oo][Tt]|\.)[ \t]*[\]})])"
    # doubled separators; a dot on one side, a hyphen or space on the other; " at ", " dot "
    r"|(?<=[-. ])(?:(?<=[0-9][-. ])[-. _/]+[0-9]"
    r"|(?<=[0-9][. ])(?<!\+82[. ])(?<!0082[. ])[0-9]{1,7} ?- ?[0-9]"
    r"|(?<=[0-9]-)[0-9]{1,7}[. ][0-9]|(?<=[0-9] -) ?[0-9]{1,7}[. ][0-9]"
    r"|(?<=[0-9] )[0-9]{1,7}\.[0-9]|(?<=[0-9]\.)[0-9]{1,7} [0-9]"
    r"|(?<= )(?:[Aa][Tt]|[Dd][Oo][Tt]|arroba) )"
    # a look-alike letter next to a digit, standing apart from other letters
    rf"|(?<=[OolI]){_LOOKALIKE_RUN}"
    # base64 of text: both letter cases, a capital early
    r"|(?<=[A-Za-z0-9+/]{3}[A-Z])(?=[A-Za-z0-9+/]{3})(?=[A-Z+/]{0,8}[a-z0-9])"
    ")",
    re.ASCII,
)


def _ascii_hint(text: str) -> bool:
    """A hint in ASCII text: the search above, or a label that names a value
    on its own (substring tests on the lowered text cost less than the same
    words as branches of the search)."""
    if _HINT_ASCII.search(text) is not None:
        return True
    if ('"' in text or "'" in text or "|" in text or "," in text or ";" in text or "]" in text) and (
        _PIECE_HINT.search(text) is not None
    ):
        return True
    lowered = text.lower()
    return (
        "rrn" in lowered
        or "resident" in lowered
        or "passport" in lowered
        or "licen" in lowered
        or ("driver" in lowered)
    )


# Passports have only 7-8 digits: they are looked for after a label instead,
# found with plain substring tests first (much cheaper than a regex).
_PASSPORT_LABEL = re.compile("여권|passport", re.IGNORECASE)


_DOUBLED_SEPARATORS = re.compile(r"[0-9][-. ]{2}", re.ASCII)
_MIXED_SEPARATORS = re.compile(
    r"(?<!\+8)(?<!008)[0-9][. ][0-9]{1,7} ?- ?[0-9]|[0-9] ?- ?[0-9]{1,7}[. ][0-9]"
    r"|[0-9] [0-9]{1,7}[.][0-9]|[0-9][.][0-9]{1,7} [0-9]",
    re.ASCII,
)


# A value of its own: digit groups joined by one and the same hyphen or dot,
# three groups at least (a phone, an account, a date).
_WHOLE_CHAIN = re.compile(r"[0-9]+(?:-[0-9]+){2,}|[0-9]+(?:\.[0-9]+){2,}", re.ASCII)


def _odd_separators(scan: str, start: int, end: int) -> bool:
    """Doubled separators, or two of hyphen, dot and space mixed, in a region: for the fold."""
    region = scan[start:end]
    if "--" not in region and region.replace("-", "").isdigit():
        return False  # the usual region: digits, single hyphens between them (one kind, none doubled)
    if _DOUBLED_SEPARATORS.search(region):
        return True
    separators = ("-" in region) + ("." in region) + (" " in region)
    if separators < 2:
        return False
    if "-" in region and _values_apart(region, scan, start, end):
        return False
    return _MIXED_SEPARATORS.search(scan, max(0, start - 3), end) is not None  # sees "+82"


def _values_apart(region: str, scan: str, start: int, end: int) -> bool:
    """Is the region values of three or more uniform groups each, set apart by
    single spaces ("031-7880-0856 2024-05-02 14:30", "+82 10-1234-5678
    2024-03-15")? Each is read on its own then, and folding the spaces could
    only join the tail of one to the head of the next; no format has six
    groups or more, and a value split 3+1 ("4111-1111-1111 1111") or with
    any shorter piece ("11-12-345678 90") still goes to the fold. The hour
    after a date and the country code before a phone are not pieces."""
    pieces = region.split(" ")
    if len(pieces) < 2:
        return False
    if scan[end : end + 1] == ":" and len(pieces[-1]) <= 2:
        pieces.pop()  # "2024-05-02 14:30": _find_numbers leaves the hour out too
    if pieces[0] == "82" and scan[start - 1 : start] == "+":
        pieces = pieces[1:]
    fullmatch = _WHOLE_CHAIN.fullmatch
    return len(pieces) >= 2 and all(fullmatch(piece) for piece in pieces)


def _near_digit(scan: str, i: int) -> bool:
    return scan[max(0, i - 2) : i].rstrip(" ")[-1:].isdigit() or scan[i + 1 : i + 3].lstrip(" ")[:1].isdigit()


# Where the normalised copy and the text differ in length: sorted
# (normalised offset, text offset, replacement length) of each character whose
# replacement is not one character, and the normalised offsets alone.
_Moves = tuple[list[int], list[tuple[int, int, int]]]


def _normalised(text: str) -> tuple[str, _Moves | None]:
    """The text as the detectors read it (see _normalisation_table), and its offset map."""
    scan = normalised_text(text)
    if scan is text:
        return scan, None
    keys: list[int] = []
    moves: list[tuple[int, int, int]] = []
    shift = 0
    for m in _RESIZING.finditer(text):
        i = m.start()
        size = len(_NORMALISE[ord(text[i])])
        keys.append(i + shift)
        moves.append((i + shift, i, size))
        shift += size - 1
    return scan, ((keys, moves) if moves else None)


def _original_offset(moves: _Moves, j: int, end: bool) -> int:
    """The offset in the text of normalised character `j` (its end if `end`).

    A character from an expansion (⑩ -> "10") maps to the whole source
    character; removed characters lie between two mapped ones, so a span
    covers those inside it."""
    keys, records = moves
    k = bisect_right(keys, j) - 1
    if k < 0:
        return j + 1 if end else j
    p, i, size = records[k]
    if j < p + size:
        return i + 1 if end else i
    return i + 1 + (j - p - size) + (1 if end else 0)


def _slashed_run(m: re.Match[str]) -> str:
    """Digit groups joined by "/" or "_": one number (010/1234/5678), unless the
    run touches hyphen/dot groups (110-123-456789/110-987-654321), where the
    slash separates two values."""
    text = m.string
    s, e = m.span()
    joined = (s >= 2 and text[s - 1] in "-." and text[s - 2].isdigit()) or (
        text[e : e + 1] in ("-", ".") and text[e + 1 : e + 2].isdigit()
    )
    return m.group().translate(_SLASH_AS_SPACE if joined else _SLASH_AS_HYPHEN)
