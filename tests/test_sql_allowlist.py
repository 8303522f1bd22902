"""The function allowlists are real, read-only builtins of each server.

PostgreSQL: every entry is a pg_catalog function of the test server (which
has the contrib extensions installed, so an extension overload of a listed
name would show up), none belongs to an extension, none lives in another
schema, and none is volatile unless excepted below. SQLite: every entry is in
pragma_function_list (or pragma_module_list for table-valued ones). MySQL /
MariaDB: every entry is a callable builtin (called with NULL arguments).
"""

from __future__ import annotations

import sqlite3

import pytest

from governance.sql.functions import AllowlistError, allowed_functions, parse_allowlist

# PostgreSQL entries that are SQL syntax, not pg_proc functions. Keep short.
PG_SYNTAX_ONLY = {
    "cast",  # CAST(x AS t)
    "coalesce",  # COALESCE(...) is an expression node, not a function
    "nullif",
    "greatest",
    "least",
    "trim",  # TRIM(... FROM ...) maps to btrim / ltrim / rtrim
    "grouping",  # GROUPING(...) of GROUP BY ROLLUP / CUBE
    "xmlelement",  # XML constructors are grammar syntax (XmlExpr)
    "xmlforest",
    "xmlconcat",
}

# Volatile PostgreSQL functions we allow anyway, and why.
PG_VOLATILE_OK = {
    "random",  # advances this session's generator only; setseed stays denied
    "clock_timestamp",  # reads the clock
    "pg_blocking_pids",  # reads the lock table (ids only); changes nothing
}

# MySQL / MariaDB entries that are syntax or need non-NULL / special arguments.
MYSQL_NOT_CALLABLE_WITH_NULLS = {
    "cast": "CAST(NULL AS CHAR)",
    "convert": "CONVERT(NULL, CHAR)",
    "binary": "BINARY NULL",
    "extract": "EXTRACT(YEAR FROM NULL)",
    "position": "POSITION(NULL IN NULL)",
    "trim": "TRIM(NULL)",
    "date_add": "DATE_ADD(NULL, INTERVAL 1 DAY)",
    "date_sub": "DATE_SUB(NULL, INTERVAL 1 DAY)",
    "adddate": "ADDDATE(NULL, INTERVAL 1 DAY)",
    "subdate": "SUBDATE(NULL, INTERVAL 1 DAY)",
    "timestampadd": "TIMESTAMPADD(DAY, 1, NULL)",
    "timestampdiff": "TIMESTAMPDIFF(DAY, NULL, NULL)",
    "json_table": "(SELECT COUNT(*) FROM JSON_TABLE('[]', '$[*]' COLUMNS (x INT PATH '$')) AS j)",
    "percentile_cont": "(SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY 1) OVER ())",
    "percentile_disc": "(SELECT PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY 1) OVER ())",
    "median": "(SELECT MEDIAN(1) OVER ())",
    "cume_dist": "(SELECT CUME_DIST() OVER (ORDER BY 1))",
    "dense_rank": "(SELECT DENSE_RANK() OVER (ORDER BY 1))",
    "percent_rank": "(SELECT PERCENT_RANK() OVER (ORDER BY 1))",
    "rank": "(SELECT RANK() OVER (ORDER BY 1))",
    "row_number": "(SELECT ROW_NUMBER() OVER (ORDER BY 1))",
    "ntile": "(SELECT NTILE(2) OVER (ORDER BY 1))",
    "lag": "(SELECT LAG(1) OVER (ORDER BY 1))",
    "lead": "(SELECT LEAD(1) OVER (ORDER BY 1))",
    "first_value": "(SELECT FIRST_VALUE(1) OVER (ORDER BY 1))",
    "last_value": "(SELECT LAST_VALUE(1) OVER (ORDER BY 1))",
    "nth_value": "(SELECT NTH_VALUE(1, 1) OVER (ORDER BY 1))",
    "count": "COUNT(NULL)",
    "group_concat": "GROUP_CONCAT(NULL)",
}


def test_allowlist_files_parse_and_reject_malformed_names() -> None:
    assert parse_allowlist("# comment\nlower  # trailing\n\nupper\n") == frozenset({"lower", "upper"})
    for bad in ("pg_catalog.lower", "Lower", "lower upper", "lower()"):
        with pytest.raises(AllowlistError):
            parse_allowlist(bad)
    with pytest.raises(AllowlistError):
        parse_allowlist("lower\nlower")


def test_allowlists_are_broad_enough_for_analytics() -> None:
    must_have = {
        "postgres": "count sum avg min max stddev variance percentile_cont percentile_disc mode string_agg "
        "array_agg bool_and bool_or every row_number rank dense_rank ntile lag lead first_value last_value "
        "nth_value cume_dist percent_rank coalesce nullif greatest least json_build_object jsonb_agg "
        "date_trunc extract to_char now generate_series unnest jsonb_array_elements json_each lower length",
        "mysql": "count sum avg min max group_concat row_number rank lag lead json_extract json_unquote "
        "date_format date_sub now coalesce ifnull if greatest least extract",
        "sqlite": "count sum avg min max group_concat total row_number rank lag lead json_extract json_each "
        "strftime date coalesce ifnull iif",
    }
    for dialect, names in must_have.items():
        assert set(names.split()) <= allowed_functions(dialect), dialect


def _pg_rows(pg_customer_db, sql: str, *params) -> list[tuple]:
    import psycopg

    with psycopg.connect(pg_customer_db.admin_dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


@pytest.mark.services
def test_postgres_allowlist_entries_are_pg_catalog_functions(pg_customer_db) -> None:
    names = sorted(allowed_functions("postgres") - PG_SYNTAX_ONLY)
    found = {
        row[0]
        for row in _pg_rows(
            pg_customer_db,
            "SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'pg_catalog' AND p.proname = ANY(%s)",
            names,
        )
    }
    assert sorted(set(names) - found) == []
    # the syntax-only entries really are not functions (else they belong in the list proper)
    syntax_only = sorted(PG_SYNTAX_ONLY)
    syntax_functions = _pg_rows(pg_customer_db, "SELECT proname FROM pg_proc WHERE proname = ANY(%s)", syntax_only)
    assert syntax_functions == []


@pytest.mark.services
def test_postgres_allowlist_has_no_volatile_extension_or_non_catalog_overload(pg_customer_db) -> None:
    names = sorted(allowed_functions("postgres"))
    rows = _pg_rows(
        pg_customer_db,
        "SELECT p.proname, n.nspname, p.provolatile, p.oid::regprocedure::text,"
        " EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass"
        "         AND d.objid = p.oid AND d.deptype = 'e')"
        " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.proname = ANY(%s)",
        names,
    )
    volatile = sorted({sig for name, _, vol, sig, _ in rows if vol == "v" and name not in PG_VOLATILE_OK})
    from_extension = sorted(sig for _, _, _, sig, ext in rows if ext)
    other_schema = sorted(f"{nsp}.{sig}" for _, nsp, _, sig, _ in rows if nsp != "pg_catalog")
    assert volatile == []
    assert from_extension == []
    assert other_schema == []
    # the exceptions are still needed (and still volatile)
    assert {name for name, _, vol, _, _ in rows if vol == "v"} == PG_VOLATILE_OK


@pytest.mark.services
def test_lineage_knows_every_allowlisted_set_returning_function(pg_customer_db) -> None:
    """Lineage treats an allowlisted function as scalar unless it lists it
    as set-returning; a set-returning one it missed would let the number of
    result rows carry a value unseen."""
    from governance.pii.lineage import _PURE_TABLE_FUNCTIONS

    returning_sets = {
        row[0]
        for row in _pg_rows(
            pg_customer_db,
            "SELECT DISTINCT p.proname FROM pg_proc p WHERE p.proretset AND p.proname = ANY(%s)",
            sorted(allowed_functions("postgres")),
        )
    }
    assert "generate_series" in returning_sets
    assert sorted(returning_sets - _PURE_TABLE_FUNCTIONS) == []


@pytest.mark.services
def test_postgres_extension_functions_are_never_allowlisted(pg_customer_db) -> None:
    extension_functions = {
        row[0]
        for row in _pg_rows(
            pg_customer_db,
            "SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass"
            " AND d.objid = p.oid AND d.deptype = 'e'",
        )
    }
    assert {"heap_force_kill", "pg_truncate_visibility_map", "crosstab", "xpath_table", "dblink"} <= (
        extension_functions
    )
    assert extension_functions.isdisjoint(allowed_functions("postgres"))


def test_sqlite_allowlist_entries_are_sqlite_functions() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        functions = {row[0] for row in conn.execute("SELECT name FROM pragma_function_list")}
        modules = {row[0] for row in conn.execute("SELECT name FROM pragma_module_list")}
    finally:
        conn.close()
    syntax_only = {"cast"}
    table_valued = {"json_each", "json_tree"}
    assert table_valued <= modules
    assert sorted(allowed_functions("sqlite") - functions - syntax_only - table_valued) == []


@pytest.mark.services
def test_mysql_allowlist_entries_are_callable_builtins(mysql_customer_db) -> None:
    import pymysql

    from tests.support.customer_dbs import MYSQL_HOST, MYSQL_PORT

    database = mysql_customer_db.dsn.rsplit("/", 1)[1]
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=database, autocommit=True)
    missing = []
    try:
        with conn.cursor() as cursor:
            for name in sorted(allowed_functions("mysql")):
                if name in MYSQL_NOT_CALLABLE_WITH_NULLS:
                    candidates = [MYSQL_NOT_CALLABLE_WITH_NULLS[name]]
                else:
                    candidates = [f"{name}({', '.join(['NULL'] * n)})" for n in range(5)]
                errors = []
                for expression in candidates:
                    try:
                        cursor.execute(f"SELECT {expression}")
                        cursor.fetchall()
                        break
                    except pymysql.err.MySQLError as exc:  # wrong argument count, or no such function
                        errors.append(str(exc)[:100])
                else:
                    missing.append((name, errors[-1]))
    finally:
        conn.close()
    assert missing == []
