"""Deleting audit rows past retention: the only deletion the trail allows.

On PostgreSQL the purge connects as the retention role
(``OWLAI_RETENTION_DATABASE_URL``): the application role has no DELETE right
on the audit tables at all, and the retention role's deletes are limited by a
row-level-security policy to rows older than the retention period (see
``audit.db_roles``). In the embedded SQLite profile it uses the default
connection, where triggers refuse to delete younger rows.

The cut-off is computed here too, clamped to the legal floor, so a
misconfigured value or a wrong ``now`` cannot widen what is deleted: the
database guard is the backstop, not the only check.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from owlai.install_config import MIN_RETENTION_DAYS

logger = logging.getLogger(__name__)


def retention_cutoff(*, now: datetime | None = None) -> datetime:
    """Rows created before this instant may be deleted.

    Uses max(OWLAI_RETENTION_DAYS, 1,095) days, and never a `now` later than
    the real clock: a `now` in the future would move the cut-off forward and
    delete rows that are still within retention.
    """
    real_now = timezone.now()
    if now is None or now > real_now:
        now = real_now
    days = max(int(settings.OWLAI_RETENTION_DAYS), MIN_RETENTION_DAYS)
    return now - timedelta(days=days)


def _purge_with_url(url: str, tables: tuple[str, ...], cutoff: datetime) -> dict[str, int]:
    """Delete through the retention role's own connection, all tables in one transaction."""
    import psycopg
    from psycopg import sql

    deleted: dict[str, int] = {}
    with psycopg.connect(url, autocommit=False) as conn:
        # `with conn` commits on success and rolls back on an exception.
        with conn.cursor() as cursor:
            for table in tables:
                cursor.execute(
                    sql.SQL("DELETE FROM {} WHERE created_at < %s").format(sql.Identifier(table)),
                    [cutoff],
                )
                deleted[table] = cursor.rowcount
    return deleted


def _purge_with_default(tables: tuple[str, ...], cutoff: datetime, using: str) -> dict[str, int]:
    """Delete through the Django connection (embedded profile), one transaction."""
    connection = connections[using]
    value = connection.ops.adapt_datetimefield_value(cutoff)
    deleted: dict[str, int] = {}
    with transaction.atomic(using=using), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)} WHERE created_at < %s", [value])
            deleted[table] = cursor.rowcount
    return deleted


def purge_expired(*, now: datetime | None = None) -> dict[str, int]:
    """Delete audit rows older than the retention period; return deleted counts per table.

    Connects with ``OWLAI_RETENTION_DATABASE_URL`` (psycopg, one transaction)
    when set, else through the default Django connection. On PostgreSQL with
    the application role the latter fails (no DELETE right): that is intended,
    production must configure the retention role.
    """
    from audit.tables import AUDIT_TABLES

    cutoff = retention_cutoff(now=now)
    url = getattr(settings, "OWLAI_RETENTION_DATABASE_URL", "")
    if url:
        deleted = _purge_with_url(url, AUDIT_TABLES, cutoff)
    else:
        deleted = _purge_with_default(AUDIT_TABLES, cutoff, DEFAULT_DB_ALIAS)
    logger.info("audit retention: deleted rows created before %s: %s", cutoff.isoformat(), deleted)
    return deleted
