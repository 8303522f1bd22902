"""Adversarial suite for the read-only SQL guard: the model is assumed to try
every trick. Each attack must be refused with the function, operator or
relation named in the reason, the way the executor refuses it (the guard's
verdict, then the table grants of a WHOLE-DATABASE grant: catalogs are not
data). Realistic analytics queries must stay allowed, and run on the real
servers.

Attacks that would change data are also run with the guard bypassed, through
the execution layer with the fixture's SELECT-only account: the database
must refuse them too, and nothing may change (defence in depth).
"""

from __future__ import annotations

import contextlib
import re

import pytest

from governance.sql.execute import QueryError, execute_readonly
from governance.sql.guard import analyse_sql
from governance.sql.table_access import GrantScope, tables_not_granted

PG, MY, LITE = "postgres", "mysql", "sqlite"


def refusal(sql: str, dialect: str) -> str | None:
    """What the executor would refuse the query with under a whole-database
    grant on the default schemas, or None when it would run it."""
    verdict = analyse_sql(sql, dialect)
    if not verdict.allowed:
        return f"not a read-only query: {verdict.reason}"
    missing = tables_not_granted(verdict.tables, GrantScope.merge([(True, [])], dialect), dialect)
    if missing:
        return f"no permission to read table(s): {', '.join(missing)}"
    return None


# (dialect, sql, name that must appear in the reason)
FUNCTION_ATTACKS: list[tuple[str, str, str]] = [
    # --- PostgreSQL extension functions that change data in a read-only transaction
    (PG, "SELECT heap_force_kill('customers'::regclass, ARRAY['(0,1)']::tid[])", "heap_force_kill"),
    (PG, "SELECT heap_force_freeze('customers'::regclass, ARRAY['(0,1)']::tid[])", "heap_force_freeze"),
    (PG, "SELECT pg_truncate_visibility_map('customers'::regclass)", "pg_truncate_visibility_map"),
    (PG, "SELECT * FROM pg_visibility_map('customers')", "pg_visibility_map"),
    (PG, "SELECT * FROM pg_check_frozen('customers')", "pg_check_frozen"),
    (PG, "SELECT * FROM pg_buffercache_pages() AS p(a int)", "pg_buffercache_pages"),
    (PG, "SELECT pg_prewarm('customers')", "pg_prewarm"),
    (PG, "SELECT autoprewarm_dump_now()", "autoprewarm_dump_now"),
    (PG, "SELECT get_raw_page('customers', 0)", "get_raw_page"),
    (PG, "SELECT * FROM heap_page_items(get_raw_page('customers', 0))", "heap_page_items"),
    (PG, "SELECT * FROM pgstattuple('customers')", "pgstattuple"),
    (PG, "SELECT * FROM pgrowlocks('customers')", "pgrowlocks"),
    (PG, "SELECT bt_index_check('customers_pkey')", "bt_index_check"),
    (PG, "SELECT pg_freespace('customers', 0)", "pg_freespace"),
    (PG, "SELECT pg_stat_statements_reset()", "pg_stat_statements_reset"),
    (PG, "SELECT hstore('a', 'b')", "hstore"),
    (PG, "SELECT nlevel('a.b'::ltree)", "nlevel"),
    # --- functions that run SQL given as text (read tables never granted)
    (PG, "SELECT ts_rewrite('a'::tsquery, 'SELECT q, r FROM secrets')", "ts_rewrite"),
    (PG, "SELECT * FROM ts_stat('SELECT to_tsvector(memo) FROM secrets')", "ts_stat"),
    (PG, "SELECT * FROM crosstab('SELECT a, b, c FROM secrets') AS ct(a text, b text)", "crosstab"),
    (PG, "SELECT * FROM connectby('secrets', 'id', 'parent', '1', 0) AS t(id int, p int, l int)", "connectby"),
    (PG, "SELECT * FROM xpath_table('id', 'doc', 'secrets', '/a', 'true') AS t(id int, a text)", "xpath_table"),
    (PG, "SELECT query_to_xml('SELECT * FROM secrets', true, false, '')", "query_to_xml"),
    (PG, "SELECT query_to_xmlschema('SELECT * FROM secrets', true, false, '')", "query_to_xmlschema"),
    (PG, "SELECT table_to_xml('secrets', true, false, '')", "table_to_xml"),
    (PG, "SELECT * FROM dblink('dbname=x', 'SELECT secret FROM secrets') AS t(s text)", "dblink"),
    (PG, "SELECT dblink_exec('dbname=x', 'DELETE FROM customers')", "dblink_exec"),
    # --- server files and configuration
    (PG, "SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
    (PG, "SELECT pg_read_binary_file('postgresql.conf')", "pg_read_binary_file"),
    (PG, "SELECT * FROM pg_ls_dir('.')", "pg_ls_dir"),
    (PG, "SELECT * FROM pg_stat_file('postgresql.conf')", "pg_stat_file"),
    (PG, "SELECT * FROM pg_hba_file_rules()", "pg_hba_file_rules"),
    (PG, "SELECT * FROM pg_show_all_file_settings()", "pg_show_all_file_settings"),
    (PG, "SELECT * FROM pg_show_all_settings()", "pg_show_all_settings"),
    (PG, "SELECT current_setting('data_directory')", "setting not readable: data_directory"),
    (PG, "SELECT current_setting('archive_command')", "setting not readable: archive_command"),
    (PG, "SELECT current_setting(lower('TIMEZONE'))", "setting not readable: (not a literal)"),
    (PG, "SELECT current_setting('TimeZone' || '')", "setting not readable"),
    (PG, "SELECT version()", "version"),
    (PG, "SELECT pg_file_write('x', 'y', false)", "pg_file_write"),
    (PG, "SELECT lo_import('/etc/passwd')", "lo_import"),
    # --- session settings, spelled every way
    (PG, "SELECT set_config('default_transaction_read_only', 'off', false)", "set_config"),
    (PG, "SELECT pg_catalog.set_config('search_path', 'evil', false)", "set_config"),
    (PG, "SELECT \"set_config\"('search_path', 'evil', false)", "set_config"),
    (PG, "SELECT \"pg_catalog\".\"set_config\"('search_path', 'evil', false)", "set_config"),
    (PG, "SELECT PG_CATALOG.SET_CONFIG('search_path', 'evil', false)", "set_config"),
    (PG, "SELECT SeT_CoNfIg('search_path', 'evil', false)", "set_config"),
    (PG, "SELECT 1 FROM customers WHERE set_config('a.b', name, true) IS NOT NULL", "set_config"),
    (PG, "SELECT setseed(0.5)", "setseed"),
    # --- locks, sleeps, sequences, signals
    (PG, "SELECT pg_advisory_lock(1)", "pg_advisory_lock"),
    (PG, "SELECT pg_try_advisory_xact_lock(1)", "pg_try_advisory_xact_lock"),
    (PG, "SELECT pg_sleep(10)", "pg_sleep"),
    (PG, "SELECT * FROM customers ORDER BY pg_sleep_for('1 minute')", "pg_sleep_for"),
    (PG, "SELECT nextval('orders_id_seq')", "nextval"),
    (PG, "SELECT setval('orders_id_seq', 1)", "setval"),
    (PG, "SELECT pg_terminate_backend(1)", "pg_terminate_backend"),
    (PG, "SELECT txid_current()", "txid_current"),
    # --- user-defined functions and qualified builtins
    (PG, "SELECT public.evil_fn()", "function not allowed: evil_fn"),
    (PG, "SELECT public.lower('X')", "public.lower"),
    (PG, "SELECT * FROM public.generate_series(1, 3)", "public.generate_series"),
    (PG, "SELECT \"LOWER\"('x')", "LOWER"),
    (PG, "SELECT len('x')", "len"),  # sqlglot reads it as LENGTH; the server would call len
    # a builder that hands back its only argument must not hide the inner call
    (PG, "SELECT coalesce(pg_read_file('/etc/passwd'))", "pg_read_file"),
    (PG, "SELECT least(set_config('search_path', 'evil', false))", "set_config"),
    (MY, "SELECT IFNULL(SLEEP(1), 1)", "sleep"),
    (LITE, "SELECT coalesce(load_extension('x'))", "load_extension"),
    # --- unknown operators
    # pg_catalog's standard operators are the binder's own form; others are not
    (PG, "SELECT 1 OPERATOR(pg_catalog.<->) 1", "OPERATOR(pg_catalog.<->)"),
    (PG, "SELECT 1 OPERATOR(pg_catalog.+) 1 OPERATOR(public.+) 1", "OPERATOR(public.+)"),
    (PG, "SELECT id OPERATOR(public.===) 1 FROM customers", "OPERATOR(public.===)"),
    (PG, "SELECT point(1, 2) <-> point(3, 4)", "operator not allowed: distance"),
    (PG, "SELECT a <-> b FROM t", "distance"),
    # --- MySQL / MariaDB
    (MY, "SELECT SLEEP(10)", "sleep"),
    (MY, "SELECT `sleep`(10)", "sleep"),
    (MY, "SELECT sLeEp(10)", "sleep"),
    (MY, "SELECT BENCHMARK(100000000, MD5('a'))", "benchmark"),
    (MY, "SELECT GET_LOCK('x', 10)", "get_lock"),
    (MY, "SELECT RELEASE_ALL_LOCKS()", "release_all_locks"),
    (MY, "SELECT IS_USED_LOCK('x')", "is_used_lock"),
    (MY, "SELECT LOAD_FILE('/etc/passwd')", "load_file"),
    (MY, "SELECT MASTER_POS_WAIT('log', 4)", "master_pos_wait"),
    (MY, "SELECT MASTER_GTID_WAIT('0-1-1', 10)", "master_gtid_wait"),
    (MY, "SELECT NEXTVAL(s)", "nextval"),
    (MY, "SELECT SETVAL(s, 1)", "setval"),
    (MY, "SELECT LAST_INSERT_ID(5)", "last_insert_id"),
    (MY, "SELECT VERSION()", "version"),
    (MY, "SELECT DATABASE()", "database"),
    (MY, "SELECT USER()", "user"),
    (MY, "SELECT sys_exec('id')", "sys_exec"),
    (MY, "SELECT EXTRACTVALUE(1, CONCAT(0x7e, (SELECT name FROM customers LIMIT 1)))", "extractvalue"),
    (MY, "SELECT UPDATEXML(1, CONCAT(0x7e, USER()), 1)", "updatexml"),
    (MY, "SELECT shop.evil_fn(1)", "function not allowed: evil_fn"),
    (MY, "SELECT shop.lower(name) FROM customers", "shop.lower"),
    (MY, "SELECT name FROM customers WHERE id = 1 AND SLEEP(5) = 0", "sleep"),
    (MY, "SELECT @@datadir", "variable"),
    (MY, "SELECT @@GLOBAL.secure_file_priv", "variable"),
    # --- SQLite
    (LITE, "SELECT load_extension('/tmp/evil.so')", "load_extension"),
    (LITE, "SELECT \"load_extension\"('/tmp/evil.so')", "load_extension"),
    (LITE, "SELECT [LOAD_EXTENSION]('/tmp/evil.so')", "load_extension"),
    (LITE, "SELECT readfile('/etc/passwd')", "readfile"),
    (LITE, "SELECT writefile('/tmp/x', 'data')", "writefile"),
    (LITE, "SELECT fts3_tokenizer('simple')", "fts3_tokenizer"),
    (LITE, "SELECT * FROM pragma_optimize()", "pragma_optimize"),
    (LITE, "SELECT * FROM pragma_wal_checkpoint('TRUNCATE')", "pragma_wal_checkpoint"),
    (LITE, "SELECT * FROM pragma_incremental_vacuum(100)", "pragma_incremental_vacuum"),
    (LITE, "SELECT * FROM pragma_table_info('customers')", "pragma_table_info"),
    (LITE, "SELECT * FROM PRAGMA_INDEX_LIST('customers')", "pragma_index_list"),
    (LITE, "SELECT * FROM main.pragma_table_info('customers')", "pragma_table_info"),
    (LITE, "SELECT randomblob(1000000000)", "randomblob"),
    (LITE, "SELECT zeroblob(1000000000)", "zeroblob"),
    (LITE, "SELECT sqlite_version()", "sqlite_version"),
    (LITE, "SELECT sqlite_compileoption_get(0)", "sqlite_compileoption_get"),
    (LITE, "SELECT changes(), total_changes()", "changes"),
    (LITE, "SELECT last_insert_rowid()", "last_insert_rowid"),
    (LITE, "SELECT main.lower(name) FROM customers", "main.lower"),
]

# (dialect, sql, relation that must be named in the refusal)
RELATION_ATTACKS: list[tuple[str, str, str]] = [
    # --- PostgreSQL statistics catalogs expose column values
    (PG, "SELECT most_common_vals FROM pg_stats WHERE tablename = 'customers'", "pg_stats"),
    (PG, "SELECT histogram_bounds FROM pg_catalog.pg_stats", "pg_catalog.pg_stats"),
    (PG, 'SELECT * FROM "pg_stats"', "pg_stats"),
    (PG, "SELECT * FROM PG_CATALOG.PG_STATS", "pg_catalog.pg_stats"),
    (PG, "SELECT * FROM pg_statistic", "pg_statistic"),
    (PG, "SELECT * FROM pg_stats_ext", "pg_stats_ext"),
    # --- activity views expose other users' statements
    (PG, "SELECT query FROM pg_stat_activity", "pg_stat_activity"),
    (PG, "SELECT query FROM pg_stat_statements", "pg_stat_statements"),
    (PG, "SELECT query FROM public.pg_stat_statements", "public.pg_stat_statements"),
    (PG, "SELECT * FROM pg_catalog.pg_stat_activity a JOIN customers c ON true", "pg_catalog.pg_stat_activity"),
    (PG, "SELECT * FROM pg_buffercache", "pg_buffercache"),
    # --- configuration, roles, catalogs
    (PG, "SELECT * FROM pg_hba_file_rules", "pg_hba_file_rules"),
    (PG, "SELECT * FROM pg_file_settings", "pg_file_settings"),
    (PG, "SELECT * FROM pg_settings", "pg_settings"),
    (PG, "SELECT rolpassword FROM pg_authid", "pg_authid"),
    (PG, "SELECT * FROM pg_shadow", "pg_shadow"),
    (PG, "SELECT relname FROM pg_class", "pg_class"),
    (PG, "SELECT * FROM information_schema.columns", "information_schema.columns"),
    (PG, "SELECT * FROM INFORMATION_SCHEMA.TABLES", "information_schema.tables"),
    (PG, "SELECT * FROM pg_toast.pg_toast_2619", "pg_toast.pg_toast_2619"),
    (PG, "SELECT * FROM pg_temp.scratch", "pg_temp.scratch"),
    (PG, "WITH s AS (SELECT * FROM pg_stats) SELECT * FROM s", "pg_stats"),
    (PG, "SELECT (SELECT max(query) FROM pg_stat_activity) FROM customers", "pg_stat_activity"),
    # --- MySQL / MariaDB
    (MY, "SELECT * FROM mysql.innodb_index_stats", "mysql.innodb_index_stats"),
    (MY, "SELECT * FROM mysql.innodb_table_stats", "mysql.innodb_table_stats"),
    (MY, "SELECT * FROM mysql.user", "mysql.user"),
    (MY, "SELECT * FROM information_schema.COLUMN_STATISTICS", "information_schema.column_statistics"),
    (MY, "SELECT info FROM information_schema.PROCESSLIST", "information_schema.processlist"),
    (MY, "SELECT info FROM `INFORMATION_SCHEMA`.`processlist`", "information_schema.processlist"),
    (MY, "SELECT * FROM performance_schema.events_statements_current", "events_statements_current"),
    (MY, "SELECT * FROM performance_schema.events_statements_history_long", "events_statements_history_long"),
    (MY, "SELECT * FROM sys.processlist", "sys.processlist"),
    (MY, "SELECT * FROM sys.statement_analysis", "sys.statement_analysis"),
    (MY, "SELECT * FROM otherdb.customers", "otherdb.customers"),
    # --- SQLite
    (LITE, "SELECT sql FROM sqlite_master", "sqlite_master"),
    (LITE, "SELECT sql FROM sqlite_schema", "sqlite_schema"),
    (LITE, "SELECT * FROM main.sqlite_master", "main.sqlite_master"),
    (LITE, "SELECT * FROM SQLITE_TEMP_MASTER", "sqlite_temp_master"),
    (LITE, "SELECT * FROM sqlite_sequence", "sqlite_sequence"),
    (LITE, "SELECT stat FROM sqlite_stat1", "sqlite_stat1"),
    (LITE, "SELECT * FROM sqlite_stat4", "sqlite_stat4"),
    (LITE, 'SELECT * FROM "sqlite_stat1"', "sqlite_stat1"),
    (LITE, "SELECT * FROM temp.scratch", "temp.scratch"),
    (LITE, "SELECT * FROM other.customers", "other.customers"),
    (LITE, "SELECT * FROM pragma_database_list", "pragma_database_list"),
    (LITE, "SELECT * FROM dbstat", "dbstat"),
]


def _id(case: tuple[str, str, str]) -> str:
    text = re.sub(r"\s+", " ", case[1])
    return f"{case[0]}-{text[:70]}"


def test_the_suite_is_big_enough_and_covers_every_dialect() -> None:
    assert len(FUNCTION_ATTACKS) + len(RELATION_ATTACKS) >= 70
    for cases in (FUNCTION_ATTACKS, RELATION_ATTACKS, ALLOWED):
        assert {dialect for dialect, *_ in cases} == {PG, MY, LITE}
    for dialect in (PG, MY, LITE):
        assert len([case for case in ALLOWED if case[0] == dialect]) >= 30


@pytest.mark.parametrize("case", FUNCTION_ATTACKS, ids=_id)
def test_function_attack_is_refused_by_the_guard(case: tuple[str, str, str]) -> None:
    dialect, sql, name = case
    verdict = analyse_sql(sql, dialect)
    assert verdict.allowed is False, verdict
    assert name in verdict.reason, verdict


@pytest.mark.parametrize("case", RELATION_ATTACKS, ids=_id)
def test_catalog_attack_is_refused_under_a_whole_database_grant(case: tuple[str, str, str]) -> None:
    dialect, sql, relation = case
    reason = refusal(sql, dialect)
    assert reason is not None
    assert relation in reason


@pytest.mark.parametrize("case", RELATION_ATTACKS, ids=_id)
def test_catalog_is_readable_with_a_grant_that_names_it(case: tuple[str, str, str]) -> None:
    dialect, sql, _ = case
    verdict = analyse_sql(sql, dialect)
    assert verdict.allowed, verdict
    scope = GrantScope.merge([(True, list(verdict.tables))], dialect)
    assert tables_not_granted(verdict.tables, scope, dialect) == []


# --------------------------------------------------------------------------
# Defence in depth: with the guard bypassed the database refuses too
# --------------------------------------------------------------------------

# (sql, must the server raise?) Functions the SELECT-only login may execute
# (pg_prewarm, advisory locks, ...) run, but change no data.
PG_BYPASS = [
    ("SELECT heap_force_kill('customers'::regclass, ARRAY['(0,1)']::tid[])", True),
    ("SELECT heap_force_freeze('customers'::regclass, ARRAY['(0,1)']::tid[])", True),
    ("SELECT pg_truncate_visibility_map('customers'::regclass)", True),
    ("SELECT * FROM crosstab('DELETE FROM customers RETURNING id::text, name, email') AS t(a text, b text)", True),
    ("SELECT query_to_xml('DELETE FROM orders RETURNING *', true, false, '')", True),
    ("SELECT dblink_exec('dbname=postgres', 'DELETE FROM customers')", True),
    ("SELECT pg_file_write('owlai-test', 'x', false)", True),
    ("SELECT lo_import('/etc/passwd')", True),
    ("SELECT set_config('default_transaction_read_only', 'off', false), count(*) FROM customers", False),
    ("SELECT pg_prewarm('customers')", False),
    ("SELECT pg_advisory_xact_lock(42)", False),
]
MYSQL_BYPASS = [
    ("SELECT GET_LOCK('owlai-test', 0), RELEASE_ALL_LOCKS()", False),
    ("SELECT BENCHMARK(10, MD5('a'))", False),
    ("SELECT LOAD_FILE('/etc/passwd')", False),  # NULL without the FILE privilege
]
SQLITE_BYPASS = [
    ("SELECT * FROM pragma_optimize()", False),  # runs, but the handle is read-only
    ("SELECT load_extension('/nonexistent/evil')", True),
    ("SELECT * FROM pragma_wal_checkpoint('TRUNCATE')", True),
]


def _assert_denied_and_harmless(db, dialect: str, sql: str, must_raise: bool) -> None:
    assert analyse_sql(sql, dialect).allowed is False
    before = db.fingerprint()
    run = {"engine": db.engine, "dsn": db.dsn, "sql": sql, "row_cap": 10, "timeout_ms": 5000}
    if must_raise:
        with pytest.raises(QueryError):
            execute_readonly(**run)
    else:
        with contextlib.suppress(QueryError):
            execute_readonly(**run)
    assert db.fingerprint() == before


@pytest.mark.services
@pytest.mark.parametrize(("sql", "must_raise"), PG_BYPASS, ids=[s[:60] for s, _ in PG_BYPASS])
def test_postgres_attack_with_guard_bypassed_changes_nothing(pg_customer_db, sql: str, must_raise: bool) -> None:
    _assert_denied_and_harmless(pg_customer_db, PG, sql, must_raise)


@pytest.mark.services
@pytest.mark.parametrize(("sql", "must_raise"), MYSQL_BYPASS, ids=[s[:60] for s, _ in MYSQL_BYPASS])
def test_mysql_attack_with_guard_bypassed_changes_nothing(mysql_customer_db, sql: str, must_raise: bool) -> None:
    _assert_denied_and_harmless(mysql_customer_db, MY, sql, must_raise)


@pytest.mark.parametrize(("sql", "must_raise"), SQLITE_BYPASS, ids=[s[:60] for s, _ in SQLITE_BYPASS])
def test_sqlite_attack_with_guard_bypassed_changes_nothing(sqlite_customer_db, sql: str, must_raise: bool) -> None:
    _assert_denied_and_harmless(sqlite_customer_db, LITE, sql, must_raise)


# --------------------------------------------------------------------------
# Realistic analytics must stay allowed, and run, on the fixture tables:
# customers(id, name, phone, email, city), orders(id, customer_id, amount,
# note), notes(id, memo).
# --------------------------------------------------------------------------

ALLOWED: list[tuple[str, str]] = [
    (
        PG,
        "SELECT city, count(*) AS n, sum(o.amount) FROM customers c "
        "JOIN orders o ON o.customer_id = c.id GROUP BY city",
    ),
    (PG, "SELECT id, amount, row_number() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn FROM orders"),
    (PG, "SELECT id, rank() OVER w, dense_rank() OVER w, ntile(2) OVER w FROM orders WINDOW w AS (ORDER BY amount)"),
    (PG, "SELECT id, lag(amount) OVER (ORDER BY id), lead(amount, 1, 0) OVER (ORDER BY id) FROM orders"),
    (
        PG,
        "SELECT first_value(amount) OVER w, last_value(amount) OVER w, nth_value(amount, 2) OVER w FROM orders "
        "WINDOW w AS (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)",
    ),
    (PG, "SELECT cume_dist() OVER (ORDER BY amount), percent_rank() OVER (ORDER BY amount) FROM orders"),
    (
        PG,
        "WITH totals AS (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) "
        "SELECT c.name, t.total FROM customers c JOIN totals t ON t.customer_id = c.id ORDER BY t.total DESC",
    ),
    (PG, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12) SELECT i FROM n"),
    (PG, "SELECT count(*) FILTER (WHERE amount > 10000) AS big, count(*) FILTER (WHERE note IS NULL) FROM orders"),
    (
        PG,
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount), percentile_disc(0.9) WITHIN GROUP "
        "(ORDER BY amount), mode() WITHIN GROUP (ORDER BY customer_id) FROM orders",
    ),
    (PG, "SELECT avg(amount), stddev(amount), variance(amount), min(amount), max(amount) FROM orders"),
    (PG, "SELECT string_agg(name, ', ' ORDER BY name), array_agg(id ORDER BY id) FROM customers"),
    (PG, "SELECT bool_and(amount > 0), bool_or(note IS NULL), every(amount > 0) FROM orders"),
    (
        PG,
        "SELECT c.name, x.amount FROM customers c CROSS JOIN LATERAL "
        "(SELECT amount FROM orders o WHERE o.customer_id = c.id ORDER BY amount DESC LIMIT 1) AS x",
    ),
    (
        PG,
        "SELECT d::date AS day FROM generate_series('2024-01-01'::date, '2024-01-07'::date, interval '1 day') AS g(d)",
    ),
    (PG, "SELECT date_trunc('month', now()), extract(year FROM now()), to_char(now(), 'YYYY-MM'), current_date"),
    (PG, "SELECT now() - interval '7 days', age(timestamp '2024-01-01'), date_part('dow', now())"),
    (PG, "SELECT json_build_object('id', id, 'name', name), to_jsonb(c) FROM customers c"),
    (PG, "SELECT jsonb_agg(jsonb_build_object('id', id, 'amount', amount)) FROM orders"),
    (
        PG,
        "SELECT j ->> 'a', j -> 'b', j #>> '{b,c}', j @> '{\"a\": 1}' "
        'FROM (SELECT \'{"a": 1, "b": {"c": 2}}\'::jsonb AS j) s',
    ),
    (PG, "SELECT e.value FROM jsonb_array_elements('[1, 2, 3]'::jsonb) AS e"),
    (PG, "SELECT key, value FROM json_each('{\"a\": 1}'::json)"),
    (PG, "SELECT unnest(ARRAY[1, 2, 3]) AS n"),
    (
        PG,
        "SELECT upper(name), lower(email), length(phone), substring(email FROM 1 FOR 3), split_part(email, '@', 2) "
        "FROM customers",
    ),
    (
        PG,
        "SELECT replace(phone, '-', ''), regexp_replace(email, '@.*$', ''), trim(both ' ' FROM name), "
        "lpad(id::text, 5, '0'), concat_ws('-', city, name) FROM customers",
    ),
    (
        PG,
        "SELECT CASE WHEN amount > 20000 THEN 'high' WHEN amount > 8000 THEN 'mid' ELSE 'low' END, "
        "coalesce(note, '-'), nullif(amount, 0), greatest(amount, 10000), least(amount, 10000) FROM orders",
    ),
    (
        PG,
        "SELECT CAST(amount AS numeric(12, 2)) / 100, amount::float8, round(amount / 3.0, 2), abs(-amount) FROM orders",
    ),
    (PG, "SELECT id FROM customers WHERE email ILIKE '%example%' AND name ~ '^.' AND city IN ('서울', '부산')"),
    (
        PG,
        "SELECT id FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id) "
        "AND id NOT IN (SELECT customer_id FROM orders WHERE amount < 0)",
    ),
    (PG, "SELECT city, count(*) FROM customers GROUP BY ROLLUP (city) ORDER BY city NULLS LAST"),
    (PG, "SELECT DISTINCT ON (customer_id) customer_id, amount FROM orders ORDER BY customer_id, amount DESC"),
    (
        PG,
        "SELECT pg_catalog.lower(name), to_tsvector('simple', memo) @@ plainto_tsquery('simple', 'data') FROM "
        "customers, notes",
    ),
    (PG, "SELECT id FROM customers UNION ALL SELECT customer_id FROM orders EXCEPT SELECT id FROM notes"),
    # --- MySQL / MariaDB
    (
        MY,
        "SELECT city, COUNT(*) AS n, SUM(o.amount) FROM customers c "
        "JOIN orders o ON o.customer_id = c.id GROUP BY city",
    ),
    (MY, "SELECT id, amount, ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn FROM orders"),
    (
        MY,
        "SELECT id, RANK() OVER (ORDER BY amount), DENSE_RANK() OVER (ORDER BY amount), "
        "NTILE(2) OVER (ORDER BY amount) "
        "FROM orders",
    ),
    (MY, "SELECT id, LAG(amount) OVER (ORDER BY id), LEAD(amount, 1) OVER (ORDER BY id) FROM orders"),
    (
        MY,
        "SELECT FIRST_VALUE(amount) OVER (ORDER BY id), LAST_VALUE(amount) OVER (ORDER BY id), "
        "NTH_VALUE(amount, 2) OVER (ORDER BY id) FROM orders",
    ),
    (MY, "SELECT CUME_DIST() OVER (ORDER BY amount), PERCENT_RANK() OVER (ORDER BY amount) FROM orders"),
    (
        MY,
        "WITH totals AS (SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id) "
        "SELECT c.name, t.total FROM customers c JOIN totals t ON t.customer_id = c.id ORDER BY t.total DESC",
    ),
    (MY, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12) SELECT i FROM n"),
    (MY, "SELECT AVG(amount), STDDEV(amount), VARIANCE(amount), MIN(amount), MAX(amount) FROM orders"),
    (MY, "SELECT GROUP_CONCAT(name ORDER BY name SEPARATOR ', ') FROM customers"),
    (MY, "SELECT SUM(CASE WHEN amount > 10000 THEN 1 ELSE 0 END), SUM(note IS NULL) FROM orders"),
    (MY, "SELECT DATE_FORMAT(NOW(), '%Y-%m'), DATE_SUB(NOW(), INTERVAL 7 DAY), DATE_ADD(CURDATE(), INTERVAL 1 MONTH)"),
    (MY, "SELECT YEAR(NOW()), MONTH(NOW()), DAYOFWEEK(NOW()), DATEDIFF(NOW(), '2024-01-01'), LAST_DAY(NOW())"),
    (MY, "SELECT EXTRACT(YEAR FROM NOW()), TIMESTAMPDIFF(DAY, '2024-01-01', NOW()), UNIX_TIMESTAMP('2024-01-01')"),
    (MY, "SELECT STR_TO_DATE('2024-01-02', '%Y-%m-%d'), CURRENT_DATE, CURRENT_TIMESTAMP"),
    (MY, "SELECT JSON_OBJECT('id', id, 'name', name) FROM customers"),
    (MY, "SELECT JSON_EXTRACT('{\"a\": {\"b\": 1}}', '$.a.b'), JSON_UNQUOTE(JSON_EXTRACT('{\"a\": \"x\"}', '$.a'))"),
    (MY, "SELECT JSON_VALUE(j, '$.a'), JSON_QUERY(j, '$.c') FROM (SELECT '{\"a\": 1, \"c\": [1]}' AS j) s"),
    (MY, "SELECT JSON_ARRAYAGG(id), JSON_OBJECTAGG(id, amount) FROM orders"),
    (MY, "SELECT JSON_LENGTH('[1, 2]'), JSON_KEYS('{\"a\": 1}'), JSON_CONTAINS('[1, 2]', '1'), JSON_VALID('{}')"),
    (
        MY,
        "SELECT UPPER(name), LOWER(email), CHAR_LENGTH(phone), SUBSTRING(email, 1, 3), "
        "SUBSTRING_INDEX(email, '@', -1) FROM customers",
    ),
    (
        MY,
        "SELECT REPLACE(phone, '-', ''), CONCAT_WS('-', city, name), LPAD(id, 5, '0'), TRIM(name), LEFT(email, 3) "
        "FROM customers",
    ),
    (
        MY,
        "SELECT IF(amount > 10000, 'big', 'small'), IFNULL(note, '-'), COALESCE(note, '-'), NULLIF(amount, 0) "
        "FROM orders",
    ),
    (
        MY,
        "SELECT GREATEST(amount, 10000), LEAST(amount, 10000), ROUND(amount / 3, 2), FLOOR(amount / 7), "
        "CEIL(amount / 7), MOD(amount, 7) FROM orders",
    ),
    (MY, "SELECT CAST(amount AS DECIMAL(12, 2)), CONVERT(amount, CHAR) FROM orders"),
    (MY, "SELECT id FROM customers WHERE email LIKE '%example%' AND city IN ('서울', '부산') AND name REGEXP '^.'"),
    (MY, "SELECT id FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"),
    (MY, "SELECT city, COUNT(*) FROM customers GROUP BY city WITH ROLLUP"),
    (MY, "SELECT id FROM customers UNION ALL SELECT customer_id FROM orders"),
    (
        MY,
        "SELECT c.name, x.total FROM customers c JOIN (SELECT customer_id, SUM(amount) AS total FROM orders "
        "GROUP BY customer_id) x ON x.customer_id = c.id WHERE x.total > 1000 ORDER BY x.total DESC LIMIT 10",
    ),
    (MY, "SELECT MD5(email), SHA2(email, 256), HEX(id), REVERSE(name), INSTR(email, '@') FROM customers"),
    (MY, "SELECT j.x FROM JSON_TABLE('[{\"x\": 1}, {\"x\": 2}]', '$[*]' COLUMNS (x INT PATH '$.x')) AS j"),
    # --- SQLite
    (
        LITE,
        "SELECT city, count(*) AS n, sum(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "GROUP BY city",
    ),
    (LITE, "SELECT id, amount, row_number() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn FROM orders"),
    (LITE, "SELECT id, rank() OVER w, dense_rank() OVER w, ntile(2) OVER w FROM orders WINDOW w AS (ORDER BY amount)"),
    (LITE, "SELECT id, lag(amount) OVER (ORDER BY id), lead(amount, 1, 0) OVER (ORDER BY id) FROM orders"),
    (
        LITE,
        "SELECT first_value(amount) OVER w, last_value(amount) OVER w, nth_value(amount, 2) OVER w FROM orders "
        "WINDOW w AS (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)",
    ),
    (LITE, "SELECT cume_dist() OVER (ORDER BY amount), percent_rank() OVER (ORDER BY amount) FROM orders"),
    (
        LITE,
        "WITH totals AS (SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id) "
        "SELECT c.name, t.total FROM customers c JOIN totals t ON t.customer_id = c.id ORDER BY t.total DESC",
    ),
    (LITE, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12) SELECT i FROM n"),
    (LITE, "SELECT count(*) FILTER (WHERE amount > 10000), total(amount), avg(amount) FROM orders"),
    (LITE, "SELECT min(amount), max(amount), sum(amount) FROM orders GROUP BY customer_id HAVING count(*) > 0"),
    (LITE, "SELECT group_concat(name, ', ') FROM customers"),
    (LITE, "SELECT strftime('%Y-%m', 'now'), date('now', '-7 days'), datetime('now'), julianday('now')"),
    (LITE, "SELECT unixepoch('now'), time('now'), date('now', 'start of month')"),
    (LITE, "SELECT json_object('id', id, 'name', name) FROM customers"),
    (LITE, "SELECT json_extract('{\"a\": {\"b\": 1}}', '$.a.b'), json_array_length('[1, 2]'), json_type('{}')"),
    (LITE, "SELECT j ->> '$.a', j -> '$.b' FROM (SELECT '{\"a\": 1, \"b\": [2]}' AS j) AS s"),
    (LITE, "SELECT value FROM json_each('[1, 2, 3]')"),
    (LITE, 'SELECT key, value FROM json_tree(\'{"a": {"b": 1}}\')'),
    (LITE, "SELECT json_group_array(id), json_group_object(id, amount) FROM orders"),
    (LITE, "SELECT upper(name), lower(email), length(phone), substr(email, 1, 3), instr(email, '@') FROM customers"),
    (
        LITE,
        "SELECT replace(phone, '-', ''), trim(name), ltrim(phone, '0'), printf('%05d', id), name || ' ' || city "
        "FROM customers",
    ),
    (
        LITE,
        "SELECT CASE WHEN amount > 20000 THEN 'high' ELSE 'low' END, coalesce(note, '-'), ifnull(note, '-'), "
        "nullif(amount, 0), iif(amount > 1, 'y', 'n') FROM orders",
    ),
    (LITE, "SELECT CAST(amount AS REAL) / 100, round(amount / 3.0, 2), abs(-amount), max(amount, 10000) FROM orders"),
    (LITE, "SELECT id FROM customers WHERE email LIKE '%example%' AND city IN ('서울', '부산') AND name GLOB '*'"),
    (LITE, "SELECT id FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)"),
    (LITE, "SELECT id FROM customers UNION ALL SELECT customer_id FROM orders EXCEPT SELECT id FROM notes"),
    (
        LITE,
        "SELECT c.name, x.total FROM customers c JOIN (SELECT customer_id, sum(amount) AS total FROM orders "
        "GROUP BY customer_id) AS x ON x.customer_id = c.id ORDER BY x.total DESC LIMIT 10",
    ),
    (
        LITE,
        "SELECT typeof(amount), hex(o.id), quote(name), unicode(name), random() IS NOT NULL FROM orders o, customers",
    ),
    (LITE, "SELECT main.customers.name FROM main.customers"),
    (LITE, "SELECT p.id, j.value FROM customers p, json_each(json_array(p.id, p.city)) AS j"),
]


@pytest.mark.parametrize("case", ALLOWED, ids=lambda case: f"{case[0]}-{case[1][:70]}")
def test_realistic_query_is_allowed(case: tuple[str, str]) -> None:
    dialect, sql = case
    assert refusal(sql, dialect) is None


def _run_allowed(db, dialect: str) -> list[tuple[str, str]]:
    failures = []
    for case_dialect, sql in ALLOWED:
        if case_dialect != dialect:
            continue
        try:
            execute_readonly(engine=db.engine, dsn=db.dsn, sql=sql, row_cap=50, timeout_ms=5000)
        except QueryError as exc:
            failures.append((sql, str(exc)[:120]))
    return failures


@pytest.mark.services
def test_realistic_postgres_queries_run(pg_customer_db) -> None:
    assert _run_allowed(pg_customer_db, PG) == []


@pytest.mark.services
def test_realistic_mysql_queries_run(mysql_customer_db) -> None:
    assert _run_allowed(mysql_customer_db, MY) == []


def test_realistic_sqlite_queries_run(sqlite_customer_db) -> None:
    assert _run_allowed(sqlite_customer_db, LITE) == []
