"""The embedded profile's (SQLite) triggers, and their re-installation.

SQLite cannot ALTER most of a table, so Django's schema editor rebuilds it
(create a copy, move the rows, drop the old one), and a rebuilt table has
lost its triggers. Any later migration touching one of these tables would
silently switch a guard off: the audit trail's append-only triggers, the
one-way exposure flag (DB connections, collections, connectors), the classification revision that invalidates the
executor's schema cache. So every `migrate` ends by (re)creating them all,
idempotently (post_migrate, see apps.py). PostgreSQL keeps triggers through
ALTER TABLE; its own are created by the migrations.
"""

from __future__ import annotations

from audit.sqlite_guards import create_trigger_statements as audit_trigger_statements

EXPOSURE_TABLES = ("governance_dbconnection", "governance_documentcollection")
# Connectors came later (their own migration): their trigger is a group of its own.
CONNECTOR_EXPOSURE_TABLES = ("governance_connector",)
REVISION_TABLE = "governance_classificationrevision"
CLASSIFICATION_TABLE = "governance_columnclassification"
REVISION_UPSERT = f"INSERT OR REPLACE INTO {REVISION_TABLE} (id, token) VALUES (1, lower(hex(randomblob(16))))"


def exposure_trigger_statements(tables: tuple[str, ...] = EXPOSURE_TABLES) -> list[str]:
    return [
        f"CREATE TRIGGER IF NOT EXISTS owlai_exposure_one_way_{table} BEFORE UPDATE ON {table} "
        "FOR EACH ROW WHEN OLD.exposure = 'all_models' AND NEW.exposure <> 'all_models' "
        "BEGIN SELECT RAISE(ABORT, 'exposure is one-way: opened resources cannot be made internal-only'); END"
        for table in tables
    ]


def revision_trigger_statements() -> list[str]:
    return [
        f"CREATE TRIGGER IF NOT EXISTS owlai_classification_revision_{event.lower()} AFTER {event} "
        f"ON {CLASSIFICATION_TABLE} FOR EACH ROW BEGIN {REVISION_UPSERT}; END"
        for event in ("INSERT", "UPDATE", "DELETE")
    ]


# Each group of triggers belongs to the migration that first created it: a
# database migrated back before that migration must not get them (its tables
# may lack the columns they name).
AUDIT_MIGRATION = ("audit", "0003_append_only_guards_and_search_indexes")
EXPOSURE_MIGRATION = ("governance", "0003_exposure_one_way_and_search_index")
REVISION_MIGRATION = ("governance", "0005_classification_revision")
CONNECTOR_MIGRATION = ("governance", "0007_connectors")


def ensure_sqlite_triggers(connection) -> int:
    """(Re)create the triggers of every applied migration that defines them,
    dropping the old definition first so a changed one takes effect; returns
    how many triggers were installed. A no-op on other databases."""
    if connection.vendor != "sqlite":
        return 0
    from django.db import transaction
    from django.db.migrations.recorder import MigrationRecorder

    applied = set(MigrationRecorder(connection).applied_migrations())
    wanted: list[str] = []
    if AUDIT_MIGRATION in applied:
        wanted += audit_trigger_statements()
    if EXPOSURE_MIGRATION in applied:
        wanted += exposure_trigger_statements()
    if REVISION_MIGRATION in applied:
        wanted += revision_trigger_statements()
    if CONNECTOR_MIGRATION in applied:
        wanted += exposure_trigger_statements(CONNECTOR_EXPOSURE_TABLES)
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for statement in wanted:
            cursor.execute(f"DROP TRIGGER IF EXISTS {_trigger_name(statement)}")
            cursor.execute(statement)
    return len(wanted)


def _trigger_name(statement: str) -> str:
    # "CREATE TRIGGER IF NOT EXISTS <name> ..." in every statement above
    return statement.split("IF NOT EXISTS ", 1)[1].split()[0]
