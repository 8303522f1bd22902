"""Append-only guards for the embedded profile (SQLite).

SQLite has no roles, so triggers abort any UPDATE on the audit tables and any
DELETE of a row younger than the legal floor (1,095 days): only the retention
job's deletions of expired rows pass. Used by migration audit 0003.
"""

from __future__ import annotations

from audit.tables import AUDIT_TABLES
from owlai.install_config import MIN_RETENTION_DAYS

GUARDED_TABLES = AUDIT_TABLES


def trigger_names(table: str) -> tuple[str, str]:
    return (f"{table}_append_only_update", f"{table}_append_only_delete")


def create_trigger_statements(tables: tuple[str, ...] = GUARDED_TABLES) -> list[str]:
    statements = []
    for table in tables:
        no_update, no_delete = trigger_names(table)
        statements.append(
            f"CREATE TRIGGER IF NOT EXISTS {no_update} BEFORE UPDATE ON {table} "
            "BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END"
        )
        # created_at is stored as 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC, which
        # compares correctly with datetime('now', ...) as text.
        statements.append(
            f"CREATE TRIGGER IF NOT EXISTS {no_delete} BEFORE DELETE ON {table} "
            f"WHEN OLD.created_at >= datetime('now', '-{MIN_RETENTION_DAYS} days') "
            "BEGIN SELECT RAISE(ABORT, 'audit records are kept for the retention period'); END"
        )
    return statements


def drop_trigger_statements(tables: tuple[str, ...] = GUARDED_TABLES) -> list[str]:
    return [f"DROP TRIGGER IF EXISTS {name}" for table in tables for name in trigger_names(table)]
