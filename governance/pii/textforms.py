"""Text forms shared by the detectors and the kinds: the table that folds
compatibility forms, invisible characters and dashes (what the detectors
read), and each kind's normaliser (the canonical form a value is tokenised
by, so that every spelling of one value maps to one token). Pure: stdlib
only, imports nothing of the project, so governance.pii.kinds can name a
normaliser per kind and the detectors can import the kinds."""

from __future__ import annotations

import re
import unicodedata

# What the detectors read is a normalised copy of the text: NFKC
# compatibility forms folded (full-width ``０１０``, circled ``①``, math digits,
# no-break and thin spaces, ``＠``), format characters removed (zero-width
# spaces and joiners, soft hyphen, BOM, bidi controls, ...), and every dash
# or middle dot a writer may put between digit groups turned into "-". It is
# built per code point (a whole-string NFKC would give no offset map), only
# for the code points that matter: those whose NFKC form is one ASCII
# character or holds an ASCII letter, digit or "@". Other NFKC changes (a
# Hangul compatibility jamo, "…") cannot make or break a value.
# The pages (code point >> 8) that hold such characters: scanning only these
# keeps the import cheap (all of Unicode takes ~0.2 s). A character a future
# Unicode adds elsewhere is simply read as it is.
_NFKC_PAGES = (
    *(0x00, 0x01, 0x02, 0x06, 0x07, 0x08, 0x16, 0x18, 0x1D, 0x1E, 0x20, 0x21, 0x24, 0x2C, 0x30, 0x32, 0x33),
    *(0xA7, 0xFB, 0xFE, 0xFF, 0x107, 0x110, 0x134, 0x1BC, 0x1D1, 0x1D4, 0x1D5, 0x1D6, 0x1D7, 0x1F1, 0x1FB, 0xE00),
)
# Read as "-": Unicode dashes and minus signs, and the middle dots written
# between digit groups (·, ㆍ as typed on Korean keyboards, ・, ‧, ∙, ⋅, •),
# and the Hangul vowel ㅡ, which Korean writers use as a dash (010ㅡ1234ㅡ5678).
_AS_HYPHEN = (
    *range(0x2010, 0x2016),
    *(0x2212, 0xFE58, 0xFE63, 0xFF0D),
    *(0x00B7, 0x0387, 0x318D, 0x119E, 0x30FB, 0xFF65, 0x2027, 0x2219, 0x22C5, 0x2022, 0x3161),
)
# Invisible characters that are not Cf but render as nothing: the combining
# grapheme joiner, Hangul fillers, Khmer inherent vowels, variation selectors.
_INVISIBLE = (
    *(0x034F, 0x115F, 0x1160, 0x3164, 0xFFA0, 0x17B4, 0x17B5),
    *range(0xFE00, 0xFE10),
    *range(0xE0100, 0xE01F0),
)


def normalisation_table() -> dict[int, str]:
    table: dict[int, str] = {}
    for page in _NFKC_PAGES:
        for cp in range(max(page << 8, 0x80), (page + 1) << 8):
            ch = chr(cp)
            category = unicodedata.category(ch)
            if category == "Cf":
                table[cp] = ""  # zero-width spaces and joiners, soft hyphen, BOM, bidi controls
            elif category in ("Zs", "Zl", "Zp"):
                table[cp] = " "  # no-break, thin, hair, figure, en/em, ideographic spaces
            else:
                folded = unicodedata.normalize("NFKC", ch)
                if folded != ch and (
                    (len(folded) == 1 and folded.isascii())
                    or any(c.isascii() and (c.isalnum() or c == "@") for c in folded)
                ):
                    table[cp] = folded
    table.update(dict.fromkeys(_AS_HYPHEN, "-"))
    table.update(dict.fromkeys(_INVISIBLE, ""))
    # IDNA label separators (ideographic and half-width full stops): "." in
    # an address, and harmless elsewhere.
    table[0x3002] = table[0xFF61] = "."
    return table


NORMALISE = normalisation_table()
_NON_DIGIT = re.compile(r"\D", re.ASCII)


def digits_only(value: str) -> str:
    if value.isascii():
        # Hyphens and spaces are the usual separators; str.replace is much
        # cheaper than a regex substitution.
        digits = value.replace("-", "").replace(" ", "")
        return digits if digits.isdigit() else _NON_DIGIT.sub("", digits)
    # Compatibility digits (①, ⑩, full-width) fold to ASCII; invisible characters go.
    return "".join(str(int(ch)) for ch in unicodedata.normalize("NFKC", value) if ch.isdecimal())


def normalise_phone(value: str) -> str:
    digits = value.replace("-", "")
    if not (digits.isdigit() and digits.isascii()):  # spaces, dots, "(02)", "+82", full-width
        digits = digits_only(value)
    if not digits.startswith(("0082", "82")):
        return digits  # the usual case: a domestic number
    if digits.startswith("0082"):
        digits = digits[2:]
    if digits.startswith("82"):  # no domestic number starts with 82: it is the country code
        digits = digits[2:]
        if not digits.startswith("0"):
            digits = "0" + digits
    return digits


def normalise_email(value: str) -> str:
    if value.isascii():  # nothing to fold
        return value.strip().lower()
    return value.translate(NORMALISE).strip().lower()


def normalise_passport(value: str) -> str:
    return "".join(ch for ch in value.translate(NORMALISE).upper() if ch.isalnum())


def normalise_words(value: str) -> str:
    return " ".join(value.translate(NORMALISE).split()).casefold()
