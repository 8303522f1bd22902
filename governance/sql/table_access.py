"""Pure decision: may a set of grants read these tables?

Grants and SQL table references are compared case-insensitively. A reference
qualified with the connection's default schema (``public.customers`` on
PostgreSQL, ``main.customers`` on SQLite) is the same table as the bare name;
any other schema must be granted by its qualified name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from governance.sql.dialects import DEFAULT_SCHEMAS as DEFAULT_SCHEMAS_BY_DIALECT


def normalise_table(name: str, default_schemas: frozenset[str]) -> str:
    parts = [p.strip().strip('"`[]').lower() for p in name.split(".")]
    if len(parts) == 2 and parts[0] in default_schemas:
        return parts[1]
    return ".".join(parts)


@dataclass(frozen=True)
class GrantScope:
    """What one user may read on one connection, merged over all their roles."""

    whole_database: bool
    tables: frozenset[str]

    @classmethod
    def merge(cls, grants: Iterable[tuple[bool, Iterable[str]]], dialect: str) -> GrantScope | None:
        """Union of (whole_database, tables) grants; None when there is no grant at all."""
        default_schemas = DEFAULT_SCHEMAS_BY_DIALECT[dialect]
        whole = False
        tables: set[str] = set()
        seen_any = False
        for grant_whole, grant_tables in grants:
            seen_any = True
            whole = whole or grant_whole
            tables.update(normalise_table(t, default_schemas) for t in grant_tables if t and t.strip())
        if not seen_any:
            return None
        return cls(whole_database=whole, tables=frozenset(tables))


def tables_not_granted(tables: Iterable[str], scope: GrantScope, dialect: str) -> list[str]:
    """The referenced tables the scope does not cover, in the order given."""
    if scope.whole_database:
        return []
    default_schemas = DEFAULT_SCHEMAS_BY_DIALECT[dialect]
    return [t for t in tables if normalise_table(t, default_schemas) not in scope.tables]
