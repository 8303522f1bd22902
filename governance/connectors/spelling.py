"""What an MCP server wrote, in the one spelling masking reads (pure, no Django).

Names have no format, so the vault's known values are their only protection
in connector output, and they match what is written as it is. A server (or
the export it relays) may write the same value in another spelling, so
every string is brought to one form before it leaves the client: NFKC
(composed Hangul: macOS writes file names decomposed; full-width digits),
invisible format characters removed (zero-width spaces inside a value),
JSON escapes decoded (a text block that is `json.dumps` output with its
default ensure_ascii writes every Hangul syllable as \\uXXXX). A text that
is JSON is parsed, so its numbers are numbers for the detectors too; a
float that is a whole number (a spreadsheet's phone column) becomes an int.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

# Text parsed as JSON up to this size; a longer one is decoded by pattern
# (parsing costs memory many times its length).
JSON_TEXT_MAX = 1_000_000
# Whole-number floats up to this size become ints (exact in a double).
_WHOLE_FLOAT_MAX = 2**53
# Any number of backslashes: a JSON text inside a JSON string escapes twice.
_JSON_ESCAPE = re.compile(r"\\+u([dD][89abAB][0-9a-fA-F]{2})\\+u([dD][c-fC-F][0-9a-fA-F]{2})|\\+u([0-9a-fA-F]{4})|\\+/")
# Escapes left as written: their characters would change the text's structure.
_KEEP_ESCAPED = frozenset('"\\') | frozenset(map(chr, range(0x20)))


def _unescape(match: re.Match) -> str:
    if match.group(1):
        high, low = int(match.group(1), 16), int(match.group(2), 16)
        return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
    if match.group(3):
        char = chr(int(match.group(3), 16))
        return match.group(0) if char in _KEEP_ESCAPED or 0xD800 <= ord(char) <= 0xDFFF else char
    return "/"


def normalised_text(text: str) -> str:
    """One spelling of `text`: JSON escapes decoded, NFKC, format characters
    (Cf: zero-width, bidi controls, soft hyphens) removed."""
    if "\\" in text:
        text = _JSON_ESCAPE.sub(_unescape, text)
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return text


def normalised(value: Any) -> Any:
    """`normalised_text` over every string (keys too) of a JSON-like value;
    whole-number floats as ints."""
    if isinstance(value, str):
        return normalised_text(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= _WHOLE_FLOAT_MAX else value
    if isinstance(value, list | tuple):
        return [normalised(v) for v in value]
    if isinstance(value, dict):
        out: dict = {}
        for key, item in value.items():
            name = normalised_text(key) if isinstance(key, str) else key
            while name in out:  # two spellings of one key: both values stay
                name = f"{name}#"
            out[name] = normalised(item)
        return out
    return value


def text_fields(text: str) -> dict[str, Any]:
    """A text block's fields: `json` when the text is a JSON object or array
    (parsed, so its numbers are numbers), else `text`."""
    for _depth in range(3):  # a JSON text inside a JSON string, twice at most
        stripped = text.strip()
        if stripped[:1] not in ("{", "[", '"') or len(stripped) > JSON_TEXT_MAX:
            break
        try:
            parsed = json.loads(stripped)
        except (ValueError, RecursionError):
            break
        if not isinstance(parsed, str):
            return {"json": normalised(parsed)}
        text = parsed
    return {"text": normalised_text(text)}
