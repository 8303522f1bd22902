"""Tamper evidence: chained HMAC digests over the audit tables (audit/digest.py)."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from contextlib import contextmanager
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from audit import digest as audit_digest
from audit.digest import (
    Problem,
    canonical_instance,
    canonical_row,
    hmac_key,
    row_attnames,
    seal_new_rows,
    verify,
    verify_report,
)
from audit.models import AUDIT_TABLES, AuditDigest, AuditEvent, ToolCallAudit
from audit.services import tool_call_audit_write

TC = ToolCallAudit._meta.db_table
EV = AuditEvent._meta.db_table


def later(seconds: int = 10) -> dt.datetime:
    """A `now` past the settle delay of rows created just before."""
    return timezone.now() + dt.timedelta(seconds=seconds)


def write_call(n: int = 0, **overrides) -> ToolCallAudit:
    values = dict(
        actor_id=7,
        actor_username="staff",
        tool="run_sql",
        outcome="success",
        resource_id=3,
        resource_name="sales",
        row_count=n,
        sql_text=f"SELECT {n} FROM customers",
        tables=["customers"],
        conversation_id=uuid.uuid4(),
        turn_id=n,
        duration_ms=1.25 + n,
    )
    values.update(overrides)
    return tool_call_audit_write(**values)


def write_event(**overrides) -> AuditEvent:
    values = dict(
        kind="admin_view",
        actor_id=1,
        actor_username="admin",
        ip="10.0.0.1",
        resource_kind="toolcallaudit",
        filters={"outcome": "denied"},
        details={"page": 1},
    )
    values.update(overrides)
    return AuditEvent.objects.create(**values)


@contextmanager
def guards_lifted(tables=AUDIT_TABLES):
    """Let the test act as a database superuser rewriting the append-only tables.

    SQLite: drop the guard triggers and re-create them from their stored SQL.
    PostgreSQL: the test role is a superuser (grants and RLS do not apply);
    user triggers, if any, are disabled for the duration.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            saved = []
            for table in tables:
                cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [table])
                saved.extend(cursor.fetchall())
            for name, _sql in saved:
                cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
        else:
            for table in tables:
                cursor.execute(f'ALTER TABLE "{table}" DISABLE TRIGGER USER')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                for _name, sql in saved:
                    cursor.execute(sql)
            else:
                for table in tables:
                    cursor.execute(f'ALTER TABLE "{table}" ENABLE TRIGGER USER')


def tamper(queryset, **changes) -> None:
    """UPDATE (or, without changes, DELETE) bypassing the append-only guards."""
    with guards_lifted():
        if changes:
            assert queryset.update(**changes)
        else:
            assert queryset.delete()[0]


def calls(*objs) -> object:
    return ToolCallAudit.objects.filter(pk__in=[o.pk for o in objs])


def digests(table: str) -> list[AuditDigest]:
    return list(AuditDigest.objects.filter(table=table).order_by("last_id"))


def kinds(problems: list[Problem]) -> list[tuple[str, int, int, str]]:
    return sorted((p.table, p.first_id, p.last_id, p.kind) for p in problems)


# --- Canonical form -------------------------------------------------------------


def test_canonical_row_format_is_fixed():
    values = {
        "created_at": dt.datetime(2026, 3, 1, 9, 30, 0, 5, tzinfo=dt.timezone(dt.timedelta(hours=9))),
        "id": 12,
        "conversation_id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "tables": {"b": [1, 1.5, None], "a": "고객"},
        "sql_text": "SELECT '한글'",
        "row_count": None,
        "sql_truncated": False,
    }
    names = row_attnames(ToolCallAudit)
    row = [values.get(name, "") for name in names]
    canonical = canonical_row(ToolCallAudit, row)
    decoded = json.loads(canonical)
    assert list(decoded) == sorted(names)
    assert decoded["created_at"] == "2026-03-01T00:30:00.000005+00:00"
    assert decoded["conversation_id"] == "12345678-1234-5678-1234-567812345678"
    assert decoded["row_count"] is None
    # JSON: sorted keys, no ASCII escaping, compact separators.
    assert b'"tables":{"a":"\xea\xb3\xa0\xea\xb0\x9d","b":[1,1.5,null]}' in canonical
    assert "SELECT '한글'".encode() in canonical
    assert b": " not in canonical and b", " not in canonical


@pytest.mark.django_db
def test_canonical_row_survives_the_database_round_trip():
    """What was written and what the backend returns serialise identically
    (jsonb reorders keys, datetimes come back in UTC, UUIDs as objects)."""
    call = write_call(
        5,
        tables=["고객", "orders"],
        sql_text="SELECT 이름 FROM 고객 -- ünïcode",
        duration_ms=0.1,
    )
    event = write_event(
        filters={"z": 1, "a": [True, None, 1.0, 2.5], "한": {"y": "글", "b": {}}},
        details={"nested": {"k2": [1, 2], "k1": "v"}, "empty": []},
    )
    for obj in (call, event):
        model = type(obj)
        as_written = canonical_instance(obj)
        from_values = canonical_row(model, model.objects.filter(pk=obj.pk).values_list(*row_attnames(model)).get())
        from_instance = canonical_instance(model.objects.get(pk=obj.pk))
        assert as_written == from_values == from_instance
    decoded = json.loads(canonical_instance(event))
    assert list(decoded["filters"]) == ["a", "z", "한"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", decoded["created_at"])


# --- Sealing ------------------------------------------------------------------


@pytest.mark.django_db
def test_seal_covers_settled_rows_and_is_idempotent():
    calls = [write_call(n) for n in range(3)]
    events = [write_event(), write_event(kind="csv_export")]
    # Too fresh: nothing is sealed within the settle delay.
    assert seal_new_rows(now=timezone.now()) == []

    sealed = seal_new_rows(now=later())
    assert {(d.table, d.first_id, d.last_id, d.row_count, d.previous) for d in sealed} == {
        (TC, calls[0].pk, calls[-1].pk, 3, ""),
        (EV, events[0].pk, events[-1].pk, 2, ""),
    }
    assert all(len(d.digest) == 64 for d in sealed)

    assert seal_new_rows(now=later()) == []
    assert AuditDigest.objects.count() == 2
    assert verify(now=later()) == []


@pytest.mark.django_db
def test_new_rows_get_a_new_digest_chained_to_the_previous_one():
    write_call(1)
    (first,) = seal_new_rows(now=later())
    new = write_call(2)
    (second,) = seal_new_rows(now=later())
    assert (second.table, second.first_id, second.last_id, second.row_count) == (TC, new.pk, new.pk, 1)
    assert second.previous == first.digest
    assert verify(now=later()) == []


@pytest.mark.django_db
def test_sealing_stops_at_the_first_unsettled_row():
    old = write_call(1)
    fresh = write_call(2)
    newer = write_call(3)
    # `fresh` is younger than the settle delay at `now`; `newer` has a larger
    # id but an older time (another process's clock): it must not be sealed
    # past `fresh`, or `fresh` would be left inside a sealed range.
    now = later()
    tamper(calls(fresh), created_at=now - dt.timedelta(seconds=1))
    tamper(calls(newer), created_at=now - dt.timedelta(seconds=60))
    (digest,) = seal_new_rows(now=now)
    assert (digest.first_id, digest.last_id, digest.row_count) == (old.pk, old.pk, 1)
    (digest,) = seal_new_rows(now=now + dt.timedelta(seconds=10))
    assert (digest.first_id, digest.last_id, digest.row_count) == (fresh.pk, newer.pk, 2)


@pytest.mark.django_db
def test_large_backlog_is_sealed_in_chained_chunks(monkeypatch):
    monkeypatch.setattr(audit_digest, "MAX_ROWS_PER_DIGEST", 2)
    rows = [write_call(n) for n in range(5)]
    sealed = seal_new_rows(now=later())
    assert [(d.first_id, d.last_id, d.row_count) for d in sealed] == [
        (rows[0].pk, rows[1].pk, 2),
        (rows[2].pk, rows[3].pk, 2),
        (rows[4].pk, rows[4].pk, 1),
    ]
    assert [d.previous for d in sealed] == ["", sealed[0].digest, sealed[1].digest]
    assert verify(now=later()) == []


@pytest.mark.django_db
def test_id_gaps_are_fine():
    a, b, c = write_call(1), write_call(2), write_call(3)
    tamper(calls(b))  # as if b's insert had rolled back
    (digest,) = seal_new_rows(now=later())
    assert (digest.first_id, digest.last_id, digest.row_count) == (a.pk, c.pk, 2)
    assert verify(now=later()) == []


# --- Verification ---------------------------------------------------------------


@pytest.fixture
def two_ranges(db):
    """Tool calls sealed in two ranges, events in one."""
    first = [write_call(n) for n in range(3)]
    write_event()
    seal_new_rows(now=later())
    second = [write_call(n) for n in range(3, 6)]
    seal_new_rows(now=later())
    return first, second


def test_verify_is_clean_on_untouched_data(two_ranges):
    report = verify_report(now=later())
    assert report.problems == []
    assert report.ranges_checked == 3 and report.rows_checked == 7
    assert report.heads[TC] == (two_ranges[1][-1].pk, digests(TC)[-1].digest)


def test_changed_row_is_detected_in_its_range(two_ranges):
    first, second = two_ranges
    tamper(calls(second[1]), sql_text="SELECT 1")
    assert kinds(verify(now=later())) == [(TC, second[0].pk, second[-1].pk, "changed")]


def test_changed_json_field_is_detected(two_ranges):
    first, _ = two_ranges
    tamper(calls(first[0]), tables=["salaries"])
    assert kinds(verify(now=later())) == [(TC, first[0].pk, first[-1].pk, "changed")]


def test_deleted_row_is_reported_missing(two_ranges):
    first, _ = two_ranges
    tamper(calls(first[1]))
    (problem,) = verify(now=later())
    assert (problem.table, problem.first_id, problem.last_id, problem.kind) == (
        TC,
        first[0].pk,
        first[-1].pk,
        "missing",
    )
    assert "2 row(s) present, 3 sealed" in problem.detail


def test_deleted_first_row_of_a_range_is_reported_missing(two_ranges):
    _, second = two_ranges
    tamper(calls(second[0]))
    assert kinds(verify(now=later())) == [(TC, second[0].pk, second[-1].pk, "missing")]


def test_row_inserted_into_a_sealed_range_is_unexpected(db):
    a, b, c = write_call(1), write_call(2), write_call(3)
    tamper(calls(b))
    seal_new_rows(now=later())
    forged = ToolCallAudit.objects.create(id=b.pk, tool="run_sql", outcome="success", sql_text="SELECT forged")
    problems = [p for p in verify(now=later()) if p.table == TC]
    assert kinds(problems) == [(TC, a.pk, c.pk, "unexpected_row")]
    assert forged.pk == b.pk


def test_tampered_digest_value_breaks_the_chain(two_ranges):
    first_digest = digests(TC)[0]
    tamper(AuditDigest.objects.filter(pk=first_digest.pk), digest="0" * 64)
    problems = verify(now=later())
    assert kinds(problems) == [(TC, first_digest.first_id, first_digest.last_id, "chain_broken")]


def test_tampered_previous_link_breaks_the_chain(two_ranges):
    second_digest = digests(TC)[1]
    tamper(AuditDigest.objects.filter(pk=second_digest.pk), previous="f" * 64)
    assert kinds(verify(now=later())) == [(TC, second_digest.first_id, second_digest.last_id, "chain_broken")]


def test_deleted_digest_breaks_the_chain(db):
    # Three ranges, one row each.
    for n in range(3):
        write_call(n)
        seal_new_rows(now=later())
    middle = digests(TC)[1]
    tamper(AuditDigest.objects.filter(pk=middle.pk))
    assert kinds(verify(now=later())) == [(TC, middle.first_id, middle.last_id, "chain_broken")]


def test_deleted_oldest_digest_with_rows_still_retained_breaks_the_chain(two_ranges):
    first, _ = two_ranges
    tamper(AuditDigest.objects.filter(pk=digests(TC)[0].pk))
    assert kinds(verify(now=later())) == [(TC, first[0].pk, first[-1].pk, "chain_broken")]


def test_the_key_matters(two_ranges, settings):
    settings.OWLAI_AUDIT_HMAC_KEY = ""
    derived = hmac_key()
    assert derived != settings.SECRET_KEY.encode() and len(derived) == 32
    settings.OWLAI_AUDIT_HMAC_KEY = "a-different-key"
    assert hmac_key() == b"a-different-key"
    problems = verify(now=later())
    assert problems and {p.kind for p in problems} == {"changed"}
    assert {(p.table, p.first_id, p.last_id) for p in problems} == {
        (d.table, d.first_id, d.last_id) for d in AuditDigest.objects.all()
    }
    settings.OWLAI_AUDIT_HMAC_KEY = ""
    assert verify(now=later()) == []


def test_configured_key_seals_and_verifies(db, settings):
    settings.OWLAI_AUDIT_HMAC_KEY = "production-key"
    write_call(1)
    seal_new_rows(now=later())
    assert verify(now=later()) == []
    settings.OWLAI_AUDIT_HMAC_KEY = ""
    assert [p.kind for p in verify(now=later())] == ["changed"]


# --- Retention ----------------------------------------------------------------


def test_rows_deleted_past_retention_are_not_problems(two_ranges, settings):
    first, second = two_ranges
    tamper(ToolCallAudit.objects.all())
    tamper(AuditEvent.objects.all())
    past_retention = later() + dt.timedelta(days=settings.OWLAI_RETENTION_DAYS + 1)
    report = verify_report(now=past_retention)
    assert report.problems == []
    assert report.expired_skipped == 3
    # Within retention the same deletions are tampering where the age of the
    # lost rows is known (after an earlier digest); the oldest range of each
    # chain has no such bound and is reported as skipped, not as intact.
    report = verify_report(now=later())
    assert kinds(report.problems) == [(TC, second[0].pk, second[-1].pk, "missing")]
    assert sorted((s.table, s.first_id) for s in report.skipped) == [(EV, digests(EV)[0].first_id), (TC, first[0].pk)]


def test_range_straddling_the_retention_cut(db, settings):
    expired = timezone.now() - dt.timedelta(days=settings.OWLAI_RETENTION_DAYS + 30)
    old = [write_call(n) for n in range(2)]
    recent = write_call(2)
    tamper(calls(*old), created_at=expired)
    (digest,) = seal_new_rows(now=later())

    # All rows still there: verified, so a change is found.
    tamper(calls(recent), sql_text="SELECT 2")
    assert kinds(verify(now=later())) == [(TC, digest.first_id, digest.last_id, "changed")]
    tamper(calls(recent), sql_text=recent.sql_text)
    assert verify(now=later()) == []

    # Retention deletes the expired rows (the SQLite guard lets these through).
    ToolCallAudit.objects.filter(pk__in=[c.pk for c in old]).delete()
    report = verify_report(now=later())
    assert report.problems == []
    assert [(s.first_id, s.last_id) for s in report.skipped] == [(digest.first_id, digest.last_id)]


def test_retention_removing_the_oldest_digests(db, settings):
    expired = timezone.now() - dt.timedelta(days=settings.OWLAI_RETENTION_DAYS + 30)
    old = [write_call(n) for n in range(2)]
    tamper(calls(*old), created_at=expired)
    (old_digest,) = seal_new_rows(now=later())
    tamper(AuditDigest.objects.filter(pk=old_digest.pk), created_at=expired + dt.timedelta(hours=1))
    write_call(3)
    (recent_digest,) = seal_new_rows(now=later())
    assert recent_digest.previous == old_digest.digest

    # Retention: expired rows, then the expired digest.
    ToolCallAudit.objects.filter(pk__in=[c.pk for c in old]).delete()
    AuditDigest.objects.filter(pk=old_digest.pk).delete()
    report = verify_report(now=later())
    assert report.problems == [] and report.rows_checked == 1


# --- Command ------------------------------------------------------------------


def test_command_exit_status_and_output(two_ranges):
    first, second = two_ranges
    out = StringIO()
    call_command("audit_verify", stdout=out, stderr=StringIO())
    assert "0 problem(s)" in out.getvalue()
    assert f"head {TC} {second[-1].pk} " in out.getvalue()

    tamper(calls(second[0]), reason="edited")
    out = StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("audit_verify", stdout=out, stderr=StringIO())
    assert excinfo.value.returncode == 1
    assert f"{TC} {second[0].pk}-{second[-1].pk} changed" in out.getvalue()
    assert "1 problem(s)" in out.getvalue()


def test_command_seal_option(db):
    write_call(1)
    out = StringIO()
    err = StringIO()
    # Rows are younger than the settle delay: --seal leaves them for next time.
    call_command("audit_verify", "--seal", stdout=out, stderr=err)
    assert "sealed 0 new range(s)" in out.getvalue()
    assert "1 row(s) not sealed yet" in out.getvalue()
    assert "OWLAI_AUDIT_HMAC_KEY is not set" in err.getvalue()
    tamper(ToolCallAudit.objects.all(), created_at=timezone.now() - dt.timedelta(minutes=1))
    out = StringIO()
    call_command("audit_verify", "--seal", stdout=out, stderr=err)
    assert "sealed 1 new range(s)" in out.getvalue()
    assert "0 row(s) not sealed yet" in out.getvalue()
