"""The SQL dialects OwlAI reads customer SQL in: the one list, and how each
maps to a connection engine and to its default schemas.

Every module that takes a dialect (guard, lineage, table grants, function
allowlists, the `sql_check` command) uses these names; tests/test_vocabulary.py
ties them together.
"""

from __future__ import annotations

# sqlglot's names for the dialects of the supported engines.
POSTGRES = "postgres"
MYSQL = "mysql"
SQLITE = "sqlite"
SUPPORTED_DIALECTS: tuple[str, ...] = (POSTGRES, MYSQL, SQLITE)

# Connection engine (governance.models.DbEngine values) -> dialect. Callers
# may also pass an engine name where a dialect is expected: `dialect_of`
# accepts both.
DIALECT_BY_ENGINE: dict[str, str] = {"postgresql": POSTGRES, "mysql": MYSQL, "sqlite": SQLITE}
_ALIASES = {**DIALECT_BY_ENGINE, "mariadb": MYSQL, "sqlite3": SQLITE, **{d: d for d in SUPPORTED_DIALECTS}}

# The schemas a bare table name resolves to, per dialect. A reference
# qualified with one of these is the same table as the bare name. MySQL's
# default "schema" is the connection's database, which has no fixed name.
DEFAULT_SCHEMAS: dict[str, frozenset[str]] = {
    POSTGRES: frozenset({"public"}),
    SQLITE: frozenset({"main"}),
    MYSQL: frozenset(),
}


def dialect_of(name: str) -> str:
    """The dialect for a dialect or engine name; ValueError for anything else."""
    dialect = _ALIASES.get(str(name).lower())
    if dialect is None:
        raise ValueError(f"unsupported SQL dialect {name!r}; expected one of {SUPPORTED_DIALECTS}")
    return dialect


# Schemas that hold the server's own catalogs, statistics and activity views,
# never company data: a whole-database grant never covers them, even if an
# admin lists one as a connection schema. PostgreSQL reserves every schema
# name starting with "pg_" (pg_catalog, pg_toast, pg_temp_N, ...).
SYSTEM_SCHEMAS: dict[str, frozenset[str]] = {
    POSTGRES: frozenset({"information_schema"}),
    MYSQL: frozenset({"mysql", "information_schema", "performance_schema", "sys"}),
    SQLITE: frozenset({"temp"}),
}
SYSTEM_SCHEMA_PREFIXES: dict[str, tuple[str, ...]] = {POSTGRES: ("pg_",), MYSQL: (), SQLITE: ()}


def is_system_schema(name: str, dialect: str) -> bool:
    name = name.lower()
    return name in SYSTEM_SCHEMAS[dialect] or name.startswith(SYSTEM_SCHEMA_PREFIXES[dialect])


def configured_schemas(dialect: str, configured: object) -> tuple[str, ...]:
    """The schemas a whole-database grant covers on a connection: the
    connection's configured list (DbConnection.schemas) in order, without
    blanks, duplicates and system schemas; blank means the dialect default
    (`public`, `main`; none for MySQL, where only unqualified names, i.e. the
    DSN's database, are covered). Names keep their spelling: PostgreSQL's
    search_path needs it; the grant layer compares them case-insensitively.

    The execution layer pins PostgreSQL's search_path to exactly these, so an
    unqualified name that is not pg_* is a table in one of them."""
    names = [n.strip() for n in configured if isinstance(n, str)] if isinstance(configured, (list, tuple)) else []
    names = [n for n in names if n]
    result: list[str] = []
    for name in names:
        if not is_system_schema(name, dialect) and name.lower() not in {r.lower() for r in result}:
            result.append(name)
    if not names:  # blank: the default (a list of only system schemas stays empty)
        return tuple(sorted(DEFAULT_SCHEMAS[dialect]))
    return tuple(result)
