"""The embedded profile's (SQLite) triggers, and their re-installation.

SQLite cannot ALTER most of a table, so Django's schema editor rebuilds it
(create a copy, move the rows, drop the old one), and a rebuilt table has
lost its triggers. Any later migration touching one of these tables would
silently switch a guard off: the audit trail's append-only triggers, the
one-way exposure flag, the classification revision that invalidates the
executor's schema cache. So every `migrate` ends by (re)creating them all,
idempotently (post_migrate, see apps.py). PostgreSQL keeps triggers through
ALTER TABLE; its own are created by the migrations.
"""

from __future__ import annotations

from audit.sqlite_guards import create_trigger_statements as audit_trigger_statements

EXPOSURE_TABLES = ("governance_dbconnection", "governance_documentcollection")
REVISION_TABLE = "governance_classificationrevision"
CLASSIFICATION_TABLE = "governance_columnclassification"
REVISION_UPSERT = f"INSERT OR REPLACE INTO {REVISION_TABLE} (id, token) VALUES (1, lower(hex(randomblob(16))))"


def exposure_trigger_statements() -> list[str]:
    return [
        f"CREATE TRIGGER IF NOT EXISTS owlai_exposure_one_way_{table} BEFORE UPDATE ON {table} "
        "FOR EACH ROW WHEN OLD.exposure = 'all_models' AND NEW.exposure <> 'all_models' "
        "BEGIN SELECT RAISE(ABORT, 'exposure is one-way: opened resources cannot be made internal-only'); END"
        for table in EXPOSURE_TABLES
    ]


def revision_trigger_statements() -> list[str]:
    return [
        f"CREATE TRIGGER IF NOT EXISTS owlai_classification_revision_{event.lower()} AFTER {event} "
        f"ON {CLASSIFICATION_TABLE} FOR EACH ROW BEGIN {REVISION_UPSERT}; END"
        for event in ("INSERT", "UPDATE", "DELETE")
    ]


def ensure_sqlite_triggers(connection) -> int:
    """Create every missing trigger whose table exists; returns how many
    statements ran. A no-op on other databases."""
    if connection.vendor != "sqlite":
        return 0
    tables = set(connection.introspection.table_names())
    wanted = [
        *(s for s in audit_trigger_statements() if _table_of(s) in tables),
        *(s for s in exposure_trigger_statements() if _table_of(s) in tables),
        *(s for s in revision_trigger_statements() if {CLASSIFICATION_TABLE, REVISION_TABLE} <= tables),
    ]
    with connection.cursor() as cursor:
        for statement in wanted:
            cursor.execute(statement)
    return len(wanted)


def _table_of(statement: str) -> str:
    # "... ON <table> ..." in every statement above
    return statement.split(" ON ", 1)[1].split()[0]
