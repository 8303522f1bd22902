"""E-mail addresses written around the e-mail matcher.

Read on decoded, folded text (governance.pii.detect.pipeline):

* "at" and "dot" as words or in brackets, in several languages:
  ``hong at naver dot com``, ``hong [at] naver [dot] com``, ``hong(at)naver.com``,
  ``hong{at}naver{dot}com``, ``hong 골뱅이 naver 닷 com``, ``hong앳naver점com``,
  ``hong arroba naver punto com``, ``hong アット naver ドット com``; ``닷컴`` for
  ".com"; a spaced ``hong @ naver . com``.
* RFC 5321 address literals: ``user@[192.0.2.1]``, ``user@[IPv6:2001:db8::1]``.
* RFC 5322 quoted local parts: ``"hong gildong"@naver.com``.

Decision: a bare English "at" (or French "chez") with a plain dot (``visit us at example.com``)
is prose unless the part before it looks like a mailbox (it holds a digit,
a dot, an underscore or a hyphen: ``hong.gd at naver.com``); brackets or a
word for "dot" always make it an address. The top-level domain must be one
that exists (the list below), so "at home dot now" is not an address."""

from __future__ import annotations

import re

_AT_WORDS = r"at|arroba|arobase|chez|골뱅이|골뱅|앳|アット(?:マーク)?|艾特|ат|собака"
_DOT_WORDS = r"dot|punto|point|ponto|punkt|점|쩜|닷|ドット|点|点儿|точка"
_OPEN, _CLOSE = r"[\[({<]", r"[\])}>]"
_AT = (
    rf"(?P<at>\s*{_OPEN}\s*(?:{_AT_WORDS}|@)\s*{_CLOSE}\s*"  # [at] (at) {at} <at> [@]
    rf"|\s*(?:골뱅이|골뱅|앳|アット(?:マーク)?)\s*"  # Korean/Japanese words need no spaces
    rf"|\s+(?P<bare_at>{_AT_WORDS})\s+"  # hong at naver
    r"|\s*@\s*)"  # hong @ naver, hong@naver닷컴
)


def _dot(plain: str) -> str:
    return (
        rf"(?:\s*{_OPEN}\s*(?:{_DOT_WORDS}|\.)\s*{_CLOSE}\s*"  # [dot] (.) {dot}
        r"|\s*(?:점|쩜|닷|ドット|点)\s*"
        rf"|\s+(?:{_DOT_WORDS})\s+"
        r"|\s*\.\s+|\s+\.\s*"
        rf"|{plain})"
    )


_TLDS = (
    "com|net|org|edu|gov|mil|int|info|biz|name|pro|io|co|kr|jp|cn|us|uk|de|fr|es|it|nl|se|ch|ru|br|in|au|ca|"
    "tw|hk|sg|vn|th|ph|my|id|me|ai|app|dev|xyz|site|online|tech|shop|email|mail|ac|go|or|ne|re|pe|hs|ms|sc|kg|es"
)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_INNER_DOT = _dot(r"\.")
_LAST_DOT = _dot(r"(?P<plain_dot>\.)")
_OBFUSCATED = re.compile(
    rf"(?<![A-Za-z0-9._%+-])(?P<local>[A-Za-z0-9][A-Za-z0-9._%+-]{{0,63}}){_AT}"
    rf"{_LABEL}(?:{_INNER_DOT}{_LABEL}){{0,4}}(?:{_LAST_DOT}(?:{_TLDS})|\s*(?:닷컴|닷넷|닷오알지))(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_LITERAL = re.compile(
    r"(?<![A-Za-z0-9!#$%&'*+/=?^_`{|}~.-])[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}"
    r"@\[(?:IPv6:[0-9A-Fa-f:.]{2,45}|[0-9]{1,3}(?:\.[0-9]{1,3}){3})\]",
    re.ASCII,
)
_QUOTED = re.compile(
    r'"(?:[^"\\\r\n]|\\.){1,64}"@(?:\[[0-9A-Za-z:.]{2,45}\]|(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.){1,8}[^\W\d_]{2,24})'
)
# What must be in the text for any of the above (lowercased ASCII needles;
# the Korean and Japanese words as they are).
_HINTS = ("at", "arroba", "arobase", "chez", "@", "골뱅", "앳", "アット", "艾特", "ат", "собака")


def could_hold(lowered: str) -> bool:
    return any(hint in lowered for hint in _HINTS)


def find(text: str) -> list[tuple[int, int]]:
    """Spans of the obfuscated, literal and quoted addresses in `text`."""
    spans = []
    for m in _OBFUSCATED.finditer(text):
        bare = m.group("bare_at")
        if bare and bare.lower() in ("at", "chez") and m.group("plain_dot") and not _mailbox_like(m.group("local")):
            continue  # "visit us at example.com": prose
        spans.append(m.span())
    if "@" in text:
        spans.extend(m.span() for m in _LITERAL.finditer(text))
        if '"@' in text:
            spans.extend(m.span() for m in _QUOTED.finditer(text))
    return spans


def _mailbox_like(local: str) -> bool:
    return any(ch.isdigit() or ch in "._-" for ch in local)
