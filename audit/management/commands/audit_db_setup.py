"""`manage.py audit_db_setup`: database roles that make the audit trail append-only.

Run it as the owner role (the one that ran ``migrate``), on PostgreSQL, after
every ``migrate``:

    python manage.py audit_db_setup --app-role owlai_app --retention-role owlai_retention [--create-roles] \
        [--app-password-env NAME] [--retention-password-env NAME]

Afterwards the application (``DATABASE_URL``) connects as the application role,
which can only INSERT and SELECT audit rows; the daily purge
(``OWLAI_RETENTION_DATABASE_URL``) connects as the retention role, which can
delete only rows older than the retention period. ``--print-sql`` shows the
statements without running them. See ``audit.db_roles`` for the design.
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections

from audit.db_roles import AuditDbSetupError, apply_setup, create_role_statements, setup_statements
from audit.models import AUDIT_TABLES
from owlai.install_config import is_env_name

# The application may read which migrations are applied (``migrate --check``,
# the runserver warning) but never record one: migrations run as the owner.
MIGRATIONS_TABLE = "django_migrations"


def _password_from_env(name: str) -> str:
    if not is_env_name(name):
        raise CommandError(f"{name!r} is not an environment variable name (give the NAME, not the password)")
    value = os.environ.get(name, "")
    if not value:
        raise CommandError(f"environment variable {name} is not set or empty (nothing was changed)")
    return value


class Command(BaseCommand):
    help = (
        "Set up PostgreSQL roles so the audit tables are append-only: the application role may only INSERT and "
        "SELECT them, the retention role may only DELETE rows past retention. Run as the owner role."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--app-role", required=True, help="role the application connects as (DATABASE_URL)")
        parser.add_argument(
            "--retention-role",
            required=True,
            help="role the retention purge connects as (OWLAI_RETENTION_DATABASE_URL)",
        )
        parser.add_argument(
            "--owner-role",
            default=None,
            help="role that owns the tables and runs migrations (default: the current role)",
        )
        parser.add_argument(
            "--create-roles",
            action="store_true",
            help="create the application and retention roles (LOGIN, no password) when missing; needs CREATEROLE",
        )
        # Names of environment variables, never the passwords: a command line
        # is visible to every user of the machine (ps) and lands in shell history.
        for role in ("app", "retention"):
            parser.add_argument(
                f"--{role}-password-env",
                metavar="NAME",
                default=None,
                help=f"set the {role} role's password from the environment variable NAME (created or existing role)",
            )
        parser.add_argument("--print-sql", action="store_true", help="print the SQL and change nothing")
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS, help="database alias (default: default)")

    def handle(self, *args, **options) -> None:
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            raise CommandError(
                "audit_db_setup needs PostgreSQL (the production profile, DATABASE_URL): the embedded SQLite "
                "profile has no database roles; triggers guard its audit tables instead."
            )
        app_role, retention_role = options["app_role"], options["retention_role"]
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            current_user = cursor.fetchone()[0]
        owner_role = options["owner_role"] or current_user
        password_envs = {
            role: options[f"{kind}_password_env"]
            for kind, role in (("app", app_role), ("retention", retention_role))
            if options[f"{kind}_password_env"]
        }
        passwords = {role: _password_from_env(name) for role, name in password_envs.items()}

        existing = set(connection.introspection.table_names())
        missing = [t for t in AUDIT_TABLES if t not in existing]
        if missing:
            raise CommandError(f"audit tables missing ({', '.join(missing)}): run `manage.py migrate` first")
        other_tables = sorted(set(connection.introspection.django_table_names(only_existing=True)) - set(AUDIT_TABLES))
        read_only_tables = [MIGRATIONS_TABLE] if MIGRATIONS_TABLE in existing else []
        retention_days = settings.OWLAI_RETENTION_DAYS
        kwargs = {
            "owner_role": owner_role,
            "app_role": app_role,
            "retention_role": retention_role,
            "retention_days": retention_days,
            "audit_tables": AUDIT_TABLES,
            "other_tables": other_tables,
            "read_only_tables": read_only_tables,
        }

        if options["print_sql"]:
            try:
                statements = setup_statements(**kwargs)
                if options["create_roles"]:
                    statements = create_role_statements(roles=[app_role, retention_role]) + statements
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(f"-- audit_db_setup: run as the owner role {owner_role}; nothing was executed\n")
            for statement in statements:
                self.stdout.write(statement + ";")
            for role, name in password_envs.items():
                self.stdout.write(f"-- ALTER ROLE {role} PASSWORD <SCRAM verifier of ${name}>;")
            return

        with connection.cursor() as cursor:
            cursor.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", [[app_role, retention_role]])
            existed = {row[0] for row in cursor.fetchall()}
        try:
            statements = apply_setup(
                connection=connection, create_roles=options["create_roles"], passwords=passwords, **kwargs
            )
        except (ValueError, AuditDbSetupError) as exc:
            raise CommandError(f"{exc} (nothing was changed)") from exc

        if options["verbosity"] >= 2:
            for statement in statements:
                self.stdout.write(statement + ";")
        for role in (app_role, retention_role):
            if role in password_envs:
                state = "already existed, attributes left unchanged" if role in existed else "created (LOGIN)"
                self.stdout.write(f"Role {role}: {state}; password set from ${password_envs[role]}.")
            elif role in existed:
                self.stdout.write(f"Role {role}: already existed, attributes and password left unchanged.")
            else:
                self.stdout.write(
                    f"Role {role}: created (LOGIN, no password: set one with ALTER ROLE {role} PASSWORD)."
                )
        tables = ", ".join(AUDIT_TABLES)
        self.stdout.write(f"Audit tables ({tables}), owned by {owner_role}:")
        self.stdout.write(f"  {app_role}: SELECT, INSERT only (no UPDATE, DELETE, TRUNCATE).")
        self.stdout.write(
            f"  {retention_role}: SELECT, DELETE; row-level security lets it delete only rows older than "
            f"{retention_days} days."
        )
        self.stdout.write(
            f"  Row-level security enabled and forced; the owner {owner_role} may only SELECT through it."
        )
        self.stdout.write(
            f"Other tables: {app_role} may SELECT, INSERT, UPDATE, DELETE {len(other_tables)} tables (and tables "
            f"{owner_role} creates later)" + (f"; SELECT only on {MIGRATIONS_TABLE}." if read_only_tables else ".")
        )
        self.stdout.write(
            self.style.SUCCESS(f"Verified: {app_role} and {retention_role} cannot rewrite the audit trail.")
        )
        self.stdout.write(
            f"Next: DATABASE_URL connects as {app_role}, OWLAI_RETENTION_DATABASE_URL as {retention_role}; keep "
            f"{owner_role} for migrate and re-run this command after every migrate."
        )
