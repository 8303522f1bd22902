"""Which resources a turn may see. One decision, used both to build what the
model is shown and, again, by the executor before any tool runs.

Both entry points below share one SQL predicate (`_VISIBLE_GRANTS`), so the
prompt and the executor cannot drift apart. It is written as SQL rather than
an ORM query because the executor evaluates it on every tool call and the ORM
spent more time compiling the four-way join than the database spent running
it (bench/executor.py). Fails closed: an error while deciding hides
everything (prompt) or refuses (executor).
"""

from __future__ import annotations

import json
import logging
from functools import cache

from django.db import connection as db

from governance.models import DbConnection, DbGrant, Role
from governance.table_access import GrantScope

logger = logging.getLogger(__name__)


@cache
def _visible_grants_sql() -> str:
    """FROM/WHERE fragment: grants held by user %s, joined to their connection `c`."""
    grants = DbGrant._meta.db_table
    role_users = Role.users.through._meta.db_table
    connections = DbConnection._meta.db_table
    return (
        f" FROM {grants} g"
        f" JOIN {role_users} ru ON ru.role_id = g.role_id"
        f" JOIN {connections} c ON c.id = g.connection_id"
        " WHERE ru.user_id = %s"
    )


@cache
def _connection_columns() -> tuple[str, ...]:
    return tuple(f.column for f in DbConnection._meta.concrete_fields)


def visible_db_connections(*, user_id: int) -> list[DbConnection]:
    """Connections the user holds a grant on through any of their roles."""
    try:
        columns = ", ".join(f"c.{col}" for col in _connection_columns())
        sql = f"SELECT DISTINCT {columns}{_visible_grants_sql()} ORDER BY c.name"
        return list(DbConnection.objects.raw(sql, [user_id]))
    except Exception:
        logger.exception("visibility decision failed; hiding all connections")
        return []


def db_access(*, user_id: int, connection_name: str) -> tuple[DbConnection, GrantScope] | None:
    """The named connection and the user's merged grant on it, or None when it
    is not visible (no such connection, or no grant: the caller must not tell
    the two apart). Exceptions propagate: the executor refuses on them."""
    columns = _connection_columns()
    sql = (
        f"SELECT g.whole_database, g.tables, {', '.join(f'c.{col}' for col in columns)}"
        f"{_visible_grants_sql()} AND c.name = %s"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, [user_id, connection_name])
        rows = cursor.fetchall()
    if not rows:
        return None
    connection = DbConnection.from_db(db.alias, list(_connection_field_names()), rows[0][2:])
    scope = GrantScope.merge(((bool(whole), _table_list(tables)) for whole, tables, *_ in rows), connection.sql_dialect)
    return (connection, scope) if scope is not None else None


@cache
def _connection_field_names() -> tuple[str, ...]:
    return tuple(f.attname for f in DbConnection._meta.concrete_fields)


def _table_list(raw: object) -> list[str]:
    # JSON columns come back as text from a raw cursor (SQLite, and PostgreSQL
    # under Django's jsonb loader); anything but a list of strings grants nothing.
    value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    if not isinstance(value, list):
        return []
    return [t for t in value if isinstance(t, str)]
