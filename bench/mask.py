"""Masking throughput: this engine's format detectors against Presidio.

Every string cell of a tool result goes through `governance.pii.masking.mask_string`
before it reaches the model, so the detectors run once per cell. This bench
builds a fixed-seed corpus of cells like those of a Korean company database
(names, cities, amounts, dates, statuses, order codes, UUIDs, e-mails, phones,
RRNs, cards, bank accounts, and Korean free-text memos, some with personal data
in them), masks it with this engine, then with Presidio configured as close to
ours as it goes without a model: a blank spaCy pipeline (no NER, no download)
and regex recognizers only (built-in e-mail, credit card, phone via
`phonenumbers` with region KR, Korean RRN/FRN, plus pattern recognizers for
Korean phones and bank accounts written here).

Two more figures from the same run, so they travel between machines:
- the engine as a fraction of a bare scan: one compiled pattern (digit runs
  and e-mail shapes) `finditer` over the same cells, no validation, no tokens:
  how close the engine is to the limit of its approach;
- the known-value pass (every original the conversation's vault holds is
  replaced before the detectors) at vault sizes 10, 1,000 and 100,000: the
  engine's cells/s with it, which must not fall as the vault grows.

Usage: .venv/bin/python bench/mask.py [--cells N] [--runs N] [--no-presidio] [--smoke]
Dev-only dependencies for the comparison (no model download is needed):
    .venv/bin/pip install presidio-analyzer==2.2.363 presidio-anonymizer==2.2.363 spacy==3.8.18
Without them the bench still reports our figure. Prints figures; the last line
is the headline. Goal: >= 250,000 cells/s, >= 100x Presidio's throughput and
>= 50% of the bare scan's. A planted PII value that survives our masking is a
failure (exit status 1), in the corpus or re-spelled (bench/_mask_spellings.py:
number words, look-alikes, entities, markup, percent/base64, odd separators,
obfuscated e-mails; those cells also give the decode/fold path's cost).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _mask_spellings import hidden_cells, run_hidden, slow_path_share  # noqa: E402

from governance.pii.known_values import EMPTY, KnownValues  # noqa: E402
from governance.pii.masking import InMemoryVault, MaskCounts, format_token, mask_string  # noqa: E402

SEED = 20240315
GOAL_RATE = 250_000
GOAL_RATIO = 100
GOAL_BARE_SHARE = 0.5  # of the bare scan's throughput
HIDDEN_CELLS = 2_000  # planted values re-spelled for the decode/fold path
PRESIDIO_BUDGET_S = 180.0  # over this for the full corpus, Presidio runs on a fixed subset
PRESIDIO_SUBSET_STEP = 10  # the subset: every 10th cell (10,000 of the default 100,000)
PRESIDIO_MIN_SUBSET = 10_000
PRESIDIO_LANGUAGE = "ko"
PIP_HINT = ".venv/bin/pip install presidio-analyzer==2.2.363 presidio-anonymizer==2.2.363 spacy==3.8.18"

# ==========================================================================
# Corpus
# ==========================================================================

SURNAMES = "김이박최정강조윤장임한오서신권황안송류홍전고문양손배백허유남심노하곽성차주우구민진나"
GIVEN = "민서지현우준도윤예은하수영진성호재연유경태소희동정상미혜승아주원채다인시"
ROMAN_FIRST = ["minsu", "jiwoo", "seoyeon", "hyunwoo", "jihoon", "yuna", "dongha", "soyeon", "taeyang", "eunji"]
ROMAN_LAST = ["kim", "lee", "park", "choi", "jung", "kang", "cho", "yoon", "jang", "lim"]
MAIL_DOMAINS = ["naver.com", "gmail.com", "daum.net", "hanmail.net", "kakao.com", "owl-corp.co.kr", "nate.com"]
CITIES = [
    "서울",
    "부산",
    "대구",
    "인천",
    "광주",
    "대전",
    "울산",
    "세종",
    "수원",
    "성남",
    "고양",
    "용인",
    "창원",
    "청주",
    "전주",
    "천안",
    "제주",
    "서울특별시 강남구",
    "서울특별시 마포구",
    "부산광역시 해운대구",
    "경기도 성남시 분당구",
    "인천광역시 연수구",
    "대구광역시 수성구",
]
STATUSES = ["완료", "배송중", "배송완료", "결제대기", "결제완료", "취소", "환불요청", "반품접수", "보류"]
STATUSES += ["PAID", "PENDING", "SHIPPED", "CANCELLED", "REFUNDED", "active", "inactive", "Y", "N"]
AREA_CODES = ["02", "031", "032", "033", "041", "042", "051", "052", "053", "055", "061", "062", "064", "070"]
# (bank name as written in a cell, digit groups of its account layout)
BANKS = [
    ("국민은행", (6, 2, 6)),
    ("KB국민", (6, 2, 6)),
    ("신한은행", (3, 3, 6)),
    ("신한", (3, 3, 6)),
    ("우리은행", (4, 3, 6)),
    ("하나은행", (3, 6, 5)),
    ("농협", (3, 4, 4, 2)),
    ("NH농협은행", (3, 4, 4, 2)),
    ("IBK기업은행", (3, 6, 2, 3)),
    ("카카오뱅크", (4, 2, 7)),
    ("토스뱅크", (4, 4, 4)),
    ("SC제일은행", (3, 2, 6)),
]
MEMO_FILLERS = [
    "배송 지연 안내 문자 발송 완료.",
    "재고 확인 후 재출고 예정.",
    "고객 변심으로 반품 접수됨.",
    "포장 파손으로 교환 요청.",
    "주문 수량 3개에서 5개로 변경.",
    "결제 금액 12,000원 차액 환불 처리.",
    "3월 15일 오후 2시 방문 예정.",
    "VIP 고객, 사은품 동봉할 것.",
    "택배사 CJ대한통운으로 이관.",
    "담당자 부재로 내일 재연락.",
    "현관 비밀번호 없음, 경비실 보관 요청.",
    "2024-03-15 입고 예정 품목 포함.",
    "부분 취소 후 재결제 진행.",
    "세금계산서 발행 요청 있음.",
    "오후 6시 이후 배송 희망.",
    "지난 주문과 동일 사양으로 요청.",
    "쿠폰 적용 누락, 5,000원 적립금 지급.",
    "상담 종료.",
    "확인 바랍니다.",
    "긴급 건.",
    "견적 금액 1,250,000원 (VAT 별도).",
    "납기 2주 소요 예정, 고객 동의함.",
    "2024-05-02 14:30 통화 완료.",
    "불량 사진 3장 첨부받음.",
    "회원 등급 골드로 상향.",
]


@dataclass
class Corpus:
    cells: list[str] = field(default_factory=list)
    planted: list[tuple[tuple[str, str], ...]] = field(default_factory=list)  # per cell: (kind, exact value)
    types: list[str] = field(default_factory=list)  # per cell: its cell type

    def add(self, kind: str, cell: str, *planted: tuple[str, str]) -> None:
        self.cells.append(cell)
        self.planted.append(planted)
        self.types.append(kind)


class Gen:
    """Value generators; all randomness comes from one seeded `random.Random`."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    def digits(self, n: int) -> str:
        return "".join(self.r.choice("0123456789") for _ in range(n))

    def name(self) -> str:
        return self.r.choice(SURNAMES) + "".join(self.r.choice(GIVEN) for _ in range(self.r.choice((2, 2, 2, 1))))

    def amount(self) -> str:
        n = self.r.choice((100, 1000, 500)) * self.r.randint(1, 2000)
        return self.r.choice((f"{n:,}원", str(n), f"{n:,}", f"₩{n:,}", f"{n:,} 원"))

    def moment(self) -> datetime:
        return datetime(2019, 1, 1) + timedelta(seconds=self.r.randint(0, 6 * 365 * 86400))

    def date_cell(self) -> str:
        t = self.moment()
        forms = (
            t.strftime("%Y-%m-%d"),
            t.strftime("%Y-%m-%d %H:%M:%S"),
            t.strftime("%Y-%m-%dT%H:%M:%S+09:00"),
            t.strftime("%Y-%m-%d %H:%M:%S.") + self.digits(6),
            t.strftime("%Y.%m.%d"),
            f"{t.year}년 {t.month}월 {t.day}일",
            t.strftime("%Y%m%d"),
            t.strftime("%Y%m%d%H%M%S"),
            t.strftime("%H:%M"),
        )
        return self.r.choice(forms)

    def order_code(self) -> str:
        year = self.r.randint(2019, 2025)
        return self.r.choice(
            (
                f"ORD-{year}-{self.r.randint(1, 999999):06d}",
                f"INV{year}{self.r.randint(1, 9999999):07d}",
                f"PRD-{self.r.choice('ABCDEFGH')}{self.r.randint(100, 9999)}",
                f"SO-{year}{self.r.randint(1, 12):02d}-{self.r.randint(1, 99999):05d}",
            )
        )

    def email(self) -> str:
        first, last = self.r.choice(ROMAN_FIRST), self.r.choice(ROMAN_LAST)
        local = self.r.choice(
            (f"{first}.{last}", f"{first}_{last}{self.r.randint(1, 99)}", f"{last}{first}", f"{first}+shop")
        )
        if self.r.random() < 0.1:
            local = local.capitalize()
        return f"{local}@{self.r.choice(MAIL_DOMAINS)}"

    def phone(self) -> str:
        a, b = str(self.r.randint(2000, 9999)), self.digits(4)
        if self.r.random() < 0.65:  # mobile
            return self.r.choice(
                (
                    f"010-{a}-{b}",
                    f"010-{a}-{b}",
                    f"010{a}{b}",
                    f"010.{a}.{b}",
                    f"010 {a} {b}",
                    f"+82 10-{a}-{b}",
                    f"+82-10-{a}-{b}",
                    f"011-{a[1:]}-{b}",
                )
            )
        area = self.r.choice(AREA_CODES)
        ex = str(self.r.randint(200, 999)) if self.r.random() < 0.5 else a
        return self.r.choice((f"{area}-{ex}-{b}", f"{area}-{ex}-{b}", f"({area}){ex}-{b}", f"{area}){ex}-{b}"))

    def rrn(self) -> str:
        born = date(1950, 1, 1) + timedelta(days=self.r.randint(0, 60 * 365))
        gender = self.r.choice("12" if born.year < 2000 else "34")
        body = born.strftime("%y%m%d") + gender + self.digits(5)
        weights = (2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5)
        check = (11 - sum(int(d) * w for d, w in zip(body, weights, strict=True)) % 11) % 10
        value = body + str(check)
        return value if self.r.random() < 0.15 else f"{value[:6]}-{value[6:]}"

    def card(self) -> str:
        prefix, length = self.r.choice(
            (("4", 16), ("4", 16), ("5" + self.r.choice("12345"), 16), ("9410", 16), ("37", 15), ("35", 16))
        )
        body = prefix + self.digits(length - len(prefix) - 1)
        total = 0
        for i, ch in enumerate(reversed(body)):  # the check digit will sit right of body
            d = int(ch) * (2 if i % 2 == 0 else 1)
            total += d - 9 if d > 9 else d
        number = body + str((10 - total % 10) % 10)
        if length == 15:
            return self.r.choice((f"{number[:4]}-{number[4:10]}-{number[10:]}", number))
        groups = [number[i : i + 4] for i in range(0, 16, 4)]
        return self.r.choice(("-".join(groups), "-".join(groups), " ".join(groups), number))

    def account(self) -> tuple[str, str]:
        bank, layout = self.r.choice(BANKS)
        return bank, "-".join(self.digits(n) for n in layout)

    def memo(self, core: str = "") -> str:
        """Free text of 30-120 chars around `core` (a sentence with PII, or nothing)."""
        target = self.r.randint(30, 120)
        parts = [core] if core else []
        length = len(core) if core else -1  # len(" ".join(parts))
        tries = 0
        while length < target and (tries < 12 or length < 30):
            tries += 1
            filler = self.r.choice(MEMO_FILLERS)
            if length + len(filler) + 1 <= 120:
                parts.insert(self.r.randint(0, len(parts)), filler)
                length += len(filler) + 1
        return " ".join(parts)


def build_corpus(n: int, seed: int) -> Corpus:
    g = Gen(seed)
    r = g.r
    corpus = Corpus()
    # Cell type weights (percent). About a quarter of the cells hold PII.
    plain: list[tuple[str, int, Callable[[], str]]] = [
        ("name", 12, g.name),
        ("city", 6, lambda: r.choice(CITIES)),
        ("amount", 12, g.amount),
        ("date/time", 12, g.date_cell),
        ("status", 8, lambda: r.choice(STATUSES)),
        ("order code", 6, g.order_code),
        ("uuid", 5, lambda: str(uuid.UUID(int=r.getrandbits(128), version=4))),
        ("integer", 5, lambda: str(r.randint(1, 9_999_999))),
        ("memo", 9, g.memo),
    ]
    kinds = [k for k, _, _ in plain] + ["email", "phone", "rrn", "card", "account", "memo+pii"]
    weights = [w for _, w, _ in plain] + [5, 7, 2, 2, 3, 6]
    makers = {k: f for k, _, f in plain}
    for kind in r.choices(kinds, weights, k=n):
        if kind in makers:
            corpus.add(kind, makers[kind]())
        elif kind == "email":
            value = g.email()
            corpus.add(kind, value, ("email", value))
        elif kind == "phone":
            value = g.phone()
            corpus.add(kind, value, ("phone", value))
        elif kind == "rrn":
            value = g.rrn()
            corpus.add(kind, value, ("rrn", value))
        elif kind == "card":
            value = g.card()
            corpus.add(kind, value, ("card", value))
        elif kind == "account":
            bank, value = g.account()
            cell = r.choice((f"{bank} {value}", f"{value} ({bank})", f"{bank} {value} 예금주 {g.name()}", value))
            corpus.add(kind, cell, ("account", value))
        else:
            add_pii_memo(g, corpus)
    return corpus


def add_pii_memo(g: Gen, corpus: Corpus) -> None:
    r = g.r
    name = g.name()
    pick = r.randrange(7)
    if pick == 0:
        p = g.phone()
        corpus.add("memo+pii", g.memo(f"{name}님 요청으로 배송지 변경, 연락처 {p}로 회신 부탁드립니다."), ("phone", p))
    elif pick == 1:
        bank, a = g.account()
        corpus.add("memo+pii", g.memo(f"{name} 고객 환불 건: {bank} {a} 으로 입금 예정."), ("account", a))
    elif pick == 2:
        e = g.email()
        corpus.add("memo+pii", g.memo(f"견적서는 {e} 로 발송 완료, 담당자 확인 필요."), ("email", e))
    elif pick == 3:
        p1, p2 = g.phone(), g.phone()
        corpus.add("memo+pii", g.memo(f"부재 시 {p1} 또는 {p2}로 연락 바람."), ("phone", p1), ("phone", p2))
    elif pick == 4:
        e, p = g.email(), g.phone()
        corpus.add("memo+pii", g.memo(f"세금계산서 수신 메일 {e} / 문의 {p}"), ("email", e), ("phone", p))
    elif pick == 5:
        bank, a = g.account()
        corpus.add("memo+pii", g.memo(f"환불계좌 {a}({bank}) 예금주 {name}."), ("account", a))
    else:
        a = g.digits(r.choice((10, 12, 14)))
        corpus.add("memo+pii", g.memo(f"입금계좌 {a} 확인 후 출고."), ("account", a))


# ==========================================================================
# Checks
# ==========================================================================


@dataclass
class LeakReport:
    pii_cells: int
    leaked_cells: int
    leaked_by_kind: Counter
    planted_by_kind: Counter
    clean_cells: int
    clean_altered: int
    examples: list[tuple[str, str]]


def leak_check(corpus: Corpus, indexes: list[int], outputs: list[str]) -> LeakReport:
    """A cell leaks when a planted value is still in its masked text, verbatim."""
    pii = leaked = clean = altered = 0
    by_kind: Counter = Counter()
    planted_by_kind: Counter = Counter()
    examples: list[tuple[str, str]] = []
    for i, out in zip(indexes, outputs, strict=True):
        planted = corpus.planted[i]
        if not planted:
            clean += 1
            altered += out != corpus.cells[i]
            continue
        pii += 1
        leaks = [kind for kind, value in planted if value in out]
        planted_by_kind.update(kind for kind, _ in planted)
        if leaks:
            leaked += 1
            by_kind.update(leaks)
            if len(examples) < 5:
                examples.append((corpus.cells[i], out))
    return LeakReport(pii, leaked, by_kind, planted_by_kind, clean, altered, examples)


def describe_leaks(report: LeakReport) -> str:
    by_kind = ", ".join(f"{k} {v:,}/{report.planted_by_kind[k]:,}" for k, v in sorted(report.leaked_by_kind.items()))
    return (
        f"{report.leaked_cells:,} of {report.pii_cells:,} PII cells leak a planted value"
        + (f" ({by_kind})" if by_kind else "")
        + f"; non-PII cells altered: {report.clean_altered:,} of {report.clean_cells:,}"
    )


# ==========================================================================
# This engine
# ==========================================================================


def run_ours(cells: list[str], known: KnownValues = EMPTY) -> tuple[float, float, list[str], MaskCounts]:
    """One pass: each cell through mask_string with one vault for the whole run.

    Returns (wall s, CPU s of this process, outputs, counts)."""
    vault = InMemoryVault()
    counts = MaskCounts()
    cpu = time.process_time()
    started = time.perf_counter()
    outputs = [mask_string(cell, vault, counts, known=known) for cell in cells]
    return time.perf_counter() - started, time.process_time() - cpu, outputs, counts


# The bare scan: what one compiled pattern costs over the same cells, with no
# validation and no tokens (digit runs as long as the shortest value, and
# e-mail shapes).
BARE_SCAN = re.compile(r"[0-9][0-9\-. /()+]{7,}[0-9]|[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def run_bare_scan(cells: list[str]) -> float:
    started = time.perf_counter()
    finditer = BARE_SCAN.finditer
    for cell in cells:
        for _match in finditer(cell):
            pass
    return time.perf_counter() - started


def vault_of(size: int, seed: int) -> KnownValues:
    """A conversation's vault of `size` names and phone numbers (none of
    them in the corpus, so the pass finds nothing and costs only its search)."""
    rng = random.Random(seed)
    syllables = [chr(c) for c in range(0xAC00 + 4000, 0xAC00 + 6000)]  # rare syllables: no corpus name
    triples: dict[str, tuple[str, str, str]] = {}
    while len(triples) < size:
        if len(triples) % 2:
            value, kind = f"019-{rng.randrange(1000, 10000)}-{rng.randrange(10000):04d}", "phone"
        else:
            value, kind = "".join(rng.choices(syllables, k=3)), "name"
        triples.setdefault(value, (value, kind, format_token(kind, len(triples) + 1)))
    return KnownValues(triples.values())


# ==========================================================================
# Presidio
# ==========================================================================

# Korean phones and bank accounts, the same ideas as governance.pii.detectors,
# simplified: digit lookarounds instead of \b (Hangul is a word character),
# and for bare account numbers an account word just before (the `regex` module,
# which Presidio uses, allows the variable-length lookbehind).
KR_PHONE_PATTERNS = [
    (
        "KR phone",
        r"(?<!\d)(?:\+82[ .-]?|0082[ .-]?|0)(?:1[016-9]|2|3[1-3]|4[1-4]|5[1-5]|6[1-4]|70)\)?"
        r"[ .-]?[1-9]\d{2,3}[ .-]?\d{4}(?!\d)",
        0.6,
    ),
    ("KR phone (area code in parentheses)", r"\(0(?:2|[3-6]\d|70)\)[ ]?[1-9]\d{2,3}[ .-]?\d{4}(?!\d)", 0.6),
]
KR_ACCOUNT_PATTERNS = [
    (
        "KR account (3-4 groups, 10-14 digits)",
        r"(?<![\w-])(?=(?:\d-?){10,14}(?![\w-]))\d{2,6}-\d{2,7}-\d{2,7}(?:-\d{1,3})?(?![\w-])",
        0.4,
    ),
    (
        "KR account (bare, after an account word)",
        r"(?<=(?:계좌|입금|송금|은행|뱅크|국민|신한|우리|하나|농협|기업|카카오|토스)\D{0,10})(?<!\d)\d{10,14}(?!\d)",
        0.5,
    ),
]


@dataclass
class Presidio:
    analyzer: object
    anonymizer: object
    operators: dict
    versions: str
    recognizers: list[str]


def build_presidio() -> Presidio:
    import importlib.metadata as metadata
    import os

    # EmailRecognizer validates domains with tldextract, which would fetch the
    # public suffix list at import: use its bundled snapshot (no network).
    os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")

    import spacy
    from presidio_analyzer import AnalyzerEngine, Pattern, PatternRecognizer, RecognizerRegistry
    from presidio_analyzer.nlp_engine import SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        KrFrnRecognizer,
        KrRrnRecognizer,
        PhoneRecognizer,
    )
    from presidio_anonymizer import AnonymizerEngine
    from presidio_anonymizer.entities import OperatorConfig

    lang = PRESIDIO_LANGUAGE
    # spaCy's Korean tokenizer needs mecab-ko; the rule-based tokenizer needs nothing.
    nlp = spacy.blank(lang, config={"nlp": {"tokenizer": {"@tokenizers": "spacy.Tokenizer.v1"}}})
    nlp_engine = SpacyNlpEngine(models=[{"lang_code": lang, "model_name": "blank"}])
    nlp_engine.nlp = {lang: nlp}  # loaded: AnalyzerEngine will not call load(), so nothing is downloaded

    registry = RecognizerRegistry(supported_languages=[lang])
    recognizers = [
        EmailRecognizer(supported_language=lang),
        CreditCardRecognizer(supported_language=lang),
        PhoneRecognizer(supported_language=lang, supported_regions=("KR",)),
        KrRrnRecognizer(supported_language=lang),
        KrFrnRecognizer(supported_language=lang),
        PatternRecognizer(
            supported_entity="KR_PHONE",
            name="KrPhonePatternRecognizer",
            supported_language=lang,
            patterns=[Pattern(name, rx, score) for name, rx, score in KR_PHONE_PATTERNS],
        ),
        PatternRecognizer(
            supported_entity="KR_ACCOUNT",
            name="KrAccountPatternRecognizer",
            supported_language=lang,
            patterns=[Pattern(name, rx, score) for name, rx, score in KR_ACCOUNT_PATTERNS],
            context=["계좌", "입금", "은행", "account", "bank"],
        ),
    ]
    for recognizer in recognizers:
        registry.add_recognizer(recognizer)
    analyzer = AnalyzerEngine(registry=registry, nlp_engine=nlp_engine, supported_languages=[lang])
    versions = ", ".join(
        f"{pkg} {metadata.version(pkg)}" for pkg in ("presidio-analyzer", "presidio-anonymizer", "spacy")
    )
    return Presidio(
        analyzer=analyzer,
        anonymizer=AnonymizerEngine(),
        operators={"DEFAULT": OperatorConfig("replace")},  # "<EMAIL_ADDRESS>", "<KR_PHONE>", ...
        versions=versions,
        recognizers=[type(r).__name__ if type(r) is not PatternRecognizer else r.name for r in recognizers],
    )


def run_presidio(p: Presidio, cells: list[str]) -> tuple[float, float, float, list[str]]:
    """One pass: analyze + anonymize each cell. Returns (wall s, CPU s, analyze wall s, outputs)."""
    analyze = p.analyzer.analyze
    anonymize = p.anonymizer.anonymize
    operators = p.operators
    clock = time.perf_counter
    outputs = []
    analyze_s = 0.0
    cpu = time.process_time()
    started = clock()
    for cell in cells:
        t0 = clock()
        results = analyze(text=cell, language=PRESIDIO_LANGUAGE)
        analyze_s += clock() - t0
        outputs.append(anonymize(text=cell, analyzer_results=results, operators=operators).text)
    return clock() - started, time.process_time() - cpu, analyze_s, outputs


# ==========================================================================
# Main
# ==========================================================================


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--runs", type=int, default=3, help="timed passes of our engine (best is reported)")
    parser.add_argument("--no-presidio", action="store_true", help="report our figure only")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: proves the bench still runs")
    args = parser.parse_args()
    if args.smoke:
        args.cells, args.runs = 2_000, 1
    vault_sizes = (10, 100) if args.smoke else (10, 1_000, 100_000)

    corpus = build_corpus(args.cells, args.seed)
    cells = corpus.cells
    n = len(cells)
    pii_cells = sum(1 for p in corpus.planted if p)
    planted = Counter(kind for p in corpus.planted for kind, _ in p)
    print(
        f"corpus: {n:,} cells (seed {args.seed}), {sum(map(len, cells)):,} chars, "
        f"PII planted in {pii_cells:,} cells ({pii_cells / n:.1%}): "
        + ", ".join(f"{k} {v:,}" for k, v in planted.most_common())
    )
    print("cell types: " + ", ".join(f"{k} {v:,}" for k, v in Counter(corpus.types).most_common()))
    memo_lengths = [len(c) for c, k in zip(cells, corpus.types, strict=True) if k.startswith("memo")]
    if memo_lengths:
        print(
            f"memo length: {min(memo_lengths)}-{max(memo_lengths)} chars, "
            f"mean {sum(memo_lengths) / len(memo_lengths):.0f}"
        )

    # --- this engine ---------------------------------------------------------
    timings = []
    cpu_timings = []
    outputs: list[str] = []
    counts = MaskCounts()
    for _ in range(max(1, args.runs)):
        seconds, cpu, outputs, counts = run_ours(cells)
        timings.append(seconds)
        cpu_timings.append(cpu)
    best = min(timings)
    ours = n / best
    masked = Counter()
    for (_, _, kind), v in counts.items():
        masked[kind] += v
    print(
        f"ours: mask_string per cell, one InMemoryVault per pass, best of {len(timings)}: {best:.3f} s "
        f"-> {ours:,.0f} cells/s ({best / n * 1e6:.2f} us/cell; passes: "
        + ", ".join(f"{t:.3f}" for t in timings)
        + f" s; CPU-time figure {n / min(cpu_timings):,.0f} cells/s)"
    )
    print(f"ours: {sum(masked.values()):,} values masked: " + ", ".join(f"{k} {v:,}" for k, v in masked.most_common()))
    print("ours by cell type (us/cell, best of 2): " + ", ".join(per_type_cost(corpus)))
    bare = min(run_bare_scan(cells) for _ in range(max(1, args.runs)))
    print(
        f"bare scan (one compiled pattern, finditer, no validation or tokens): {n / bare:,.0f} cells/s; "
        f"the engine runs at {bare / best:.0%} of it"
    )
    slow = slow_path_share(cells)
    print(f"pipeline: {slow:,} of {n:,} corpus cells ({slow / n:.2%}) go through decode and fold")
    hidden = hidden_cells(corpus.planted, 200 if args.smoke else HIDDEN_CELLS, args.seed)
    mask_one = _masker()
    hidden_s = min(run_hidden(mask_one, hidden)[0] for _ in range(max(1, args.runs)))
    hidden_leaks = run_hidden(mask_one, hidden)[1]
    print(
        f"pipeline on re-spelled values (decode and fold): {len(hidden) / hidden_s:,.0f} cells/s "
        f"({hidden_s / len(hidden) * 1e6:.1f} us/cell); {hidden_leaks} of {len(hidden):,} leak the spelled value"
    )
    for size in vault_sizes:
        known = vault_of(size, args.seed)
        with_known = min(run_ours(cells, known)[0] for _ in range(max(1, args.runs)))
        print(
            f"ours with the known-value pass, vault of {size:>7,} values: {n / with_known:,.0f} cells/s "
            f"({with_known / best:.2f}x the time without it)"
        )
    our_leaks = leak_check(corpus, list(range(n)), outputs)
    print(f"ours leak check: {describe_leaks(our_leaks)}")
    for original, out in our_leaks.examples:
        print(f"  LEAK: {original!r} -> {out!r}")

    # --- Presidio ------------------------------------------------------------
    theirs: float | None = None
    theirs_cpu = 0.0
    if args.no_presidio:
        print("presidio: skipped (--no-presidio)")
    else:
        try:
            presidio = build_presidio()
        except ImportError as exc:
            presidio = None
            print(f"presidio: not importable ({exc}); to compare, install the dev-only packages:")
            print(f"  {PIP_HINT}")
        if presidio is not None:
            theirs, theirs_cpu = bench_presidio(presidio, corpus)

    if theirs:
        ours_cpu = n / min(cpu_timings)
        print(
            f"ratio: {ours / theirs:,.0f}x wall-clock, {ours_cpu / theirs_cpu:,.0f}x CPU time (ours / presidio cells/s)"
        )
        headline_theirs, ratio = f"{theirs:,.0f}", f"{ours / theirs:,.0f}"
    else:
        headline_theirs, ratio = "n/a", "n/a"
    if our_leaks.leaked_cells or hidden_leaks:
        print(f"FAIL: {our_leaks.leaked_cells + hidden_leaks} cells leak a planted PII value through our masking")
    print(
        f"mask: {ours:,.0f} cells/s, presidio: {headline_theirs} cells/s, ratio {ratio}×, "
        f"{bare / best:.0%} of the bare scan "
        f"(goal ≥ {GOAL_RATE:,} cells/s, ≥ {GOAL_RATIO}× presidio, ≥ {GOAL_BARE_SHARE:.0%} of the bare scan)"
    )
    return 1 if our_leaks.leaked_cells or hidden_leaks else 0


def _masker():
    vault = InMemoryVault()
    counts = MaskCounts()
    return lambda cell: mask_string(cell, vault, counts)


def per_type_cost(corpus: Corpus) -> list[str]:
    """Where our time goes: the cells of each type on their own, best of 2 passes."""
    by_type: dict[str, list[str]] = {}
    for cell, kind in zip(corpus.cells, corpus.types, strict=True):
        by_type.setdefault(kind, []).append(cell)
    costs = []
    for kind, cells in by_type.items():
        seconds = min(run_ours(cells)[0] for _ in range(2))
        costs.append((seconds / len(cells) * 1e6, kind))
    return [f"{kind} {us:.1f}" for us, kind in sorted(costs, reverse=True)]


def bench_presidio(presidio: Presidio, corpus: Corpus) -> tuple[float, float]:
    """Presidio's (wall, CPU-time) cells/s."""
    n = len(corpus.cells)
    step = (
        PRESIDIO_SUBSET_STEP if n // PRESIDIO_SUBSET_STEP >= PRESIDIO_MIN_SUBSET else max(1, n // PRESIDIO_MIN_SUBSET)
    )
    subset = list(range(0, n, step))
    print(f"presidio: {presidio.versions}; blank spaCy '{PRESIDIO_LANGUAGE}' pipeline (no NER model)")
    print(f"presidio recognizers: {', '.join(presidio.recognizers)}; anonymizer: replace -> <ENTITY_TYPE>")
    # Calibration (also the warm-up: lazy regex compilation, phonenumbers metadata).
    calib = [corpus.cells[i] for i in subset[:1000]]
    seconds = run_presidio(presidio, calib)[0]
    per_cell = seconds / len(calib)
    full_estimate = per_cell * n
    if full_estimate <= PRESIDIO_BUDGET_S:
        indexes, scope = list(range(n)), f"full corpus ({n:,} cells)"
    else:
        indexes = subset
        scope = (
            f"fixed subset: every {step}th cell ({len(subset):,} cells; full corpus estimated at "
            f"{full_estimate:,.0f} s > {PRESIDIO_BUDGET_S:.0f} s), cells/s extrapolated from it"
        )
    cells = [corpus.cells[i] for i in indexes]
    runs = 3 if per_cell * len(cells) * 3 <= PRESIDIO_BUDGET_S else 1
    best = None
    timings = []
    cpu_timings = []
    for _ in range(runs):
        wall, cpu, analyze_s, outputs = run_presidio(presidio, cells)
        timings.append(wall)
        cpu_timings.append(cpu)
        if best is None or wall < best[0]:
            best = (wall, analyze_s, outputs)
    wall, analyze_s, outputs = best
    rate = len(cells) / wall
    print(
        f"presidio: analyze + anonymize per cell on the {scope}, best of {runs}: {wall:.2f} s "
        f"-> {rate:,.0f} cells/s ({wall / len(cells) * 1e6:,.0f} us/cell; analyze {analyze_s / wall:.0%}, "
        f"anonymize {1 - analyze_s / wall:.0%}; passes: "
        + ", ".join(f"{t:.2f}" for t in timings)
        + f" s; CPU-time figure {len(cells) / min(cpu_timings):,.0f} cells/s)"
    )
    phone_share = phone_recognizer_share(presidio, cells[:2000])
    if phone_share is not None:
        print(f"presidio: PhoneRecognizer (phonenumbers) alone takes {phone_share:.0%} of analyze time (2,000 cells)")
    report = leak_check(corpus, indexes, outputs)
    print(f"presidio leak check (information): {describe_leaks(report)}")
    return rate, len(cells) / min(cpu_timings)


def phone_recognizer_share(presidio: Presidio, cells: list[str]) -> float | None:
    """Share of the analyzer's recognizer time spent in the phonenumbers-based recognizer."""
    recognizers = presidio.analyzer.registry.recognizers
    phone = [r for r in recognizers if type(r).__name__ == "PhoneRecognizer"]
    if not phone:
        return None
    clock = time.perf_counter
    started = clock()
    for cell in cells:
        presidio.analyzer.analyze(text=cell, language=PRESIDIO_LANGUAGE)
    total = clock() - started
    started = clock()
    for cell in cells:
        phone[0].analyze(text=cell, entities=["PHONE_NUMBER"], nlp_artifacts=None)
    return (clock() - started) / total


if __name__ == "__main__":
    sys.exit(main())
