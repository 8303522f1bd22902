"""The personal-data kinds, named once: machine ids, the Korean labels that
tokens carry (`[전화번호-3]`), and the order of severity that picks one kind
when an output derives from several. Pure (no Django): the detectors, the
masking engine, lineage and the vault all import it; the admin's translated
names (governance.models.PiiKindChoice) are built from it, and
tests/test_vocabulary.py ties every other list of kinds to it."""

from __future__ import annotations

from enum import Enum


class PiiKind(str, Enum):
    RRN = "rrn"  # 주민등록번호
    FOREIGNER_RN = "frn"  # 외국인등록번호
    PHONE = "phone"  # 전화번호
    EMAIL = "email"  # 이메일
    CARD = "card"  # 카드번호
    ACCOUNT = "account"  # 계좌번호
    PASSPORT = "passport"  # 여권번호
    DRIVER_LICENSE = "driver_license"  # 운전면허번호
    NAME = "name"  # 이름 (not detected by format)
    ADDRESS = "address"  # 주소 (not detected by format)

    @property
    def label(self) -> str:
        return TOKEN_LABELS[self]


# The label inside a token. Tokens are part of what the model reads and what
# re-identification parses back, so these never change with the UI language.
TOKEN_LABELS: dict[PiiKind, str] = {
    PiiKind.RRN: "주민등록번호",
    PiiKind.FOREIGNER_RN: "외국인등록번호",
    PiiKind.PHONE: "전화번호",
    PiiKind.EMAIL: "이메일",
    PiiKind.CARD: "카드번호",
    PiiKind.ACCOUNT: "계좌번호",
    PiiKind.PASSPORT: "여권번호",
    PiiKind.DRIVER_LICENSE: "운전면허번호",
    PiiKind.NAME: "이름",
    PiiKind.ADDRESS: "주소",
}

# "Most severe first" when an output derives from several kinds: identity
# numbers, then financial, then contact data, then names. The output is
# masked whole either way; the kind only labels the token.
SEVERITY: tuple[str, ...] = (
    "rrn",
    "frn",
    "passport",
    "driver_license",
    "card",
    "account",
    "phone",
    "email",
    "address",
    "name",
)

KIND_IDS: frozenset[str] = frozenset(kind.value for kind in PiiKind)
