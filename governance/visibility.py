"""Which resources a turn may see. One decision, used both to build what the
model is shown and, again, by the executor before any tool runs.

Fails closed: an error while deciding hides everything.
"""

from __future__ import annotations

import logging

from governance.models import DbConnection, DbGrant
from governance.table_access import GrantScope

logger = logging.getLogger(__name__)


def visible_db_connections(*, user_id: int) -> list[DbConnection]:
    """Connections the user holds a grant on through any of their roles."""
    try:
        return list(DbConnection.objects.filter(grants__role__users__id=user_id).distinct().order_by("name"))
    except Exception:
        logger.exception("visibility decision failed; hiding all connections")
        return []


def db_grant_scope(*, user_id: int, connection: DbConnection) -> GrantScope | None:
    """The merged grant of all the user's roles on one connection; None: no grant."""
    grants = DbGrant.objects.filter(connection=connection, role__users__id=user_id).values_list("whole_database", "tables")
    return GrantScope.merge(
        ((whole, tables if isinstance(tables, list) else []) for whole, tables in grants), connection.sql_dialect
    )
