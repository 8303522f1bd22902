"""Which resources a turn may see. One decision, used both to build what the
model is shown and, again, by the executor before any tool runs.

Both entry points below apply the same predicate (`_grants_visible_to`), so the
prompt and the executor cannot drift apart. Fails closed: an error while
deciding hides everything (prompt) or refuses (executor).
"""

from __future__ import annotations

import logging

from django.db.models import QuerySet

from governance.models import DbConnection, DbGrant
from governance.table_access import GrantScope

logger = logging.getLogger(__name__)


def _grants_visible_to(user_id: int) -> QuerySet[DbGrant]:
    """The grants that make a connection visible to this user."""
    return DbGrant.objects.filter(role__users__id=user_id)


def visible_db_connections(*, user_id: int) -> list[DbConnection]:
    """Connections the user holds a grant on through any of their roles."""
    try:
        ids = _grants_visible_to(user_id).values("connection_id")
        return list(DbConnection.objects.filter(pk__in=ids).order_by("name"))
    except Exception:
        logger.exception("visibility decision failed; hiding all connections")
        return []


def db_access(*, user_id: int, connection_name: str) -> tuple[DbConnection, GrantScope] | None:
    """The named connection and the user's merged grant on it, or None when it
    is not visible (no such connection, or no grant: the caller must not tell
    the two apart). One query: this runs on every tool call."""
    grants = list(
        _grants_visible_to(user_id).filter(connection__name=connection_name).select_related("connection")
    )
    if not grants:
        return None
    connection = grants[0].connection
    scope = GrantScope.merge(
        ((g.whole_database, g.tables if isinstance(g.tables, list) else []) for g in grants), connection.sql_dialect
    )
    return (connection, scope) if scope is not None else None
