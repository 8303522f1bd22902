"""Korean particles chosen by the preceding word's last sound.

A translation that puts a particle after a value it does not know
("%(kind)s를") reads wrong for half the values ("이름를"). The catalogue
writes both forms, as Korean does when it cannot know ("%(kind)s을(를)",
"이(가)", "은(는)", "과(와)", "(으)로"); `with_particles` then picks the
one the word before takes, and leaves the double form where the word
cannot be read (a symbol, an empty value).

Latin letters and digits are read as a Korean reader says them: an
abbreviation letter by letter (SQL: 에스큐엘, ends in ㄹ), digits by their
Sino-Korean names (3: 삼, 2: 이), other words by a rough English ending
(a final consonant sound unless the word ends in a vowel sound).
"""

from __future__ import annotations

import re

from django.utils.translation import get_language

_HANGUL_FIRST, _HANGUL_LAST = 0xAC00, 0xD7A3
_RIEUL = 8  # index of ㄹ among the final consonants

# Last sound of a digit's name (일 ㄹ, 이 none, 삼 ㅁ, ...): None, "ㄹ" or "other".
_DIGIT_FINAL = {"0": "other", "1": "ㄹ", "2": None, "3": "other", "4": None,
                "5": None, "6": "other", "7": "ㄹ", "8": "ㄹ", "9": None}  # fmt: skip
# Letter names: L 엘, M 엠, N 엔, R 알 end in a consonant; the rest in a vowel.
_LETTER_FINAL = {"L": "ㄹ", "R": "ㄹ", "M": "other", "N": "other"}
_SYMBOL_FINAL = {"%": None}  # 퍼센트


def final_sound(word: str) -> str | None | bool:
    """The last sound of `word`: "ㄹ", "other" (another final consonant),
    None (a vowel), or False when it cannot be told."""
    text = re.sub(r"[\s\"'“”‘’)\]}>»」』]+$", "", word or "")
    if not text:
        return False
    last = text[-1]
    code = ord(last)
    if _HANGUL_FIRST <= code <= _HANGUL_LAST:
        final = (code - _HANGUL_FIRST) % 28
        return None if final == 0 else "ㄹ" if final == _RIEUL else "other"
    if last.isdigit():
        return _DIGIT_FINAL[last]
    if last in _SYMBOL_FINAL:
        return _SYMBOL_FINAL[last]
    if last.isascii() and last.isalpha():
        tail = re.search(r"[A-Za-z]+$", text).group(0)
        if tail.isupper():  # an abbreviation, read letter by letter
            return _LETTER_FINAL.get(last, None)
        return _english_final(tail.lower())
    return False


def _english_final(word: str) -> str | None:
    """How Korean writes the word's end: 메일 (ㄹ), 폰/네임/타입 (m, n, p, k
    and a silent e after them: a final consonant), 테스트/코드/세일즈 (t, d,
    s and the like take a vowel 으), and vowel endings."""
    if word.endswith("e") and len(word) > 2 and word[-2] not in "aeiouy":
        word = word[:-1]  # a silent e: 폰 (phone), 테이블 (table)
    if word.endswith("l"):
        return "ㄹ"
    if word.endswith(("m", "n", "ng", "p", "b", "ck", "k")):
        return "other"
    return None


# (with a final consonant, without one): the double forms the catalogue writes.
_PAIRS = {
    "을(를)": ("을", "를"), "를(을)": ("을", "를"),
    "이(가)": ("이", "가"), "가(이)": ("이", "가"),
    "은(는)": ("은", "는"), "는(은)": ("은", "는"),
    "과(와)": ("과", "와"), "와(과)": ("과", "와"),
    "(으)로": ("으로", "로"),
    "(이)나": ("이나", "나"),
    "(이)라는": ("이라는", "라는"),
}  # fmt: skip
_DOUBLE = re.compile("(" + "|".join(re.escape(k) for k in sorted(_PAIRS, key=len, reverse=True)) + ")")


def particle(word: str, double: str) -> str:
    """The form of `double` (e.g. "을(를)") that follows `word`."""
    with_final, without = _PAIRS[double]
    sound = final_sound(word)
    if sound is False:
        return double
    if double == "(으)로":
        return without if sound in (None, "ㄹ") else with_final  # 서울로, 연필로, 집으로
    return without if sound is None else with_final


def with_particles(text: str) -> str:
    """Every double-form particle in `text` replaced by the form its
    preceding word takes."""
    parts = _DOUBLE.split(text)
    out = [parts[0]]
    for double, rest in zip(parts[1::2], parts[2::2], strict=True):
        out.append(particle("".join(out), double))
        out.append(rest)
    return "".join(out)


def localized_particles(text: str) -> str:
    """`with_particles` when the active language is Korean; else unchanged."""
    return with_particles(text) if (get_language() or "").startswith("ko") else text
