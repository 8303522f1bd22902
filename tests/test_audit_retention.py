"""Retention purge through the default connection (embedded profile), and the
set-up SQL as pure text. Runs on whichever database the suite uses: on SQLite
it is the embedded profile itself; on PostgreSQL the default connection is the
test superuser (the retention role is covered in test_audit_db_guards.py)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.utils import timezone

from audit.db_roles import create_role_statements, enforce_runtime_db_role, setup_statements
from audit.models import AUDIT_TABLES
from audit.retention import purge_expired, retention_cutoff
from tests.support.audit_rows import MODEL_BY_TABLE, placeholder_row

ROLES = {"owner_role": "owlai_owner", "app_role": "owlai_app", "retention_role": "owlai_retention"}


def insert_row(table: str, *, days_old: float = 0) -> int:
    """Raw INSERT with an explicit created_at: auto_now_add would overwrite it,
    and UPDATE on audit tables is refused by the database guards."""
    names, values = placeholder_row(table, days_old=days_old)
    columns = [connection.ops.quote_name(name) for name in names]
    placeholders = ", ".join(["%s"] * len(values))
    quoted_table = connection.ops.quote_name(table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quoted_table} ({', '.join(columns)}) VALUES ({placeholders}) RETURNING id", values
        )
        return cursor.fetchone()[0]


def ids(table: str) -> set[int]:
    return set(MODEL_BY_TABLE[table].objects.values_list("id", flat=True))


@pytest.fixture
def aged_rows(db, settings):
    settings.OWLAI_RETENTION_DATABASE_URL = ""  # the default connection, as in the embedded profile
    return {
        table: {
            "old": insert_row(table, days_old=1100),
            "young": insert_row(table, days_old=1000),
            "recent": insert_row(table),
        }
        for table in AUDIT_TABLES
    }


def test_purge_deletes_only_rows_past_retention(aged_rows, settings):
    settings.OWLAI_RETENTION_DAYS = 1095
    assert purge_expired() == {t: 1 for t in AUDIT_TABLES}
    for table, rows in aged_rows.items():
        assert ids(table) >= {rows["young"], rows["recent"]}
        assert rows["old"] not in ids(table)
    assert purge_expired() == {t: 0 for t in AUDIT_TABLES}


def test_purge_clamps_a_retention_below_the_floor(aged_rows, settings):
    settings.OWLAI_RETENTION_DAYS = 30
    assert purge_expired() == {t: 1 for t in AUDIT_TABLES}
    for table, rows in aged_rows.items():
        assert rows["young"] in ids(table)


def test_purge_keeps_everything_within_a_longer_retention(aged_rows, settings):
    settings.OWLAI_RETENTION_DAYS = 2000
    assert purge_expired() == {t: 0 for t in AUDIT_TABLES}


def test_purge_ignores_a_now_in_the_future(aged_rows, settings):
    settings.OWLAI_RETENTION_DAYS = 1095
    assert purge_expired(now=timezone.now() + timedelta(days=400)) == {t: 1 for t in AUDIT_TABLES}
    for table, rows in aged_rows.items():
        assert rows["young"] in ids(table)


def test_retention_cutoff_never_shorter_than_the_floor(settings):
    settings.OWLAI_RETENTION_DAYS = 1
    now = timezone.now()
    assert retention_cutoff(now=now) == now - timedelta(days=1095)
    settings.OWLAI_RETENTION_DAYS = 1500
    assert retention_cutoff(now=now) == now - timedelta(days=1500)


# --- set-up SQL (pure) -----------------------------------------------------------------


def test_setup_statements_make_audit_tables_append_only():
    statements = setup_statements(
        **ROLES,
        retention_days=1200,
        audit_tables=AUDIT_TABLES,
        other_tables=["auth_user"],
        read_only_tables=["django_migrations"],
    )
    text = "\n".join(statements)
    for table in AUDIT_TABLES:
        assert f'REVOKE ALL ON TABLE "{table}" FROM PUBLIC, "owlai_app", "owlai_retention"' in statements
        assert f'GRANT SELECT, INSERT ON TABLE "{table}" TO "owlai_app"' in statements
        assert f'GRANT SELECT, DELETE ON TABLE "{table}" TO "owlai_retention"' in statements
        assert f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY' in statements
        assert (
            f'CREATE POLICY owlai_retention_delete ON "{table}" FOR DELETE TO "owlai_retention" '
            "USING (created_at < now() - interval '1200 days')"
        ) in statements
        assert f'CREATE POLICY owlai_owner_select ON "{table}" FOR SELECT TO "owlai_owner" USING (true)' in statements
    assert 'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "auth_user" TO "owlai_app"' in statements
    assert 'GRANT SELECT ON TABLE "django_migrations" TO "owlai_app"' in statements
    # Nobody but the retention role is ever given DELETE on an audit table, and nobody UPDATE.
    for statement in statements:
        if statement.startswith("GRANT") and any(f'"{t}"' in statement for t in AUDIT_TABLES):
            assert "UPDATE" not in statement and "TRUNCATE" not in statement
            assert "DELETE" not in statement or statement.endswith('TO "owlai_retention"')
    assert "owner_delete" not in text and "FOR UPDATE" not in text


@pytest.mark.parametrize("days", [1094, 0, -1, True, "1095", 1095.0])
def test_setup_statements_refuse_a_bad_retention(days):
    with pytest.raises(ValueError):
        setup_statements(**ROLES, retention_days=days, audit_tables=AUDIT_TABLES, other_tables=[])


@pytest.mark.parametrize(
    "bad", ['owlai"; DROP TABLE x; --', "Owlai_App", "1app", "pg_app", "public", "current_user", "a" * 64, ""]
)
def test_setup_statements_refuse_unsafe_role_names(bad):
    with pytest.raises(ValueError):
        setup_statements(**{**ROLES, "app_role": bad}, retention_days=1095, audit_tables=AUDIT_TABLES, other_tables=[])
    with pytest.raises(ValueError):
        create_role_statements(roles=[bad])


def test_setup_statements_refuse_coinciding_roles():
    with pytest.raises(ValueError, match="must differ"):
        setup_statements(
            **{**ROLES, "app_role": "owlai_owner"}, retention_days=1095, audit_tables=AUDIT_TABLES, other_tables=[]
        )


def test_setup_statements_refuse_an_audit_table_among_the_others():
    with pytest.raises(ValueError):
        setup_statements(**ROLES, retention_days=1095, audit_tables=AUDIT_TABLES, other_tables=[AUDIT_TABLES[0]])


def test_create_role_statements_only_create_missing_login_roles():
    (statement,) = create_role_statements(roles=["owlai_app"])
    assert "IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'owlai_app')" in statement
    assert 'CREATE ROLE "owlai_app" LOGIN' in statement and "NOBYPASSRLS" in statement


# --- embedded profile: no roles --------------------------------------------------------


def test_setup_command_refuses_sqlite(monkeypatch):
    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    with pytest.raises(CommandError, match="PostgreSQL"):
        call_command("audit_db_setup", app_role="owlai_app", retention_role="owlai_retention", stdout=io.StringIO())


def test_runtime_role_check_skips_sqlite(monkeypatch, settings):
    settings.OWLAI_DB_ROLE_CHECK = True
    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    try:
        enforce_runtime_db_role()
    except ImproperlyConfigured as exc:  # pragma: no cover - the assertion message is the point
        pytest.fail(f"the embedded profile has no roles to check: {exc}")
