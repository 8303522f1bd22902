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
