"""The personal-data kinds, each defined once, as one record: machine id,
the Korean label that tokens carry (`[전화번호-3]`), the admin's name (an
English msgid, translated where it is shown), the column-name hints schema
analysis looks for, the normaliser that gives a value its canonical form,
and the rank that picks one kind when candidate spans overlap. The order of
KINDS is the order of severity (identity numbers, then financial, then
contact data, then names): it picks one kind when an output derives from
several. Everything else (PiiKind, TOKEN_LABELS, SEVERITY, NORMALISERS,
NAME_HINTS, ADMIN_LABELS) is derived from KINDS.

Pure (no Django): the detectors, the masking engine, lineage and the vault
import it. `gettext_noop` below is a local identity function: it only marks
the admin names for makemessages; governance.models translates them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from governance.pii.textforms import (
    digits_only,
    normalise_email,
    normalise_passport,
    normalise_phone,
    normalise_words,
)


def gettext_noop(message: str) -> str:
    """Marks a msgid for extraction; the caller translates it where shown."""
    return message


@dataclass(frozen=True)
class KindRecord:
    id: str  # stable machine id, stored in classifications and lineage
    member: str  # the PiiKind member name
    token_label: str  # inside a token; never changes with the UI language
    admin_label: str  # English msgid
    name_hints: frozenset[str]  # column-name parts (split on _ - . and camelCase)
    korean_hints: tuple[str, ...]  # substrings of a Korean column name
    normaliser: Callable[[str], str]
    # Among overlapping candidate spans of the same length, the higher rank
    # wins: the more specific, better validated format. 0: never detected by
    # format (names and addresses are found by classification only).
    overlap_rank: int


# Most severe first. Tokens are part of what the model reads and what
# re-identification parses back, so token labels never change.
KINDS: tuple[KindRecord, ...] = (
    KindRecord(
        "rrn",
        "RRN",
        "주민등록번호",
        gettext_noop("Resident registration number"),
        frozenset({"rrn", "ssn", "jumin", "resident"}),
        ("주민등록", "주민번호"),
        digits_only,
        9,
    ),
    KindRecord(
        "frn",
        "FOREIGNER_RN",
        "외국인등록번호",
        gettext_noop("Foreigner registration number"),
        frozenset({"frn"}),
        ("외국인등록",),
        digits_only,
        9,
    ),
    KindRecord(
        "passport",
        "PASSPORT",
        "여권번호",
        gettext_noop("Passport number"),
        frozenset({"passport"}),
        ("여권",),
        normalise_passport,
        7,
    ),
    KindRecord(
        "driver_license",
        "DRIVER_LICENSE",
        "운전면허번호",
        gettext_noop("Driver's licence number"),
        frozenset({"license", "licence"}),
        ("면허",),
        digits_only,
        7,
    ),
    KindRecord(
        "card",
        "CARD",
        "카드번호",
        gettext_noop("Card number"),
        frozenset({"card"}),
        ("카드번호",),
        digits_only,
        8,
    ),
    KindRecord(
        "account",
        "ACCOUNT",
        "계좌번호",
        gettext_noop("Bank account number"),
        frozenset({"account", "acct", "iban"}),
        ("계좌",),
        digits_only,
        4,
    ),
    KindRecord(
        "phone",
        "PHONE",
        "전화번호",
        gettext_noop("Phone number"),
        frozenset({"phone", "tel", "mobile", "cellphone", "hp", "fax"}),
        ("전화", "연락처", "휴대폰", "핸드폰"),
        normalise_phone,
        6,
    ),
    KindRecord(
        "email",
        "EMAIL",
        "이메일",
        gettext_noop("Email"),
        frozenset({"email", "mail"}),
        ("이메일", "메일"),
        normalise_email,
        5,
    ),
    KindRecord(
        "address",
        "ADDRESS",
        "주소",
        gettext_noop("Address"),
        frozenset({"address", "addr", "street"}),
        ("주소",),
        normalise_words,
        0,
    ),
    KindRecord(
        "name",
        "NAME",
        "이름",
        gettext_noop("Name"),
        frozenset({"name", "fullname", "firstname", "lastname", "surname", "username", "nickname"}),
        ("이름", "성명", "고객명", "직원명"),
        normalise_words,
        0,
    ),
)

PiiKind = Enum("PiiKind", [(record.member, record.id) for record in KINDS], type=str, module=__name__)
PiiKind.__doc__ = "The kinds' machine ids as a str enum (PiiKind.PHONE == 'phone'); kind.label is the token label."

RECORDS: dict[str, KindRecord] = {record.id: record for record in KINDS}
TOKEN_LABELS: dict[PiiKind, str] = {PiiKind(record.id): record.token_label for record in KINDS}
PiiKind.label = property(lambda kind: TOKEN_LABELS[kind])  # type: ignore[attr-defined]
SEVERITY: tuple[str, ...] = tuple(record.id for record in KINDS)
KIND_IDS: frozenset[str] = frozenset(SEVERITY)
ADMIN_LABELS: dict[str, str] = {record.id: record.admin_label for record in KINDS}
# (kind id, column-name parts, Korean substrings), in the order schema
# analysis tries them: names last (``email_address`` is an e-mail, not a name).
NAME_HINTS: tuple[tuple[str, frozenset[str], tuple[str, ...]], ...] = tuple(
    (record.id, record.name_hints, record.korean_hints) for record in KINDS
)
NORMALISERS: dict[str, Callable[[str], str]] = {record.id: record.normaliser for record in KINDS}
OVERLAP_RANK: dict[str, int] = {record.id: record.overlap_rank for record in KINDS if record.overlap_rank}
