"""The detectors as a pipeline: decode, fold, match and validate.

1. Match on the text as it is (governance.pii.detect.match, its rules in
   governance.pii.detect.rules): the formats, their checksums (RRN, Luhn)
   and context rules, with compatibility forms and invisible characters
   folded there already. Most cells stop here.
2. The prefilter is the match stage's own first search: it also stops at a
   hint that the text may hide a value (an escape or tag, a base64 run,
   number words, look-alike letters, odd or mixed separators, an obfuscated
   e-mail, a label that names a value: RRN halves, passports, licences) and
   then hands the text to `_hinted` instead. Text without a hint costs no
   second pass (bench/mask.py counts the cells that take the slow path).
3. `_hinted` decodes the text (governance.pii.detect.decode), folds it
   (governance.pii.detect.fold, as spaces, as hyphens and spoken digits joined) with an offset map,
   matches again, and runs the finders that need the folded form
   (governance.pii.detect.obfuscated, governance.pii.detect.labels); base64
   and JWT segments are decoded and scanned with the words around them, a
   value inside masking the whole segment. Every span maps back to the
   original text (governance.pii.detect.offsets) and is merged with the
   match on the text itself (see _merge).
"""

from __future__ import annotations

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
_CONTEXT_BEFORE, _CONTEXT_AFTER = 24, 12  # as far as the match stage looks for context words
_SEVERITY_RANK = {kind: rank for rank, kind in enumerate(SEVERITY)}
# The fold's readings (hyphens, joined): odd separators as spaces, as
# hyphens, and runs of number words with their pauses dropped.
_READINGS = ((False, False), (True, False), (False, True))

# --- the pipeline ------------------------------------------------------------


def _hinted(text: str, depth: int = 0) -> list[_Candidate]:
    """The match stage saw a hint of a hidden value: the normalised match, and the pipeline."""
    found = match.detect_normalised(text)
    extra, joined = _deep(text, depth)
    if joined:
        # The joined reading only adds: where another reading found a value
        # its layout names the kind (a spoken account that happens to pass
        # Luhn as 16 bare digits stays an account).
        taken = found + extra
        extra.extend(c for c in joined if not any(t[1] < c[2] and c[1] < t[2] for t in taken))
    return _merge(found, extra) if extra else found


def _deep(text: str, depth: int) -> tuple[list[_Candidate], list[_Candidate]]:
    """What the readings of the decoded, folded text find: (the others', the joined reading's)."""
    decoded = decode(text)
    base = decoded.text if decoded is not None else text
    found: list[_Candidate] = []
    joined_found: list[_Candidate] = []
    scanned: set[str] = set()
    folded_any = False
    for hyphens, joined in _READINGS:
        if joined and not folded_any:
            continue  # no run folded as spaces: none has number words to join
        folded = fold(base, hyphens, joined)
        folded_any = folded_any or folded is not None
        mapped = _compose(decoded, folded)
        scan = mapped.text if mapped is not None else text
        if scan in scanned:
            continue  # nothing the hyphen form changes
        scanned.add(scan)
        here: list[_Candidate] = []
        if mapped is not None:
            here.extend(match.detect_spans(scan))
        if not hyphens and not joined:
            if obfuscated.could_hold(scan.lower()):
                here.extend((_EMAIL, s, e, 0.9) for s, e in obfuscated.find(scan))
            here.extend((_RRN, s, e, 0.8) for s, e in labels.rrn_halves(scan))
            here.extend((_PASSPORT, s, e, 0.8) for s, e in labels.passports(scan))
            here.extend((_LICENCE, s, e, 0.8) for s, e in labels.licences(scan))
            here.extend((kind, s, e, 0.8) for kind, s, e in labels.pieces(scan))
        if mapped is not None:
            here = [(kind, *mapped.source_span(s, e), conf) for kind, s, e, conf in here]
        (joined_found if joined else found).extend(here)
    if folded_any:
        # A passport's letter may be a look-alike (I 1234 5678): the folded
        # text reads it as a digit, the decoded one as written.
        for s, e in labels.passports(base):
            found.append((_PASSPORT, *(decoded.source_span(s, e) if decoded is not None else (s, e)), 0.8))
    if depth < _MAX_DEPTH:
        found.extend(_encoded(base, decoded, depth))
    return found, joined_found


def _compose(decoded: Mapped | None, folded: Mapped | None) -> Mapped | None:
    if decoded is None:
        return folded
    if folded is None:
        return decoded
    return decoded.then(folded)


def _encoded(base: str, decoded: Mapped | None, depth: int) -> list[_Candidate]:
    """A value inside a base64 or JWT segment masks the whole segment.

    The decoded text is read between the words around the segment, so a
    context word outside it (입금 계좌 <base64>) still names what is inside."""
    found = []
    for start, end, inner in encoded_segments(base):
        before, after = base[max(0, start - _CONTEXT_BEFORE) : start], base[end : end + _CONTEXT_AFTER]
        lo, hi = len(before), len(before) + len(inner)
        spans = match.detect_spans(f"{before}{inner}{after}", lambda t: _hinted(t, depth + 1))
        kinds = [kind for kind, s, e, _ in spans if s < hi and lo < e]
        if kinds:
            kind = min(kinds, key=lambda k: _SEVERITY_RANK.get(k, len(SEVERITY)))
            if decoded is not None:
                start, end = decoded.source_span(start, end)
            found.append((kind, start, end, 0.9))
    return found


def _merge(primary: list[_Candidate], extra: list[_Candidate]) -> list[_Candidate]:
    """The match on the text itself, plus what decode and fold found besides.

    A span of the decoded, folded text that overlaps one of the text's own
    detections extends it (``&#48;10-1234-5678`` read whole, not its tail);
    one that spans several (two phones joined into one "account") leaves them
    as they are. Spans that still overlap become one covering both (masking more is
    the safe side)."""
    out = list(primary)
    for cand in match.resolve(list(extra)):
        hits = [i for i, p in enumerate(out) if p[1] < cand[2] and cand[1] < p[2]]
        if not hits:
            out.append(cand)
        elif len(hits) == 1:
            kind, start, end, conf = out[hits[0]]
            if cand[1] <= start and end <= cand[2] and OVERLAP_RANK.get(cand[0], 0) >= OVERLAP_RANK.get(kind, 0):
                # A fuller reading of the same value names it, unless it is a
                # vaguer format: a stray number word folded onto a phone
                # ("사\n010-...") widens the mask but the value stays a phone.
                kind, conf = cand[0], cand[3]
            out[hits[0]] = (kind, min(start, cand[1]), max(end, cand[2]), conf)
    return _union(out)


def _union(candidates: list[_Candidate]) -> list[_Candidate]:
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


# What the match stage hands a hinted text to (governance.pii.masking calls
# match.detect_spans(text, HINTED_READER) itself, as detect_spans does).
HINTED_READER = _hinted


def detect_spans(text: str, _match: Callable = match.detect_spans, _reader: Callable = _hinted) -> list[_Candidate]:
    """Non-overlapping (kind id, start, end, confidence), sorted by start.

    Every cell goes through here: the defaults bind the globals once (a
    functools.partial with a keyword argument costs twice this whole call)."""
    return _match(text, _reader)


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
