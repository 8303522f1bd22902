"""Append-only guards (SQLite) and the indexes the audit screens need.

PostgreSQL's guards are role grants and row-level security, installed per
install by `manage.py audit_db_setup` (roles are cluster-wide, not schema).
"""

from django.db import migrations

from audit.sqlite_guards import create_trigger_statements, drop_trigger_statements

# The audit tables that exist at this migration (audit.tables grew later;
# 0006 guards the table it creates).
TABLES = ("audit_toolcallaudit", "audit_auditevent", "audit_auditdigest")

PG_INDEXES = [
    # pg_trgm is a trusted extension (PostgreSQL 13+): the database owner may create it.
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    # Substring search over SQL text (admin search `icontains` -> UPPER(...) LIKE).
    "CREATE INDEX IF NOT EXISTS audit_tc_sql_trgm ON audit_toolcallaudit USING gin (UPPER(sql_text) gin_trgm_ops)",
    # Table-name search: jsonb containment (tables @> '["customers"]').
    "CREATE INDEX IF NOT EXISTS audit_tc_tables_gin ON audit_toolcallaudit USING gin (tables jsonb_path_ops)",
]


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for statement in create_trigger_statements(TABLES):
            schema_editor.execute(statement, params=None)
    elif vendor == "postgresql":
        for statement in PG_INDEXES:
            schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        for statement in drop_trigger_statements(TABLES):
            schema_editor.execute(statement, params=None)
    elif vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS audit_tc_sql_trgm", params=None)
        schema_editor.execute("DROP INDEX IF EXISTS audit_tc_tables_gin", params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_events_and_digests")]

    operations = [migrations.RunPython(forwards, backwards)]
