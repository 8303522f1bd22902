"""Hidden spellings for bench/mask.py: the planted values of the corpus
re-spelled the ways the detector pipeline decodes and folds (number words,
also spoken in pairs, look-alike letters, character entities, markup,
percent and base64 encodings, doubled and mixed separators, line breaks,
obfuscated e-mails, values cut into quoted or barred pieces),
so the bench measures the slow path too and checks that none leaks.

Also counts how many cells of the ordinary corpus the match stage sends
through decode and fold (the prefilter's false alarms cost that path)."""

from __future__ import annotations

import base64
import random
import time
import urllib.parse
from collections.abc import Callable

HANGUL = dict(zip("0123456789", "공일이삼사오육칠팔구", strict=True))
HANJA = dict(zip("0123456789", "〇一二三四五六七八九", strict=True))


def _respell_number(rng: random.Random, value: str) -> str:
    how = rng.choice(["hangul", "hanja", "lookalike", "entities", "markup", "percent", "base64", "doubled", "mixed"])
    if how == "hangul":
        return "".join(HANGUL.get(c, c) for c in value)
    if how == "hanja":
        return "".join(HANJA.get(c, c) for c in value)
    if how == "lookalike":
        return value.replace("0", "O").replace("1", "l")
    if how == "entities":
        return "".join(f"&#{ord(c)};" if c.isdigit() and rng.random() < 0.5 else c for c in value)
    if how == "markup":
        return f"{value[:2]}<b></b>{value[2:]}"
    if how == "percent":
        return urllib.parse.quote(value, safe="")
    if how == "base64":
        return base64.b64encode(value.encode()).decode()
    if how == "doubled":
        return value.replace("-", "--").replace(" ", "  ")
    # Mixed separators; not a lone space beside a hyphen: "011 045-3854" is no
    # phone (no exchange starts with 0) and, spaced, an account only by an account word.
    return "".join(rng.choice(["-", "_", "/", "~", " _ "]) if c in "- " else c for c in value)


def _respell_email(rng: random.Random, value: str) -> str:
    local, _, domain = value.partition("@")
    at = rng.choice([" at ", " [at] ", "(at)", " 골뱅이 ", "앳", "&#64;", "%40"])
    dot = rng.choice([" dot ", "[dot]", " 닷 ", "."])
    if at == " at " and dot == ".":
        dot = " dot "
    return f"{local}{at}{domain.replace('.', dot)}"


_WORDS = {"account": "입금 계좌", "card": "카드", "rrn": "주민번호", "phone": "연락처"}


def _in_pairs(value: str) -> str:
    """The digits spoken two by two, whatever the value's layout (공일 공일 이삼 사오 육칠 팔)."""
    digits = "".join(HANGUL[c] for c in value if c.isdigit())
    return " ".join(digits[i : i + 2] for i in range(0, len(digits), 2))


def _in_pieces(rng: random.Random, value: str) -> str | None:
    """The value's own groups as quoted or barred pieces ("010" "1234" "5678"), or None without groups."""
    groups = [g for g in value.replace("-", " ").replace(".", " ").split(" ") if g]
    if len(groups) < 2 or not all(g.isdigit() for g in groups):
        return None
    how = rng.choice(['"{}"', "'{}',", "{} |"])
    return " ".join(how.format(g) for g in groups).rstrip(",|").rstrip()


def hidden_cells(planted: list[list[tuple[str, str]]], n: int, seed: int) -> list[tuple[str, str]]:
    """(cell, spelled value) pairs: a planted value re-spelled, in a short memo;
    then a tenth as many again spoken in pairs, and as many cut into pieces
    (their own generator, so the first n stay the same cells)."""
    rng = random.Random(seed)
    values = [(kind, value) for cell in planted for kind, value in cell]
    rng.shuffle(values)
    out = []
    for kind, value in values[:n]:
        spelled = _respell_email(rng, value) if kind == "email" else _respell_number(rng, value)
        out.append((f"고객 요청 {_WORDS.get(kind, '메일')} {spelled} 확인 부탁", spelled))
    more = random.Random(seed + 1)
    numbers = [(kind, value) for kind, value in values if kind != "email"]
    for kind, value in more.sample(numbers, min(len(numbers), n // 10)):
        spelled = _in_pairs(value)
        out.append((f"고객 요청 {_WORDS[kind]} {spelled} 확인 부탁", spelled))
    cut = 0
    for kind, value in numbers:
        if cut >= n // 10:
            break
        spelled = _in_pieces(more, value)
        if spelled is not None:
            cut += 1
            out.append((f"고객 요청 {_WORDS[kind]} {spelled} 확인 부탁", spelled))
    return out


def run_hidden(mask: Callable[[str], str], cells: list[tuple[str, str]]) -> tuple[float, int]:
    """Seconds to mask the cells, and how many still show the spelled value."""
    start = time.perf_counter()
    outputs = [mask(cell) for cell, _ in cells]
    seconds = time.perf_counter() - start
    leaks = sum(spelled in out for (_, spelled), out in zip(cells, outputs, strict=True))
    return seconds, leaks


def slow_path_share(cells: list[str]) -> int:
    """How many cells the match stage sends through decode and fold."""
    from governance.pii.detect import pipeline

    calls = 0
    hinted = pipeline._hinted

    def counting(text: str, depth: int = 0) -> list:
        nonlocal calls
        calls += 1
        return hinted(text, depth)

    pipeline._hinted = counting
    try:
        for cell in cells:
            pipeline.match.detect_spans(cell, counting)
    finally:
        pipeline._hinted = hinted
    return calls
