"""What code of its own a customer database holds in the connection's schemas.

A PostgreSQL function, aggregate, operator or cast created in a connection's
schema can look like a built-in (`public.lower(varchar)`, `public.||`), and a
SECURITY DEFINER one runs with its owner's rights. The executor never calls
them (binding.py) and refuses statements that could reach them implicitly;
this listing lets the admin see that they exist (schema analysis stores it on
the connection). MySQL / MariaDB: stored functions and procedures of the
connection's database (a query can only reach them qualified, which the
guard denies). SQLite has no code stored in the database file.

Each entry: {"kind": function|aggregate|procedure|operator|cast,
"name": a readable signature, "security_definer": bool, "extension": name or ""}.
"""

from __future__ import annotations

from governance.sql.execute import execute_readonly

MAX_ENTRIES = 500

# Bound like every PostgreSQL statement OwlAI runs. OIDs: 11 is pg_catalog,
# 1255 pg_proc, 2605 pg_cast, 2617 pg_operator, 3079 pg_extension (fixed across versions).
_PG_SQL = """
SELECT CASE p.prokind WHEN 'a' THEN 'aggregate' WHEN 'p' THEN 'procedure' WHEN 'w' THEN 'function'
            ELSE 'function' END,
       n.nspname || '.' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       p.prosecdef,
       COALESCE((SELECT e.extname FROM pg_catalog.pg_depend AS d
                 JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid
                 WHERE d.classid = 1255 AND d.objid = p.oid AND d.refclassid = 3079 AND d.deptype = 'e'), '')
FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
WHERE n.nspname = ANY(current_schemas(FALSE))
UNION ALL
SELECT 'operator',
       n.nspname || '.' || o.oprname || '(' || format_type(o.oprleft, NULL) || ', '
       || format_type(o.oprright, NULL) || ')',
       COALESCE((SELECT f.prosecdef FROM pg_catalog.pg_proc AS f WHERE f.oid = o.oprcode), FALSE),
       COALESCE((SELECT e.extname FROM pg_catalog.pg_depend AS d
                 JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid
                 WHERE d.classid = 2617 AND d.objid = o.oid AND d.refclassid = 3079 AND d.deptype = 'e'), '')
FROM pg_catalog.pg_operator AS o JOIN pg_catalog.pg_namespace AS n ON n.oid = o.oprnamespace
WHERE n.nspname = ANY(current_schemas(FALSE))
UNION ALL
SELECT 'cast',
       format_type(c.castsource, NULL) || ' AS ' || format_type(c.casttarget, NULL) || ' WITH '
       || fn.nspname || '.' || f.proname,
       f.prosecdef,
       COALESCE((SELECT e.extname FROM pg_catalog.pg_depend AS d
                 JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid
                 WHERE d.classid = 2605 AND d.objid = c.oid AND d.refclassid = 3079 AND d.deptype = 'e'), '')
FROM pg_catalog.pg_cast AS c JOIN pg_catalog.pg_proc AS f ON f.oid = c.castfunc
JOIN pg_catalog.pg_namespace AS fn ON fn.oid = f.pronamespace
WHERE f.pronamespace <> 11
ORDER BY 1, 2
"""

_MYSQL_SQL = (
    "SELECT LOWER(ROUTINE_TYPE), CONCAT(ROUTINE_SCHEMA, '.', ROUTINE_NAME), SECURITY_TYPE = 'DEFINER', '' "
    "FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY 1, 2"
)


def database_code(*, engine: str, dsn: str, schemas: tuple[str, ...], timeout_ms: int) -> list[dict]:
    """The database's own functions, operators and casts (see module doc);
    at most MAX_ENTRIES. Raises QueryError when the catalog cannot be read."""
    sql = {"postgresql": _PG_SQL, "mysql": _MYSQL_SQL}.get(engine)
    if sql is None:
        return []
    rows = execute_readonly(
        engine=engine, dsn=dsn, sql=sql, row_cap=MAX_ENTRIES, timeout_ms=timeout_ms, schemas=schemas
    ).rows
    return [
        {"kind": str(kind), "name": str(name), "security_definer": bool(definer), "extension": str(extension or "")}
        for kind, name, definer, extension in rows
    ]


def summary(entries: list[dict] | None) -> str:
    """A short line for the admin: how many, and how many SECURITY DEFINER."""
    if entries is None:
        return ""
    if not entries:
        return "none"
    definers = sum(1 for entry in entries if entry.get("security_definer"))
    own = sum(1 for entry in entries if not entry.get("extension"))
    return f"{len(entries)} ({own} not from an extension, {definers} SECURITY DEFINER)"
