"""What real analytics write is allowed, and runs; what only looks like it is
not (issue 19, item 7).

Each allowed statement passes the guard and then runs on the real server
(PostgreSQL through the binder). Refusals name what was refused.
"""

from __future__ import annotations

import sqlite3

import pytest

from governance.sql.dialects import lambda_free, parse_sql, sql_dialect
from governance.sql.execute import execute_readonly
from governance.sql.functions import allowed_functions, allowed_settings
from governance.sql.guard import analyse_sql

PG, MY, LITE = "postgres", "mysql", "sqlite"

ALLOWED: list[tuple[str, str]] = [
    (PG, "SELECT count(*) FROM orders TABLESAMPLE SYSTEM (100)"),
    (PG, "SELECT count(*) FROM orders TABLESAMPLE BERNOULLI (50) REPEATABLE (42)"),
    (PG, "SELECT (DATE '2024-01-01', DATE '2024-02-01') OVERLAPS (DATE '2024-01-15', DATE '2024-03-01')"),
    (PG, "SELECT int4range(1, 5) @> 3, numrange(1.0, 2.5), daterange('2024-01-01', '2024-02-01', '[]')"),
    (PG, "SELECT tstzrange(now() - interval '1 day', now()), int8range(1, 10) && int8range(5, 20)"),
    (PG, "SELECT lower(int4range(1, 5)), upper(int4range(1, 5)), isempty(int4range(1, 1)), lower_inc(int4range(1, 5))"),
    (PG, "SELECT int4multirange(int4range(1, 3), int4range(5, 7)), range_merge(int4range(1, 2), int4range(5, 6))"),
    (PG, "SELECT id FROM orders ORDER BY id FETCH FIRST (SELECT 2) ROWS ONLY"),
    (PG, "SELECT id FROM orders ORDER BY id OFFSET 1 ROWS FETCH NEXT 1 ROWS ONLY"),
    (PG, "SELECT pg_size_pretty(sum(pg_column_size(note))::bigint) FROM orders"),
    (PG, "SELECT pg_size_pretty(10485760::bigint)"),
    (PG, "SELECT current_setting('TimeZone'), current_setting('server_version_num')"),
    (PG, "SELECT current_setting('DateStyle', true), current_setting('transaction_read_only')"),
    (PG, "SELECT xmlelement(name customer, xmlforest(id, city)) FROM customers"),
    (PG, "SELECT xmlagg(xmlelement(name c, city)) FROM customers"),
    (PG, "SELECT xmlconcat(xmlelement(name a), xmlelement(name b))"),
    (PG, "SELECT coalesce((j -> 'a'), (j -> 'b')) FROM (SELECT '{\"b\": 1}'::jsonb AS j) s"),
    (PG, "SELECT lower((j ->> 'a')) FROM (SELECT '{\"a\": \"X\"}'::jsonb AS j) s"),
    (MY, "SELECT id FROM orders USE INDEX (PRIMARY) WHERE id > 1"),
    (MY, "SELECT id FROM orders FORCE INDEX (PRIMARY) ORDER BY id"),
    (MY, "SELECT id FROM orders IGNORE INDEX (PRIMARY) WHERE amount > 0"),
    (MY, "SELECT o.id FROM orders AS o USE KEY (PRIMARY) JOIN customers c ON c.id = o.customer_id"),
    (LITE, "SELECT * FROM pragma_database_list"),
    (LITE, "SELECT name FROM pragma_function_list WHERE name = 'lower'"),
    (LITE, "SELECT coalesce((j -> '$.a'), 'none') FROM (SELECT '{\"a\": 1}' AS j) AS s"),
]


# MySQL 8 has the arrows, MariaDB has not: checked by the guard only.
GUARD_ONLY = [(MY, "SELECT COALESCE((j ->> '$.a'), 'none') FROM (SELECT '{\"a\": \"x\"}' AS j) s")]


@pytest.mark.parametrize(
    ("dialect", "sql"), ALLOWED + GUARD_ONLY, ids=[f"{d}-{s[:60]}" for d, s in ALLOWED + GUARD_ONLY]
)
def test_safe_analytics_pass_the_guard(dialect: str, sql: str) -> None:
    verdict = analyse_sql(sql, dialect)
    assert verdict.allowed, verdict.reason


def _run_all(db, dialect: str) -> list[tuple[str, str]]:
    failures = []
    for case_dialect, sql in ALLOWED:
        if case_dialect == dialect:
            try:
                execute_readonly(engine=db.engine, dsn=db.dsn, sql=sql, row_cap=20, timeout_ms=5000)
            except Exception as exc:  # noqa: BLE001 - every failure is reported
                failures.append((sql, str(exc)[:160]))
    return failures


@pytest.mark.services
def test_safe_analytics_run_on_postgres(pg_customer_db) -> None:
    assert _run_all(pg_customer_db, PG) == []


@pytest.mark.services
def test_safe_analytics_run_on_mariadb(mysql_customer_db) -> None:
    assert _run_all(mysql_customer_db, MY) == []


def test_safe_analytics_run_on_sqlite(sqlite_customer_db) -> None:
    assert _run_all(sqlite_customer_db, LITE) == []


@pytest.mark.services
def test_readable_settings_exist_and_are_readable_by_a_plain_reader(pg_customer_db) -> None:
    sql = "SELECT " + ", ".join(f"current_setting('{name}')" for name in sorted(allowed_settings()))
    assert analyse_sql(sql, PG).allowed
    rows = execute_readonly(engine="postgresql", dsn=pg_customer_db.dsn, sql=sql, row_cap=1, timeout_ms=5000).rows
    assert len(rows[0]) == len(allowed_settings())


REFUSED: list[tuple[str, str, str]] = [
    (PG, "SELECT count(*) FROM orders TABLESAMPLE SYSTEM_ROWS (5)", "sampling method not allowed: system_rows"),
    (PG, "SELECT count(*) FROM orders TABLESAMPLE SYSTEM_TIME (5)", "sampling method not allowed: system_time"),
    (LITE, "SELECT * FROM orders TABLESAMPLE SYSTEM (5)", "sampling method not allowed"),
    (PG, "SELECT current_setting('data_directory')", "setting not readable: data_directory"),
    (PG, "SELECT current_setting('config_file')", "setting not readable: config_file"),
    (PG, "SELECT current_setting('ssl_key_file')", "setting not readable"),
    (PG, "SELECT current_setting('shared_preload_libraries')", "setting not readable"),
    (PG, "SELECT current_setting(name) FROM (SELECT 'timezone' AS name) s", "setting not readable"),
    (PG, "SELECT current_setting('TimeZone', 'x')", "setting not readable"),
    (PG, "SELECT set_config('TimeZone', 'UTC', false)", "set_config"),
    (PG, "SELECT pg_relation_size('customers')", "pg_relation_size"),
    (PG, "SELECT pg_database_size(current_database())", "pg_database_size"),
    (PG, "SELECT pg_catalog.pg_lock_status()", "pg_lock_status"),
    (PG, "SELECT pg_advisory_lock(1)", "pg_advisory_lock"),
    (PG, "SELECT query_to_xml('SELECT 1', true, true, '')", "query_to_xml"),
    (PG, "SELECT xmlelement(name x, pg_read_file('/etc/passwd'))", "pg_read_file"),
    (PG, "SELECT system(1)", "system"),
    (MY, "SELECT index(1)", "index"),
    (LITE, "SELECT * FROM pragma_optimize", "PRAGMA (pragma_optimize)"),
    (LITE, "SELECT * FROM PRAGMA_OPTIMIZE", "PRAGMA (pragma_optimize)"),
    (LITE, 'SELECT * FROM "pragma_journal_mode"', "PRAGMA (pragma_journal_mode)"),
    (LITE, "SELECT * FROM main.pragma_wal_checkpoint", "PRAGMA (pragma_wal_checkpoint)"),
    (LITE, "SELECT * FROM pragma_incremental_vacuum", "PRAGMA (pragma_incremental_vacuum)"),
    (LITE, "SELECT * FROM pragma_shrink_memory", "PRAGMA (pragma_shrink_memory)"),
    (LITE, "SELECT * FROM pragma_analysis_limit", "PRAGMA (pragma_analysis_limit)"),
    (LITE, "SELECT * FROM pragma_optimize('0x10002')", "pragma_optimize"),
    (LITE, "SELECT * FROM pragma_journal_mode('delete')", "pragma_journal_mode"),
    (LITE, "SELECT * FROM pragma_table_info('customers')", "pragma_table_info"),
]


@pytest.mark.parametrize(("dialect", "sql", "reason"), REFUSED, ids=[f"{d}-{s[:60]}" for d, s, _ in REFUSED])
def test_look_alikes_are_refused_by_the_guard(dialect: str, sql: str, reason: str) -> None:
    verdict = analyse_sql(sql, dialect)
    assert not verdict.allowed
    assert reason in verdict.reason


def test_the_refused_pragma_tables_are_real(tmp_path) -> None:
    # Read as a table, a pragma runs: optimize may ANALYZE (writing
    # sqlite_stat1), journal_mode / analysis_limit belong to the session.
    conn = sqlite3.connect(tmp_path / "p.sqlite3")
    try:
        conn.execute("CREATE TABLE t (x)")
        assert conn.execute("SELECT * FROM pragma_optimize").fetchall() == []
        assert conn.execute("SELECT * FROM pragma_journal_mode").fetchall() == [("delete",)]
        assert conn.execute("SELECT * FROM pragma_analysis_limit").fetchall() == [(0,)]
    finally:
        conn.close()


# --- the JSON arrow as a function's argument -------------------------------


@pytest.mark.parametrize("dialect", [PG, MY, LITE])
def test_an_arrow_argument_parses_as_the_arrow_with_the_fix(dialect: str) -> None:
    from sqlglot import exp

    raw = sql_dialect(dialect).parse("SELECT COALESCE(j -> 'a', j -> 'b') FROM t")[0]
    fixed = parse_sql(dialect, "SELECT COALESCE(j -> 'a', j -> 'b') FROM t")[0]
    assert raw.find(exp.Lambda) is not None  # what sqlglot reads (not the servers)
    assert fixed.find(exp.Lambda) is None
    assert [c.name for c in fixed.find_all(exp.Column)] == ["j", "j"]


def test_an_arrow_chain_argument_stays_left_associative() -> None:
    from sqlglot import exp

    tree = parse_sql(PG, "SELECT lower(j -> 'a' ->> 'b') FROM t")[0]
    outer = tree.find(exp.JSONExtractScalar)
    assert isinstance(outer.this.unnest(), exp.JSONExtract)  # (j -> 'a') ->> 'b'


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT j -> 'a', j -> 'b' FROM t",  # a select list is no call
        "SELECT ((j -> 'a')) FROM t",
        "SELECT lower(name) FROM t",
    ],
)
def test_the_arrow_fix_leaves_other_statements_alone(sql: str) -> None:
    tokens = sql_dialect(PG).tokenize(sql)
    assert lambda_free(tokens) is tokens


@pytest.mark.parametrize("dialect", [PG, MY, LITE])
def test_an_unparenthesised_arrow_argument_is_allowed_and_lineage_reads_the_same_tree(dialect: str) -> None:
    """With the fix in every reader (guard, binder, lineage, re-identification),
    `f(x -> 'a')` is the arrow everywhere: allowed, and the column behind it is
    seen by lineage (masked as personal data), never a lambda whose column
    lineage would miss."""
    from governance.pii.lineage import classify_outputs

    sql = "SELECT COALESCE(profile -> 'a', '1') FROM customers"
    assert analyse_sql(sql, dialect).allowed
    schema = {"customers": {"id": None, "profile": "phone"}}
    (output,) = classify_outputs(sql, dialect, schema, 1)
    assert output.pii_kind == "phone"


def test_a_real_lambda_stays_denied() -> None:
    assert not analyse_sql("SELECT transform(a, x -> x + 1) FROM t", PG).allowed
    assert not analyse_sql("SELECT lower((x) -> 1) FROM t", PG).allowed


# --- MySQL / MariaDB: every listed name is the server's own -----------------


@pytest.mark.services
def test_every_mysql_listed_name_is_a_builtin_even_next_to_a_stored_function(mysql_customer_db) -> None:
    """A stored function with a listed name, in the connection's database,
    is not what an unqualified call reaches: for every name the built-in
    answers (a stored function named like a non-native function would be
    called instead, with the wrong number of arguments here)."""
    import uuid

    import pymysql

    from tests.support.customer_dbs import MYSQL_HOST, MYSQL_PORT
    from tests.test_sql_allowlist import MYSQL_NOT_CALLABLE_WITH_NULLS

    database = f"owlai_udf_{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", autocommit=True)
    reached_stored = []
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{database}`")
            cursor.execute(f"USE `{database}`")
            names = sorted(allowed_functions(MY))
            for name in names:
                params = ", ".join(f"p{i} INT" for i in range(7))
                cursor.execute(f"CREATE FUNCTION `{name}`({params}) RETURNS INT DETERMINISTIC RETURN 424242")
            for name in names:
                if name in MYSQL_NOT_CALLABLE_WITH_NULLS:
                    candidates = [MYSQL_NOT_CALLABLE_WITH_NULLS[name]]
                else:
                    candidates = [f"{name}({', '.join(['NULL'] * n)})" for n in range(5)]
                answered = False
                for expression in candidates:
                    try:
                        cursor.execute(f"SELECT {expression}")
                        rows = cursor.fetchall()
                    except pymysql.err.MySQLError:
                        continue
                    answered = rows != ((424242,),)
                    break
                if not answered:
                    reached_stored.append(name)
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
        conn.close()
    assert reached_stored == []


def test_qualified_calls_reach_no_stored_function() -> None:
    # MySQL runs db.f() as the stored function f, whatever its name.
    for sql in ("SELECT shop.lower('x')", "SELECT `shop`.`upper`('x')", "SELECT shop.f()"):
        verdict = analyse_sql(sql, MY)
        assert not verdict.allowed and "function not allowed" in verdict.reason
