"""The audit trail is append-only because PostgreSQL says so.

Runs against the real PostgreSQL test database. Roles are cluster-global, so
this module creates uniquely named roles, hands the audit tables to its own
owner role (as `migrate` run by the owner would), applies `audit_db_setup`,
and undoes all of it at the end. Each check acts as a role with ``SET ROLE``
on a superuser connection: privileges and row-level security then apply to
that role exactly as to a login of it.
"""

from __future__ import annotations

import io
import time
import uuid
from contextlib import contextmanager
from datetime import timedelta
from types import SimpleNamespace

import psycopg
import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from psycopg import sql

from audit import db_roles
from audit.db_roles import (
    POLICY_NAMES,
    apply_setup,
    enforce_runtime_db_role,
    runtime_role_problems,
    setup_statements,
)
from audit.models import AUDIT_TABLES
from audit.retention import _purge_with_url, purge_expired
from tests.support.audit_rows import placeholder_row

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("require_postgres_app_db"),
]

OLD_DAYS, YOUNG_DAYS = 1100, 1000


def _connect(dbname: str, **overrides) -> psycopg.Connection:
    s = connection.settings_dict
    params = {
        "host": s["HOST"] or None,
        "port": s["PORT"] or None,
        "user": s["USER"] or None,
        "password": s["PASSWORD"] or None,
        "dbname": dbname,
    }
    params.update(overrides)
    return psycopg.connect(**{k: v for k, v in params.items() if v is not None}, autocommit=True)


def insert_row(conn: psycopg.Connection, table: str, *, days_old: float = 0) -> int:
    """Insert an audit row with an explicit `created_at` (auto_now_add would overwrite it)."""
    names, values = placeholder_row(table, days_old=days_old)
    columns = [sql.Identifier(name) for name in names]
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
        sql.Identifier(table), sql.SQL(", ").join(columns), sql.SQL(", ").join(sql.Placeholder() * len(values))
    )
    return conn.execute(query, values).fetchone()[0]


def row_exists(conn: psycopg.Connection, table: str, row_id: int) -> bool:
    query = sql.SQL("SELECT count(*) FROM {} WHERE id = %s").format(sql.Identifier(table))
    return conn.execute(query, [row_id]).fetchone()[0] == 1


@pytest.fixture(scope="module")
def pg(django_db_setup, django_db_blocker):
    """Roles for this module; the audit set-up applied by the command, as an install would."""
    if django_settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("needs DATABASE_URL pointing at PostgreSQL (run `make test`)")
    suffix = uuid.uuid4().hex[:8]
    roles = SimpleNamespace(
        owner=f"owlai_owner_{suffix}",
        app=f"owlai_app_{suffix}",
        retention=f"owlai_ret_{suffix}",
        bypass=f"owlai_bypass_{suffix}",
        member=f"owlai_member_{suffix}",
        updater=f"owlai_upd_{suffix}",
        noinherit=f"owlai_noinh_{suffix}",
    )
    all_roles = list(vars(roles).values())
    with django_db_blocker.unblock():
        dbname = connection.settings_dict["NAME"]
        admin = _connect(dbname)
        ident = {k: sql.Identifier(v) for k, v in vars(roles).items()}
        try:
            admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(ident["owner"]))
            for key in ("app", "retention", "member", "updater"):
                admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident[key]))
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN BYPASSRLS").format(ident["bypass"]))
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN NOINHERIT").format(ident["noinherit"]))
            # `migrate` run as the owner role would have created them owned by it.
            for table in AUDIT_TABLES:
                admin.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(sql.Identifier(table), ident["owner"]))
            out = io.StringIO()
            # Run as the test superuser on behalf of the owner role: the other
            # (non-audit) tables of the test database are owned by the superuser.
            call_command(
                "audit_db_setup",
                app_role=roles.app,
                retention_role=roles.retention,
                owner_role=roles.owner,
                stdout=out,
            )
            # Roles that must fail the start-up check, each for one reason.
            for table in AUDIT_TABLES:
                t = sql.Identifier(table)
                admin.execute(
                    sql.SQL("GRANT SELECT, INSERT ON {} TO {}, {}").format(t, ident["bypass"], ident["updater"])
                )
            admin.execute(sql.SQL("GRANT UPDATE ON audit_auditevent TO {}").format(ident["updater"]))
            admin.execute(sql.SQL("GRANT {} TO {}").format(ident["owner"], ident["member"]))
            admin.execute(sql.SQL("GRANT {} TO {}").format(ident["updater"], ident["noinherit"]))
            yield SimpleNamespace(**vars(roles), dbname=dbname, admin=admin, setup_output=out.getvalue())
        finally:
            try:
                _undo_setup(admin, all_roles, owner=roles.owner)
            finally:
                admin.close()


def _undo_setup(admin: psycopg.Connection, all_roles: list[str], *, owner: str) -> None:
    """Leave the shared test database and the cluster as they were."""
    for table in AUDIT_TABLES:
        t = sql.Identifier(table)
        for policy in POLICY_NAMES:
            admin.execute(sql.SQL("DROP POLICY IF EXISTS {} ON {}").format(sql.Identifier(policy), t))
        admin.execute(sql.SQL("ALTER TABLE {} NO FORCE ROW LEVEL SECURITY").format(t))
        admin.execute(sql.SQL("ALTER TABLE {} DISABLE ROW LEVEL SECURITY").format(t))
    existing = {r for (r,) in admin.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", [all_roles])}
    # One role at a time, grantees before the owner: dropping several at once
    # trips over the owner's default privileges naming the app role.
    ordered = [r for r in all_roles if r in existing and r != owner] + ([owner] if owner in existing else [])
    for role in ordered:
        name = sql.Identifier(role)
        # Hands the audit tables back to the superuser, then revokes grants, policies and default privileges.
        admin.execute(sql.SQL("REASSIGN OWNED BY {} TO CURRENT_USER").format(name))
        admin.execute(sql.SQL("DROP OWNED BY {}").format(name))
    for role in ordered:
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@contextmanager
def acting_as(pg, role: str):
    conn = _connect(pg.dbname)
    try:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
        yield conn
    finally:
        conn.close()


@contextmanager
def django_connection_as(role: str):
    with connection.cursor() as cursor:
        cursor.execute(f'SET ROLE "{role}"')  # test role names are plain identifiers
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


# --- a. the application role -------------------------------------------------------


@pytest.mark.parametrize("table", AUDIT_TABLES)
def test_app_role_can_insert_and_select_but_never_rewrite(pg, table):
    existing = insert_row(pg.admin, table)
    t = sql.Identifier(table)
    with acting_as(pg, pg.app) as conn:
        new = insert_row(conn, table)  # INSERT ... RETURNING, as Django's create() does
        assert row_exists(conn, table, new)
        assert row_exists(conn, table, existing)
        refused = [
            (sql.SQL("UPDATE {} SET created_at = created_at WHERE id = %s").format(t), [existing]),
            (sql.SQL("DELETE FROM {} WHERE id = %s").format(t), [existing]),
            (sql.SQL("TRUNCATE {}").format(t), None),
        ]
        for statement, params in refused:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                conn.execute(statement, params)
    assert row_exists(pg.admin, table, existing)
    assert row_exists(pg.admin, table, new)


def test_setup_command_reported_and_verified_the_roles(pg):
    assert "Verified" in pg.setup_output
    assert pg.app in pg.setup_output and pg.retention in pg.setup_output
    state = pg.admin.execute(
        "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class WHERE relname = ANY(%s)",
        [list(AUDIT_TABLES)],
    ).fetchall()
    assert sorted(state) == sorted((t, True, True) for t in AUDIT_TABLES)


def test_app_role_can_use_the_other_tables_and_only_read_migrations(pg):
    with acting_as(pg, pg.app) as conn:
        conn.execute("SELECT count(*) FROM auth_user").fetchone()
        conn.execute(
            "INSERT INTO django_content_type (app_label, model) VALUES ('owlai_test', %s) RETURNING id",
            [f"m{uuid.uuid4().hex[:8]}"],
        )
        assert conn.execute("SELECT count(*) FROM django_migrations").fetchone()[0] > 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("DELETE FROM django_migrations WHERE app = 'audit'")


# --- b. the retention role -----------------------------------------------------------


@pytest.mark.parametrize("table", AUDIT_TABLES)
def test_retention_role_deletes_only_rows_past_retention(pg, table):
    old = insert_row(pg.admin, table, days_old=OLD_DAYS)
    young = insert_row(pg.admin, table, days_old=YOUNG_DAYS)
    edge = insert_row(pg.admin, table, days_old=1094.9)
    t = sql.Identifier(table)
    with acting_as(pg, pg.retention) as conn:
        # Younger than 1,095 days: invisible to the DELETE policy, so no error and nothing deleted.
        assert conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(t), [young]).rowcount == 0
        assert conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(t), [edge]).rowcount == 0
        assert conn.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(t), [old]).rowcount == 1
        # Even an unfiltered DELETE cannot reach young rows.
        conn.execute(sql.SQL("DELETE FROM {}").format(t))
        for statement in (sql.SQL("UPDATE {} SET created_at = now()").format(t), sql.SQL("TRUNCATE {}").format(t)):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    assert not row_exists(pg.admin, table, old)
    assert row_exists(pg.admin, table, young)
    assert row_exists(pg.admin, table, edge)


def test_owner_role_reads_but_cannot_rewrite_under_forced_rls(pg):
    table = "audit_auditevent"
    old = insert_row(pg.admin, table, days_old=OLD_DAYS)
    with acting_as(pg, pg.owner) as conn:
        assert row_exists(conn, table, old)  # data migrations may read
        assert conn.execute("DELETE FROM audit_auditevent WHERE id = %s", [old]).rowcount == 0
        assert conn.execute("UPDATE audit_auditevent SET kind = 'x' WHERE id = %s", [old]).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            insert_row(conn, table)
    assert row_exists(pg.admin, table, old)


# --- c. the start-up check -------------------------------------------------------


def test_runtime_check_accepts_the_app_role(pg):
    with acting_as(pg, pg.app) as conn:
        assert runtime_role_problems(conn) == []


def test_runtime_check_rejects_the_superuser(pg):
    problems = runtime_role_problems(pg.admin)
    assert problems and "superuser" in problems[0]


def test_runtime_check_rejects_bypassrls(pg):
    with acting_as(pg, pg.bypass) as conn:
        problems = runtime_role_problems(conn)
    assert any("BYPASSRLS" in p for p in problems), problems


def test_runtime_check_rejects_a_member_of_the_owner(pg):
    with acting_as(pg, pg.member) as conn:
        problems = runtime_role_problems(conn)
    assert any(pg.owner in p and "owner of audit table" in p for p in problems), problems


def test_runtime_check_rejects_a_role_with_update(pg):
    with acting_as(pg, pg.updater) as conn:
        problems = runtime_role_problems(conn)
    assert problems == [f"role {pg.updater} can UPDATE audit table audit_auditevent"]


def test_runtime_check_rejects_a_noinherit_member_of_a_role_with_update(pg):
    # NOINHERIT hides the privilege from has_table_privilege, but SET ROLE still reaches it.
    with acting_as(pg, pg.noinherit) as conn:
        problems = runtime_role_problems(conn)
    assert any(pg.updater in p and "UPDATE" in p for p in problems), problems


def test_runtime_check_rejects_a_role_owning_an_audit_table(pg):
    with acting_as(pg, pg.owner) as conn:
        problems = runtime_role_problems(conn)
    assert any("owns audit table" in p for p in problems), problems


def test_enforce_refuses_the_superuser_when_enabled(pg, settings):
    settings.OWLAI_DB_ROLE_CHECK = True
    with pytest.raises(ImproperlyConfigured) as excinfo:
        enforce_runtime_db_role()
    message = str(excinfo.value)
    assert "superuser" in message
    assert "OWLAI_DB_ROLE_CHECK" in message and "audit_db_setup" in message


def test_enforce_does_nothing_when_disabled(pg, settings):
    settings.OWLAI_DB_ROLE_CHECK = False
    assert enforce_runtime_db_role() is None


def test_enforce_checks_the_current_role_after_set_role(pg, settings):
    settings.OWLAI_DB_ROLE_CHECK = True
    with django_connection_as(pg.app):
        assert enforce_runtime_db_role() is None
    with django_connection_as(pg.updater), pytest.raises(ImproperlyConfigured, match="can UPDATE"):
        enforce_runtime_db_role()


def test_enforce_fails_closed_when_the_check_breaks(pg, settings, monkeypatch):
    settings.OWLAI_DB_ROLE_CHECK = True

    def broken(connection):
        raise RuntimeError("catalog unavailable")

    monkeypatch.setattr(db_roles, "runtime_role_problems", broken)
    with pytest.raises(ImproperlyConfigured, match="could not be checked"):
        enforce_runtime_db_role()


@contextmanager
def insert_revoked(pg, table: str):
    """The application role loses INSERT on one audit table for the block."""
    t, app = sql.Identifier(table), sql.Identifier(pg.app)
    pg.admin.execute(sql.SQL("REVOKE INSERT ON {} FROM {}").format(t, app))
    try:
        yield
    finally:
        pg.admin.execute(sql.SQL("GRANT INSERT ON {} TO {}").format(t, app))


@pytest.mark.parametrize("table", AUDIT_TABLES)
def test_enforce_refuses_a_role_that_cannot_insert_into_an_audit_table(pg, settings, table):
    settings.OWLAI_DB_ROLE_CHECK = True
    with insert_revoked(pg, table), django_connection_as(pg.app):
        with pytest.raises(ImproperlyConfigured, match="cannot write the audit trail") as refused:
            enforce_runtime_db_role()
    assert f"cannot INSERT into audit table {table}" in str(refused.value)
    assert "audit_db_setup" in str(refused.value)
    with django_connection_as(pg.app):
        assert enforce_runtime_db_role() is None  # granted again: it starts


def test_without_insert_on_the_attempts_a_tool_call_fails_closed_and_nothing_runs(pg, django_user_model):
    from audit.services import AuditWriteError
    from tests.test_audit_write_path import canary, governed_canary

    with canary() as c:
        g = governed_canary(c, django_user_model)
        with insert_revoked(pg, "audit_toolcallaudit"), django_connection_as(pg.app):
            with pytest.raises(AuditWriteError):
                g.run("SELECT count(*) FROM customers")
        time.sleep(0.3)
    assert c.contacts == 0  # the customer database was never contacted
    assert g.audit_rows() == []


def test_without_insert_on_the_outcomes_the_result_is_withheld_and_the_attempt_shows_no_outcome(pg, django_user_model):
    from audit.models import NO_OUTCOME
    from audit.services import AuditWriteError
    from tests.test_audit_write_path import canary, governed_canary

    with canary() as c:
        g = governed_canary(c, django_user_model)
        with insert_revoked(pg, "audit_toolcalloutcome"), django_connection_as(pg.app):
            with pytest.raises(AuditWriteError):
                g.run("SELECT count(*) FROM customers")
    assert c.contacts >= 1  # the attempt was recorded, so the call went ahead
    (attempt,) = g.audit_rows()
    assert (attempt.outcome, attempt.call_outcome) == ("started", NO_OUTCOME)


# --- d. the retention purge ----------------------------------------------------------


def test_purge_expired_as_the_retention_role_deletes_only_old_rows(pg, settings):
    s = connection.settings_dict
    settings.OWLAI_RETENTION_DATABASE_URL = f"postgresql://{pg.retention}@{s['HOST']}:{s['PORT']}/{pg.dbname}"
    # Misconfigured below the floor: the purge clamps to 1,095 days anyway.
    settings.OWLAI_RETENTION_DAYS = 30
    rows = {
        t: (insert_row(pg.admin, t, days_old=OLD_DAYS), insert_row(pg.admin, t, days_old=YOUNG_DAYS))
        for t in AUDIT_TABLES
    }
    recent = {t: insert_row(pg.admin, t) for t in AUDIT_TABLES}

    assert purge_expired() == {t: 1 for t in AUDIT_TABLES}
    for table, (old, young) in rows.items():
        assert not row_exists(pg.admin, table, old)
        assert row_exists(pg.admin, table, young)
        assert row_exists(pg.admin, table, recent[table])


def test_the_database_refuses_even_if_the_purge_cutoff_were_wrong(pg):
    s = connection.settings_dict
    url = f"postgresql://{pg.retention}@{s['HOST']}:{s['PORT']}/{pg.dbname}"
    young = {t: insert_row(pg.admin, t, days_old=YOUNG_DAYS) for t in AUDIT_TABLES}
    # Bypass the application's clamp: the row-level-security policy still holds.
    deleted = _purge_with_url(url, AUDIT_TABLES, timezone.now() + timedelta(days=1))
    assert deleted == {t: 0 for t in AUDIT_TABLES}
    assert all(row_exists(pg.admin, t, i) for t, i in young.items())


# --- e. the set-up command -------------------------------------------------------------


def test_print_sql_shows_forced_rls_and_changes_nothing(pg):
    ghost = f"owlai_ghost_{uuid.uuid4().hex[:8]}"
    out = io.StringIO()
    call_command(
        "audit_db_setup", app_role=ghost, retention_role=pg.retention, create_roles=True, print_sql=True, stdout=out
    )
    text = out.getvalue()
    assert "FORCE ROW LEVEL SECURITY" in text
    assert "ENABLE ROW LEVEL SECURITY" in text
    assert f"FOR DELETE TO \"{pg.retention}\" USING (created_at < now() - interval '1095 days')" in text
    assert f'GRANT SELECT, INSERT ON TABLE "audit_toolcallaudit" TO "{ghost}"' in text
    assert not pg.admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [ghost]).fetchone()


def test_setup_refuses_retention_below_the_floor(pg, settings):
    with pytest.raises(ValueError, match="1095"):
        setup_statements(
            owner_role=pg.owner,
            app_role=pg.app,
            retention_role=pg.retention,
            retention_days=1094,
            audit_tables=AUDIT_TABLES,
            other_tables=[],
        )
    settings.OWLAI_RETENTION_DAYS = 1000
    with pytest.raises(CommandError, match="1095"):
        call_command(
            "audit_db_setup", app_role=pg.app, retention_role=pg.retention, print_sql=True, stdout=io.StringIO()
        )
    with pytest.raises(CommandError, match="1095"):
        call_command(
            "audit_db_setup", app_role=pg.app, retention_role=pg.retention, owner_role=pg.owner, stdout=io.StringIO()
        )


def test_setup_refuses_an_owner_role_that_does_not_own_the_tables(pg):
    with pytest.raises(CommandError, match="not by the owner role"):
        call_command(
            "audit_db_setup", app_role=pg.app, retention_role=pg.retention, owner_role=pg.bypass, stdout=io.StringIO()
        )
    # Nothing was applied: no policy names the wrong "owner".
    assert not pg.admin.execute("SELECT 1 FROM pg_policies WHERE %s = ANY(roles)", [pg.bypass]).fetchone()


def test_setup_refuses_when_the_app_role_is_unsafe_and_rolls_back(pg):
    # The member of the owner role passes every statement but fails verification.
    with pytest.raises(CommandError, match="still unsafe"):
        call_command(
            "audit_db_setup", app_role=pg.member, retention_role=pg.retention, owner_role=pg.owner, stdout=io.StringIO()
        )
    assert not pg.admin.execute("SELECT 1 FROM pg_policies WHERE %s = ANY(roles)", [pg.member]).fetchone()


def test_owner_role_can_rerun_the_setup_itself(pg):
    """No superuser needed: the owner applies the set-up to its tables (idempotent re-run)."""
    with django_connection_as(pg.owner):
        statements = apply_setup(
            connection=connection,
            owner_role=pg.owner,
            app_role=pg.app,
            retention_role=pg.retention,
            retention_days=1095,
            audit_tables=AUDIT_TABLES,
            other_tables=[],
        )
    assert any("FORCE ROW LEVEL SECURITY" in s for s in statements)
    policies = pg.admin.execute(
        "SELECT count(*) FROM pg_policies WHERE tablename = ANY(%s)", [list(AUDIT_TABLES)]
    ).fetchone()[0]
    assert policies == len(POLICY_NAMES) * len(AUDIT_TABLES)
    with acting_as(pg, pg.app) as conn:
        assert runtime_role_problems(conn) == []


# --- the production set-up runs a whole turn -----------------------------------------


@pytest.mark.e2e
def test_a_whole_turn_runs_as_the_application_role_with_the_check_on(
    pg, tmp_path, require_redis, pg_customer_db, django_user_model
):
    """Web and worker connected as the application role the command set up,
    with the start-up check on: they start, run a governed turn, and write
    its audit row (INSERT is all they may do to it)."""
    from tests.test_e2e_chat import ask_and_check_one_governed_turn, running_stack

    with running_stack(tmp_path, pg_customer_db.dsn, db_user=pg.app, role_check=True) as stack:
        ask_and_check_one_governed_turn(stack, django_user_model)
