"""Pure decision: may a set of grants read these tables?

Grants and SQL table references are compared case-insensitively.

A whole-database grant covers the company's tables, not the server's: the
user tables of the connection's configured schemas (DbConnection.schemas,
see governance.sql.dialects.configured_schemas). System catalogs, statistics
and activity views (PostgreSQL pg_catalog / information_schema / pg_toast /
pg_temp*, and any unqualified pg_* name since pg_catalog is searched first;
MySQL mysql / information_schema / performance_schema / sys; SQLite sqlite_*,
pragma_* and dbstat, temp and attached schemas) hold other tables' values
(pg_stats.most_common_vals, sqlite_stat1, mysql.innodb_index_stats) and other
sessions' statements (pg_stat_activity, performance_schema.events_statements_*),
so they are readable only through an explicit table grant that names them
(e.g. "pg_catalog.pg_stats").

Explicit table grants: a reference qualified with the connection's only
schema (``public.customers`` when the schemas are just public) is the same
table as the bare name. With several schemas a bare name may resolve to any
of them, so bare and qualified names are only equal to themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from governance.sql.dialects import MYSQL, POSTGRES, SQLITE, configured_schemas, is_system_schema

# SQLite relations that are the engine's own, whatever schema they are in:
# the schema table, statistics (sqlite_stat1..4), sequences, and eponymous
# virtual tables that read the database's internals.
_SQLITE_SYSTEM_PREFIXES = ("sqlite_", "pragma_")
_SQLITE_SYSTEM_NAMES = frozenset({"dbstat"})


def _parts(name: str) -> list[str]:
    return [p.strip().strip('"`[]').lower() for p in name.split(".")]


def _single_schema(schemas: frozenset[str]) -> str | None:
    return next(iter(schemas)) if len(schemas) == 1 else None


def normalise_table(name: str, schemas: frozenset[str], dialect: str = POSTGRES) -> str:
    """The comparison key of a table name in grants and references."""
    parts = _parts(name)
    if dialect == POSTGRES and len(parts) == 1 and parts[0].startswith("pg_"):
        # pg_catalog is searched before any schema of the search_path.
        return f"pg_catalog.{parts[0]}"
    if len(parts) == 2 and dialect != MYSQL and parts[0] == _single_schema(schemas):
        return parts[1]
    return ".".join(parts)


def _is_system_relation(parts: list[str], dialect: str) -> bool:
    table = parts[-1]
    schema = parts[-2] if len(parts) >= 2 else None
    if dialect == POSTGRES:
        # pg_* names: unqualified they resolve in pg_catalog first; qualified
        # with a user schema they are still the server's (extension views such
        # as public.pg_stat_statements and public.pg_buffercache).
        return table.startswith("pg_") or (schema is not None and is_system_schema(schema, dialect))
    if dialect == SQLITE:
        if table.startswith(_SQLITE_SYSTEM_PREFIXES) or table in _SQLITE_SYSTEM_NAMES:
            return True
        return schema is not None and is_system_schema(schema, dialect)
    # MySQL: a bare name is a table of the DSN's database.
    return schema is not None and is_system_schema(schema, dialect)


@dataclass(frozen=True)
class GrantScope:
    """What one user may read on one connection, merged over all their roles."""

    whole_database: bool
    tables: frozenset[str]
    # Lower-cased schemas a whole-database grant covers (system schemas never
    # among them); None: the dialect's default (public / main / none).
    schemas: frozenset[str] | None = None

    @classmethod
    def merge(
        cls,
        grants: Iterable[tuple[bool, Iterable[str]]],
        dialect: str,
        schemas: Iterable[str] | None = None,
    ) -> GrantScope | None:
        """Union of (whole_database, tables) grants; None when there is no grant
        at all. ``schemas``: the connection's configured schemas (blank or None
        = the dialect default)."""
        covered = frozenset(s.lower() for s in configured_schemas(dialect, list(schemas or [])))
        whole = False
        tables: set[str] = set()
        seen_any = False
        for grant_whole, grant_tables in grants:
            seen_any = True
            whole = whole or grant_whole
            tables.update(normalise_table(t, covered, dialect) for t in grant_tables if t and t.strip())
        if not seen_any:
            return None
        return cls(whole_database=whole, tables=frozenset(tables), schemas=covered)


def _covered_by_whole_database(parts: list[str], schemas: frozenset[str], dialect: str) -> bool:
    if _is_system_relation(parts, dialect):
        return False
    if len(parts) == 1:
        return True
    return len(parts) == 2 and parts[0] in schemas


def tables_not_granted(tables: Iterable[str], scope: GrantScope, dialect: str) -> list[str]:
    """The referenced tables the scope does not cover, in the order given."""
    schemas = scope.schemas
    if schemas is None:
        schemas = frozenset(s.lower() for s in configured_schemas(dialect, []))
    missing = []
    for table in tables:
        if scope.whole_database and _covered_by_whole_database(_parts(table), schemas, dialect):
            continue
        if normalise_table(table, schemas, dialect) in scope.tables:
            continue
        missing.append(table)
    return missing
