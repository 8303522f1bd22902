"""PostgreSQL roles that make the audit trail append-only.

Application code promising not to rewrite audit rows is not enough: anyone who
gets the application's database credentials (a bug, an injected query, an
operator with a shell) could. So the *database* enforces it:

* the **owner** role runs migrations and owns every table. Owners can do
  anything to their tables (even switch row-level security off), which is why
  the application must never run as it, nor as a member of it;
* the **application** role may only ``INSERT`` and ``SELECT`` audit rows (full
  DML on the other tables). Without ``UPDATE``, ``DELETE`` or ``TRUNCATE`` the
  database refuses to change history, whatever the application sends;
* the **retention** role may ``DELETE`` audit rows, and a row-level-security
  policy lets that delete see only rows older than the retention period
  (never less than 1,095 days). It is used by the daily purge only.

Row-level security is enabled *and forced* on the audit tables, so it applies
to the owner too. The owner gets a ``SELECT`` policy (data migrations may read
audit rows) and nothing else: under FORCE its ``UPDATE``/``DELETE`` match no
rows and its ``INSERT`` is refused. That is a safety net against an accident
run as the owner, not a barrier against the owner (who can ``TRUNCATE`` or
``ALTER TABLE ... NO FORCE``); the barrier is that nothing runs as the owner
except ``migrate`` and ``audit_db_setup``.

``setup_statements`` is pure (the SQL, reviewable with ``--print-sql``);
``apply_setup`` runs it and verifies the result; ``runtime_role_problems``,
``runtime_insert_problems`` and ``enforce_runtime_db_role`` make web and
worker processes refuse to start with a role that could rewrite the trail,
or that cannot write it (no INSERT on an audit table).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from owlai.install_config import MIN_RETENTION_DAYS

# Role names are validated instead of escaped: a role name is typed by an
# operator, and refusing anything unusual keeps the generated SQL readable and
# free of injection without depending on a live connection for quoting.
ROLE_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]*$")
# Table names come from Django models; they are quoted, and additionally must
# be plain identifiers so they can be embedded in string literals and
# dollar-quoted DO blocks without a second escaping scheme.
TABLE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_IDENTIFIER_LENGTH = 63  # NAMEDATALEN - 1: longer names are silently truncated by PostgreSQL
RESERVED_ROLE_NAMES = frozenset({"public", "none", "all", "current_user", "current_role", "session_user", "user"})

# Policy names are fixed so re-running the set-up replaces them (DROP POLICY
# IF EXISTS + CREATE POLICY) instead of accumulating policies.
POLICY_APP_INSERT = "owlai_app_insert"
POLICY_APP_SELECT = "owlai_app_select"
POLICY_RETENTION_SELECT = "owlai_retention_select"
POLICY_RETENTION_DELETE = "owlai_retention_delete"
POLICY_OWNER_SELECT = "owlai_owner_select"
POLICY_NAMES = (
    POLICY_APP_INSERT,
    POLICY_APP_SELECT,
    POLICY_RETENTION_SELECT,
    POLICY_RETENTION_DELETE,
    POLICY_OWNER_SELECT,
)

# What an application role must not be able to do to an audit table.
TAMPER_PRIVILEGES = ("UPDATE", "DELETE", "TRUNCATE")


class AuditDbSetupError(Exception):
    """The set-up cannot be (or was not) applied as intended; the message says why.

    Raised inside the set-up transaction, so nothing of a failed set-up stays.
    """


# --- SQL generation (pure) -----------------------------------------------------


def _role(name: str) -> str:
    """Quoted role name, after refusing anything that is not a plain lowercase identifier."""
    if (
        not isinstance(name, str)
        or not ROLE_NAME_RE.match(name)
        or len(name) > MAX_IDENTIFIER_LENGTH
        or name in RESERVED_ROLE_NAMES
        or name.startswith("pg_")
    ):
        raise ValueError(
            f"invalid role name {name!r}: use lowercase letters, digits and '_' "
            f"(at most {MAX_IDENTIFIER_LENGTH} characters, not starting with a digit or 'pg_')"
        )
    return f'"{name}"'


def _table(name: str) -> str:
    """Quoted table name (case preserved), refusing names that are not plain identifiers."""
    if not isinstance(name, str) or not TABLE_NAME_RE.match(name) or len(name) > MAX_IDENTIFIER_LENGTH:
        raise ValueError(f"unsupported table name {name!r}: only plain identifiers are handled")
    return f'"{name}"'


def _validate_retention_days(retention_days: int) -> int:
    # bool is an int; `True` days would be a typo, not a retention period.
    if not isinstance(retention_days, int) or isinstance(retention_days, bool):
        raise ValueError(f"retention_days must be an integer, got {retention_days!r}")
    if retention_days < MIN_RETENTION_DAYS:
        raise ValueError(
            f"retention_days = {retention_days} is below the legal floor of {MIN_RETENTION_DAYS} days: "
            "audit rows younger than that must not be deletable"
        )
    return retention_days


def _sequence_grant_block(table: str, role: str, privileges: str, *, revoke_first: bool) -> str:
    """A DO block granting `privileges` on the sequences owned by `table`.

    The sequence of a Django ``BigAutoField`` is an identity sequence (or a
    serial one on old tables) whose name the generator cannot know without a
    database; the block finds it through ``pg_depend`` at execution time, which
    keeps ``setup_statements`` pure. Inputs are validated identifiers, so they
    can be embedded in the literals below.
    """
    quoted_table = _table(table)
    quoted_role = _role(role)
    revoke = f"    EXECUTE format('REVOKE ALL ON SEQUENCE %s FROM {quoted_role}', seq);\n" if revoke_first else ""
    return (
        "DO $owlai$\n"
        "DECLARE seq regclass;\n"
        "BEGIN\n"
        "  FOR seq IN\n"
        "    SELECT d.objid::regclass FROM pg_depend d\n"
        "    JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'\n"
        "    WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass\n"
        f"      AND d.refobjid = '{quoted_table}'::regclass AND d.deptype IN ('a', 'i')\n"
        "  LOOP\n"
        f"{revoke}"
        f"    EXECUTE format('GRANT {privileges} ON SEQUENCE %s TO {quoted_role}', seq);\n"
        "  END LOOP;\n"
        "END\n"
        "$owlai$"
    )


def create_role_statements(*, roles: Sequence[str]) -> list[str]:
    """SQL creating each role as a LOGIN role when it does not exist yet.

    Existing roles are left untouched (their attributes and passwords are the
    DBA's business; the start-up check rejects dangerous ones). New roles get no
    password here: ``apply_setup(passwords=...)`` sets one (``audit_db_setup
    --app-password-env``), or the DBA does, or another authentication method is
    used. Needs CREATEROLE.
    """
    statements = []
    for name in roles:
        quoted = _role(name)
        statements.append(
            "DO $owlai$\n"
            "BEGIN\n"
            f"  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN\n"
            f"    CREATE ROLE {quoted} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;\n"
            "  END IF;\n"
            "END\n"
            "$owlai$"
        )
    return statements


def setup_statements(
    *,
    owner_role: str,
    app_role: str,
    retention_role: str,
    retention_days: int,
    audit_tables: tuple[str, ...],
    other_tables: list[str],
    read_only_tables: Sequence[str] = (),
    schema: str = "public",
) -> list[str]:
    """The SQL, run as the owner, that makes the audit tables append-only.

    Pure, so the exact statements can be reviewed (``audit_db_setup
    --print-sql``) and tested without a database. Idempotent: privileges on
    the audit tables are revoked before being granted and policies are
    dropped before being created, so a re-run converges to this state.

    ``other_tables`` get full DML for the application (it is the application's
    data); ``read_only_tables`` (``django_migrations``) only SELECT, so the
    application can see whether migrations are applied but never record one.
    Raises ValueError for a retention below 1,095 days, invalid role or table
    names, or roles that coincide (the whole design rests on three distinct
    roles).
    """
    days = _validate_retention_days(retention_days)
    owner, app, retention = _role(owner_role), _role(app_role), _role(retention_role)
    if len({owner_role, app_role, retention_role}) != 3:
        raise ValueError(
            f"owner ({owner_role}), application ({app_role}) and retention ({retention_role}) roles must differ"
        )
    if not audit_tables:
        raise ValueError("no audit tables given")
    audit = [_table(t) for t in audit_tables]
    if set(audit_tables) & (set(other_tables) | set(read_only_tables)):
        raise ValueError("an audit table is also listed among the other tables")
    quoted_schema = _role(schema) if schema != "public" else "public"

    statements = [f"GRANT USAGE ON SCHEMA {quoted_schema} TO {app}, {retention}"]

    for table, quoted in zip(audit_tables, audit, strict=True):
        statements += [
            # Start from nothing: earlier grants (or a PUBLIC grant) must not survive.
            f"REVOKE ALL ON TABLE {quoted} FROM PUBLIC, {app}, {retention}",
            f"GRANT SELECT, INSERT ON TABLE {quoted} TO {app}",
            f"GRANT SELECT, DELETE ON TABLE {quoted} TO {retention}",
            _sequence_grant_block(table, app_role, "USAGE, SELECT", revoke_first=True),
            f"ALTER TABLE {quoted} ENABLE ROW LEVEL SECURITY",
            # FORCE: policies apply to the table owner too (see module docstring).
            f"ALTER TABLE {quoted} FORCE ROW LEVEL SECURITY",
        ]
        policies = [
            (POLICY_APP_INSERT, f"FOR INSERT TO {app} WITH CHECK (true)"),
            # INSERT ... RETURNING (Django's create) also needs the new row to pass a SELECT policy.
            (POLICY_APP_SELECT, f"FOR SELECT TO {app} USING (true)"),
            # DELETE ... WHERE reads the rows, so the retention role needs a SELECT policy too.
            (POLICY_RETENTION_SELECT, f"FOR SELECT TO {retention} USING (true)"),
            (POLICY_RETENTION_DELETE, f"FOR DELETE TO {retention} USING (created_at < now() - interval '{days} days')"),
            (POLICY_OWNER_SELECT, f"FOR SELECT TO {owner} USING (true)"),
        ]
        for name, body in policies:
            statements.append(f"DROP POLICY IF EXISTS {name} ON {quoted}")
            statements.append(f"CREATE POLICY {name} ON {quoted} {body}")

    for table in other_tables:
        quoted = _table(table)
        statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {quoted} TO {app}")
        statements.append(_sequence_grant_block(table, app_role, "USAGE, SELECT, UPDATE", revoke_first=False))

    for table in read_only_tables:
        quoted = _table(table)
        statements.append(f"REVOKE ALL ON TABLE {quoted} FROM {app}")
        statements.append(f"GRANT SELECT ON TABLE {quoted} TO {app}")

    # Tables a later migration creates are usable by the application without a
    # re-run. Safe for the audit trail: should a future migration (re)create an
    # audit table, the start-up check sees the application's UPDATE/DELETE
    # rights on it and refuses to start until this set-up is run again.
    statements.append(
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {quoted_schema} "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}"
    )
    statements.append(
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {quoted_schema} "
        f"GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {app}"
    )
    return statements


# --- Checks --------------------------------------------------------------------


def _fetch_current_user(cursor: Any) -> str:
    cursor.execute("SELECT current_user")
    return cursor.fetchone()[0]


def _role_problems(
    cursor: Any, role: str, *, audit_tables: Iterable[str], allowed: frozenset[str] = frozenset()
) -> list[str]:
    """Ways in which `role` could rewrite the audit tables.

    Considers every role `role` can act as: itself and every role it is a
    member of (``SET ROLE`` works through membership even without INHERIT, so
    a NOINHERIT membership in a powerful role is just as dangerous). `allowed`
    lists tamper privileges the role may hold (DELETE for the retention role,
    whose deletes row-level security limits).
    """
    problems: list[str] = []
    cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [role])
    row = cursor.fetchone()
    if row is None:
        return [f"role {role} does not exist"]
    if row[0]:
        # A superuser passes every privilege and policy check; nothing else matters.
        return [f"role {role} is a superuser: it bypasses privileges and row-level security"]
    if row[1]:
        problems.append(f"role {role} has BYPASSRLS: row-level security does not apply to it")

    cursor.execute(
        "SELECT rolname, rolsuper FROM pg_roles "
        "WHERE rolname <> %s AND pg_has_role(%s, oid, 'MEMBER') AND (rolsuper OR rolbypassrls) ORDER BY rolname",
        [role, role],
    )
    for name, is_super in cursor.fetchall():
        what = "a superuser" if is_super else "a role with BYPASSRLS"
        problems.append(f"role {role} is a member of {name}, which is {what}")

    tampering = [p for p in TAMPER_PRIVILEGES if p not in allowed]
    for table in audit_tables:
        cursor.execute(
            "SELECT c.oid, pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = to_regclass(%s)",
            [_table(table)],
        )
        found = cursor.fetchone()
        if found is None:
            problems.append(f"audit table {table} does not exist (run `manage.py migrate` as the owner role)")
            continue
        table_oid, owner = found
        cursor.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", [role, owner])
        if cursor.fetchone()[0]:
            if owner == role:
                problems.append(f"role {role} owns audit table {table}")
            else:
                problems.append(f"role {role} is a member of {owner}, the owner of audit table {table}")
        cursor.execute(
            "SELECT r.rolname, p.privilege FROM pg_roles r CROSS JOIN unnest(%s::text[]) AS p(privilege) "
            "WHERE pg_has_role(%s, r.oid, 'MEMBER') AND has_table_privilege(r.oid, %s::oid, p.privilege) "
            "ORDER BY r.rolname <> %s, r.rolname, p.privilege",
            [tampering, role, table_oid, role],
        )
        for name, privilege in cursor.fetchall():
            if name == role:
                problems.append(f"role {role} can {privilege} audit table {table}")
            else:
                problems.append(f"role {role} is a member of {name}, which can {privilege} audit table {table}")
    return problems


def runtime_role_problems(connection: Any, *, audit_tables: Iterable[str] | None = None) -> list[str]:
    """Why the *current* role of `connection` must not run the application (empty: fine).

    Accepts a Django connection (``django.db.connections[alias]``) or a psycopg
    connection: anything whose ``cursor()`` takes ``%s`` parameters. Checks
    ``current_user``, not ``session_user``, because privileges and row-level
    security follow the current role: after ``SET ROLE app`` a superuser
    session is exactly as constrained as the app role.
    """
    if audit_tables is None:
        from audit.tables import AUDIT_TABLES

        audit_tables = AUDIT_TABLES
    with connection.cursor() as cursor:
        role = _fetch_current_user(cursor)
        return _role_problems(cursor, role, audit_tables=audit_tables)


def _insert_problems(cursor: Any, role: str, *, audit_tables: Iterable[str]) -> list[str]:
    """Audit tables `role` cannot INSERT into: every tool call and admin view
    would then fail closed, one turn at a time, instead of at start-up."""
    problems = []
    for table in audit_tables:
        cursor.execute(
            "SELECT to_regclass(%s) IS NOT NULL AND has_table_privilege(%s, to_regclass(%s), 'INSERT')",
            [_table(table), role, _table(table)],
        )
        if not cursor.fetchone()[0]:
            problems.append(f"role {role} cannot INSERT into audit table {table}")
    return problems


def runtime_insert_problems(connection: Any, *, audit_tables: Iterable[str] | None = None) -> list[str]:
    """Audit tables the *current* role of `connection` cannot write (empty: fine)."""
    if audit_tables is None:
        from audit.tables import AUDIT_TABLES

        audit_tables = AUDIT_TABLES
    with connection.cursor() as cursor:
        return _insert_problems(cursor, _fetch_current_user(cursor), audit_tables=audit_tables)


def enforce_runtime_db_role(using: str = DEFAULT_DB_ALIAS) -> None:
    """Refuse to start (ImproperlyConfigured) when the database role could rewrite the audit trail,
    or cannot write it (no INSERT on an audit table: every tool call would then fail closed).

    Called at start-up by web and worker processes. Does nothing when
    ``OWLAI_DB_ROLE_CHECK`` is false or the database is not PostgreSQL (the
    embedded SQLite profile has no roles; triggers guard it). Fails closed: if
    the check itself cannot run, the process does not start either, because an
    unverified role is treated like a bad one.
    """
    if not getattr(settings, "OWLAI_DB_ROLE_CHECK", False):
        return
    connection = connections[using]
    if connection.vendor != "postgresql":
        return
    was_open = connection.connection is not None
    hint = (
        "Run the application as the role prepared by `manage.py audit_db_setup` (not the owner role that runs "
        "migrations), or set OWLAI_DB_ROLE_CHECK=false for a non-production database."
    )
    try:
        problems = runtime_role_problems(connection)
        unwritable = runtime_insert_problems(connection)
    except Exception as exc:
        raise ImproperlyConfigured(
            f"OwlAI refuses to start: the database role could not be checked ({exc.__class__.__name__}: {exc}). {hint}"
        ) from exc
    finally:
        if not was_open:
            # A start-up check should not leave a connection behind in the
            # importing thread; closing must not hide the real outcome.
            with contextlib.suppress(Exception):
                connection.close()
    if problems:
        listed = "; ".join(problems)
        raise ImproperlyConfigured(
            f"OwlAI refuses to start: its database role could rewrite the audit trail ({listed}). {hint}"
        )
    if unwritable:
        listed = "; ".join(unwritable)
        raise ImproperlyConfigured(
            f"OwlAI refuses to start: its database role cannot write the audit trail ({listed}), so every tool "
            "call would be refused. Run `manage.py audit_db_setup` as the owner role (it grants the application "
            "role INSERT and SELECT on every audit table), or set OWLAI_DB_ROLE_CHECK=false for a non-production "
            "database."
        )


# --- Applying the set-up ---------------------------------------------------------


def _preflight_problems(
    cursor: Any, *, owner_role: str, roles: Sequence[str], create_roles: bool, audit_tables, granted_tables
) -> list[str]:
    """What would make the set-up fail or, worse, half-apply silently.

    A GRANT by a role that does not own the table only raises a WARNING ("no
    privileges were granted"), so ownership is checked up front.
    """
    problems = []
    names = [owner_role] if create_roles else [owner_role, *roles]
    for name in names:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name])
        if cursor.fetchone() is None:
            hint = "" if name == owner_role else " (create it, or pass --create-roles)"
            problems.append(f"role {name} does not exist{hint}")
    for table in [*audit_tables, *granted_tables]:
        cursor.execute(
            "SELECT pg_get_userbyid(c.relowner), pg_has_role(current_user, c.relowner, 'USAGE') "
            "FROM pg_class c WHERE c.oid = to_regclass(%s)",
            [_table(table)],
        )
        row = cursor.fetchone()
        if row is None:
            problems.append(f"table {table} does not exist (run `manage.py migrate` first)")
            continue
        owner, can_grant = row
        if table in audit_tables and owner != owner_role:
            problems.append(f"audit table {table} is owned by {owner}, not by the owner role {owner_role}")
        if not can_grant:
            problems.append(f"the current role cannot grant on {table} (owned by {owner}); run as the owner role")
    return problems


def _password_verifier(connection: Any, role: str, password: str) -> str:
    """The role's password as the server stores it (SCRAM, or what its
    password_encryption says), computed by libpq on this side."""
    if not password:
        raise AuditDbSetupError(f"the password for role {role} is empty")
    pgconn = connection.connection.pgconn
    return pgconn.encrypt_password(password.encode(), role.encode(), None).decode("ascii")


def apply_setup(
    *,
    connection: Any,
    owner_role: str,
    app_role: str,
    retention_role: str,
    retention_days: int,
    audit_tables: tuple[str, ...],
    other_tables: list[str],
    read_only_tables: Sequence[str] = (),
    create_roles: bool = False,
    passwords: Mapping[str, str] | None = None,
) -> list[str]:
    """Run the set-up in one transaction on a Django connection; return the statements run.

    Takes a Django connection (``django.db.connections[alias]``), the one the
    owner already uses for ``migrate``; the connection's current role must own
    the tables (or be a superuser). Everything happens in one transaction: a
    missing role, a table owned by someone else or a verification failure
    rolls it all back (AuditDbSetupError), so an install is never left half
    guarded. After the statements, the application and retention roles are
    verified with the same checks the application runs at start-up.

    ``passwords`` (role name -> password) sets the application or retention
    role's password in the same transaction. The statement carries the SCRAM
    verifier libpq computes here, so the password itself never reaches the
    server's statement log; it is not among the statements returned.
    """
    unknown = set(passwords or {}) - {app_role, retention_role}
    if unknown:
        raise ValueError(f"passwords are set for the application and retention roles only, not {sorted(unknown)}")
    statements = setup_statements(
        owner_role=owner_role,
        app_role=app_role,
        retention_role=retention_role,
        retention_days=retention_days,
        audit_tables=audit_tables,
        other_tables=other_tables,
        read_only_tables=read_only_tables,
    )
    role_statements = create_role_statements(roles=[app_role, retention_role]) if create_roles else []
    if connection.vendor != "postgresql":
        raise AuditDbSetupError("database roles exist on PostgreSQL only")
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        problems = _preflight_problems(
            cursor,
            owner_role=owner_role,
            roles=[app_role, retention_role],
            create_roles=create_roles,
            audit_tables=audit_tables,
            granted_tables=[*other_tables, *read_only_tables],
        )
        if problems:
            raise AuditDbSetupError("; ".join(problems))
        for statement in [*role_statements, *statements]:
            cursor.execute(statement)
        for role, password in (passwords or {}).items():
            cursor.execute(f"ALTER ROLE {_role(role)} PASSWORD %s", [_password_verifier(connection, role, password)])
        problems = _role_problems(cursor, app_role, audit_tables=audit_tables)
        problems += _insert_problems(cursor, app_role, audit_tables=audit_tables)
        problems += _role_problems(cursor, retention_role, audit_tables=audit_tables, allowed=frozenset({"DELETE"}))
        if problems:
            raise AuditDbSetupError("set-up applied but the roles are still unsafe: " + "; ".join(problems))
    return [*role_statements, *statements]
