"""One record per personal-data kind (governance.pii.kinds.KINDS); the
detectors' lists are derived from it, and the lists other modules still
spell agree with it."""

from __future__ import annotations

from django.utils import translation

from governance.pii import kinds
from governance.pii.detect import match, pipeline


def test_every_list_of_kinds_is_derived_from_the_records() -> None:
    ids = [record.id for record in kinds.KINDS]
    assert len(set(ids)) == len(ids)
    assert [kind.value for kind in kinds.PiiKind] == ids
    assert kinds.SEVERITY == tuple(ids)
    assert kinds.KIND_IDS == frozenset(ids)
    assert {kind.value: label for kind, label in kinds.TOKEN_LABELS.items()} == {
        r.id: r.token_label for r in kinds.KINDS
    }
    assert len(set(kinds.TOKEN_LABELS.values())) == len(ids)
    assert kinds.NORMALISERS == {r.id: r.normaliser for r in kinds.KINDS}
    assert kinds.PiiKind.PHONE.label == "전화번호" and kinds.PiiKind("rrn") is kinds.PiiKind.RRN


def test_the_detectors_rank_overlaps_by_the_records() -> None:
    assert match._PRIORITY is kinds.OVERLAP_RANK
    detected = {kind for kind, *_ in pipeline.detect_spans("010-1234-5678 hong@naver.com 900101-1234567")}
    assert detected <= set(kinds.OVERLAP_RANK)
    # names and addresses have no format: classification finds them, never the detectors
    assert "name" not in kinds.OVERLAP_RANK and "address" not in kinds.OVERLAP_RANK


def test_the_admin_names_are_the_records_msgids() -> None:
    from governance.models import PiiKindChoice

    with translation.override("en"):
        assert {value: str(label) for value, label in PiiKindChoice.choices} == kinds.ADMIN_LABELS


def test_schema_analysis_hints_are_the_records() -> None:
    from governance import schema_analysis

    assert schema_analysis.NAME_HINTS is kinds.NAME_HINTS
    assert kinds.NAME_HINTS[-1][0] == "name"  # names are tried last


def test_a_new_kind_needs_no_migration() -> None:
    from governance.models import ColumnClassification, pii_kind_choices

    field = ColumnClassification._meta.get_field("pii_kind")
    assert field.choices == list(pii_kind_choices())  # resolved from the callable
    assert field.deconstruct()[3]["choices"] is pii_kind_choices  # what a migration records
