"""The detectors as a pipeline: decode, fold, match and validate.

1. Match on the text as it is (governance.pii.detect.match): the formats,
   their checksums (RRN, Luhn) and context rules, with compatibility forms
   and invisible characters folded there already. Most cells stop here.
2. A prefilter (`_may_hide`, substring tests and a few character-class
   searches) asks whether the text could hide a value from step 1: escapes
   or markup, a base64 run, number words, look-alike letters, odd separators,
   an obfuscated e-mail, a label that names a value (RRN halves, passports,
   licences). Text without any of these, the common case, costs just that.
3. Otherwise the text is decoded (governance.pii.detect.decode), folded
   (governance.pii.detect.fold) with an offset map, matched again, and read
   by the finders that need the folded form (obfuscated e-mails, labelled
   values); base64 and JWT segments are decoded and scanned on their own, a
   value inside masking the whole segment. Every span maps back to the
   original text, and the spans of both passes are merged: overlapping spans
   become one covering both (masking more is the safe side).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from governance.pii.detect import labels, match, obfuscated
from governance.pii.detect.decode import decode, encoded_segments
from governance.pii.detect.fold import fold
from governance.pii.detect.offsets import Mapped
from governance.pii.kinds import OVERLAP_RANK, SEVERITY, PiiKind

_Candidate = tuple[str, int, int, float]
_RRN = PiiKind.RRN.value
_EMAIL = PiiKind.EMAIL.value
_PASSPORT = PiiKind.PASSPORT.value
_LICENCE = PiiKind.DRIVER_LICENSE.value
_MAX_DEPTH = 2  # base64 inside base64 inside the text, no deeper
_SEVERITY_RANK = {kind: rank for rank, kind in enumerate(SEVERITY)}

# --- the prefilter ---------------------------------------------------------

# Doubled separators, or an underscore, slash, backslash or tilde, between digits;
# Groups joined by a dot on one side and a hyphen or space on the other.
_ODD_SEPARATOR = re.compile(
    r"[0-9](?:[-._/\\~ \t]{2,4}|[_/\\~])[0-9]|[0-9][.][0-9]{1,6}[- ][0-9]|[0-9][- ][0-9]{1,6}[.][0-9]", re.ASCII
)
# A base64 run of 16+ characters, or a look-alike letter between digits.
_ENCODED_OR_LOOKALIKE = re.compile(
    r"[A-Za-z0-9+/_-]{16}|[0-9][ .-]?[OolI](?![A-Za-z])|(?<![A-Za-z])[OolI][ .-]?[0-9]", re.ASCII
)
_WORDS = "공영빵일이삼사오육륙칠팔구〇零一二三四五六七八九壹貳參"
# Seven number words or digits in a row (single separators allowed), at least
# one of them a word: digits spoken in Hangul or Hanja.
_NUMBER_WORDS = re.compile(rf"[{_WORDS}](?:[ .\-]?[0-9{_WORDS}]){{6}}|[0-9](?:[ .\-]?[0-9]){{0,5}}[ .\-]?[{_WORDS}]")
_AT_WORD = re.compile(
    r"(?:[\[({<]\s*|\s)(?:at|arroba|arobase|chez|@)(?:\s*[\])}>]|\s)|\s@|@\s|골뱅|앳|アット|艾特", re.IGNORECASE
)
_LABEL_WORDS = re.compile(r"rrn|resident|passport|licen[cs]e|driver|주민|여권|면허|旅券|护照|護照|pasaporte|passeport")
_RAW_SPECIAL = re.compile(r"[&<%\\\r\n]|\"@|@\[", re.ASCII)
_NORMALISABLE = re.compile(f"[{match.NORMALISABLE_BMP}\U00010000-\U0010ffff]")


def _may_hide(text: str) -> bool:
    """Could the text hide a value from the match stage? Cheap tests first."""
    if _RAW_SPECIAL.search(text) or _ODD_SEPARATOR.search(text):
        return True
    if _ENCODED_OR_LOOKALIKE.search(text):
        return True
    if text.isascii():
        lowered = text.lower()
        if ("at" in lowered or "@" in text or "chez" in lowered) and _AT_WORD.search(text):
            return True
        return (
            "rrn" in lowered or "resident" in lowered or "pass" in lowered or "licen" in lowered or "driver" in lowered
        )
    if _NUMBER_WORDS.search(text) or _AT_WORD.search(text) or _LABEL_WORDS.search(text.lower()):
        return True
    # Folded forms in combination (a full-width digit next to a doubled dash):
    # the match stage folds each alone, the pipeline the rest.
    return _NORMALISABLE.search(text) is not None


# --- the pipeline ------------------------------------------------------------


def detect_spans(text: str) -> list[_Candidate]:
    """Non-overlapping (kind id, start, end, confidence), sorted by start."""
    found = match.detect_spans(text)
    if len(text) < 8 or not _may_hide(text):
        return found
    extra = _deep(text, 0)
    if not extra:
        return found
    return _merge([*found, *extra])


def _deep(text: str, depth: int) -> list[_Candidate]:
    decoded = decode(text)
    base = decoded.text if decoded is not None else text
    folded = fold(base)
    mapped = _compose(decoded, folded)
    scan = mapped.text if mapped is not None else text
    found: list[_Candidate] = []
    if mapped is not None:
        found.extend(match.detect_spans(scan))
    lowered = scan.lower()
    if obfuscated.could_hold(lowered):
        found.extend((_EMAIL, s, e, 0.9) for s, e in obfuscated.find(scan))
    found.extend((_RRN, s, e, 0.8) for s, e in labels.rrn_halves(scan))
    found.extend((_PASSPORT, s, e, 0.8) for s, e in labels.passports(scan))
    found.extend((_LICENCE, s, e, 0.8) for s, e in labels.licences(scan))
    if mapped is not None and found:
        found = [(kind, *mapped.source_span(s, e), conf) for kind, s, e, conf in found]
    if depth < _MAX_DEPTH:
        found.extend(_encoded(base, decoded, depth))
    return found


def _compose(decoded: Mapped | None, folded: Mapped | None) -> Mapped | None:
    if decoded is None:
        return folded
    if folded is None:
        return decoded
    return decoded.then(folded)


def _encoded(base: str, decoded: Mapped | None, depth: int) -> list[_Candidate]:
    """A value inside a base64 or JWT segment masks the whole segment."""
    found = []
    for start, end, inner in encoded_segments(base):
        spans = match.detect_spans(inner)
        if len(inner) >= 8 and _may_hide(inner):
            spans = [*spans, *_deep(inner, depth + 1)]
        if spans:
            kind = min((c[0] for c in spans), key=lambda k: _SEVERITY_RANK.get(k, len(SEVERITY)))
            if decoded is not None:
                start, end = decoded.source_span(start, end)
            found.append((kind, start, end, 0.9))
    return found


def _merge(candidates: list[_Candidate]) -> list[_Candidate]:
    """Overlapping spans become one covering all of them; its kind is the
    longest span's (then the higher-ranked kind's)."""
    candidates.sort(key=lambda c: (c[1], -c[2]))
    merged: list[list] = []
    for kind, start, end, conf in candidates:
        if start >= end:
            continue
        if merged and start < merged[-1][2]:
            last = merged[-1]
            if (end - start, OVERLAP_RANK.get(kind, 0)) > (last[4], OVERLAP_RANK.get(last[0], 0)):
                last[0], last[3], last[4] = kind, conf, end - start
            last[2] = max(last[2], end)
            continue
        merged.append([kind, start, end, conf, end - start])
    return [(kind, start, end, conf) for kind, start, end, conf, _ in merged]


def detect(text: str) -> list[match.Detection]:
    """Find personal data by value format. Non-overlapping detections, sorted by start."""
    if not text:
        return []
    by_id = match.KIND_BY_ID
    return [match.detection(by_id[kind], s, e, text[s:e], conf) for kind, s, e, conf in detect_spans(text)]


def mask_text(text: str, replace: Callable[[match.Detection], str]) -> str:
    """Return `text` with every detection replaced by `replace(detection)`."""
    spans = detect_spans(text)
    if not spans:
        return text
    by_id = match.KIND_BY_ID
    pieces: list[str] = []
    pos = 0
    for kind, start, end, conf in spans:
        pieces.append(text[pos:start])
        pieces.append(replace(match.detection(by_id[kind], start, end, text[start:end], conf)))
        pos = end
    pieces.append(text[pos:])
    return "".join(pieces)
