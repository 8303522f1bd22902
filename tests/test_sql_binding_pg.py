"""Only pg_catalog's code runs, on a real PostgreSQL customer database that
holds the database's own look-alikes.

The database owner has created, in `public` (the connection's schema), exact
type overloads of common functions, operators and aggregates, a domain with
its own `=`, a cast with a user function, a "computed column" function, and
SECURITY DEFINER functions that write through dblink (a separate connection,
so the read-only transaction does not stop them). Each case proves three
things: the statement runs through `execute_readonly` with pg_catalog's
result; nothing was written (the side table stays empty); and the same text
run unbound as the reader does reach the look-alike, so the case is real.
"""

from __future__ import annotations

import uuid

import pytest

from governance.sql.binding import BindError, bind_postgres
from governance.sql.execute import BIND_ERROR_CLASS, QueryError, execute_readonly
from tests.support.customer_dbs import PG_ADMIN_URL, port_open

pytestmark = pytest.mark.services

SHADOW = "SHADOW"


def _objects(dbname: str) -> list[str]:
    mark = (
        "CREATE FUNCTION public.owlai_mark(tag text) RETURNS void LANGUAGE sql SECURITY DEFINER AS $$ "
        f"SELECT public.dblink_exec('dbname={dbname} host=127.0.0.1 user=postgres', "
        "'INSERT INTO public.side(tag) VALUES (' || pg_catalog.quote_literal(tag) || ')') $$"
    )

    def fn(signature: str, returns: str, body: str) -> str:
        return (
            f"CREATE FUNCTION public.{signature} RETURNS {returns} LANGUAGE plpgsql SECURITY DEFINER AS $$ "
            f"BEGIN PERFORM public.owlai_mark('{signature.split('(')[0]}'); {body} END $$"
        )

    return [
        "CREATE EXTENSION IF NOT EXISTS dblink",
        "CREATE TABLE side (tag text)",
        "CREATE DOMAIN amount_d AS integer",
        "CREATE TYPE mood AS ENUM ('calm', 'angry')",
        "CREATE TABLE people (id int PRIMARY KEY, name varchar(40), city varchar(20), amount amount_d, note text)",
        "INSERT INTO people VALUES (1, 'Kim', 'Seoul', 10, 'a'), (2, 'Lee', 'Busan', 20, NULL),"
        " (3, 'Park', 'Seoul', 30, 'c')",
        "CREATE TABLE moods (id int, m mood)",
        "INSERT INTO moods VALUES (1, 'calm')",
        mark,
        # functions with an exact varchar / domain overload
        fn("lower(varchar)", "text", f"RETURN '{SHADOW}';"),
        fn("upper(varchar)", "text", f"RETURN '{SHADOW}';"),
        fn("length(varchar)", "int", "RETURN -1;"),
        fn("btrim(varchar)", "text", f"RETURN '{SHADOW}';"),
        fn("abs(amount_d)", "int", "RETURN -1;"),
        fn("to_jsonb(people)", "jsonb", "RETURN '\"SHADOW\"';"),
        fn("concat_ws(text, varchar, varchar)", "text", f"RETURN '{SHADOW}';"),
        fn("like_escape(varchar, text)", "text", "RETURN '%';"),
        # operators
        fn("eq_v(varchar, varchar)", "boolean", "RETURN true;"),
        "CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.eq_v)",
        fn("cat_v(varchar, varchar)", "text", f"RETURN '{SHADOW}';"),
        "CREATE OPERATOR public.|| (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.cat_v)",
        fn("like_v(varchar, text)", "boolean", "RETURN true;"),
        "CREATE OPERATOR public.~~ (LEFTARG = varchar, RIGHTARG = text, FUNCTION = public.like_v)",
        "CREATE OPERATOR public.~~* (LEFTARG = varchar, RIGHTARG = text, FUNCTION = public.like_v)",
        fn("eq_d(amount_d, int)", "boolean", "RETURN true;"),
        "CREATE OPERATOR public.= (LEFTARG = amount_d, RIGHTARG = int, FUNCTION = public.eq_d)",
        "CREATE OPERATOR public.<> (LEFTARG = amount_d, RIGHTARG = int, FUNCTION = public.eq_d)",
        "CREATE OPERATOR public.>= (LEFTARG = amount_d, RIGHTARG = int, FUNCTION = public.eq_d)",
        fn("plus_d(amount_d, int)", "int", "RETURN -1;"),
        "CREATE OPERATOR public.+ (LEFTARG = amount_d, RIGHTARG = int, FUNCTION = public.plus_d)",
        "CREATE OPERATOR public.* (LEFTARG = amount_d, RIGHTARG = int, FUNCTION = public.plus_d)",
        fn("neg_d(amount_d)", "int", "RETURN 999;"),
        "CREATE OPERATOR public.- (RIGHTARG = amount_d, FUNCTION = public.neg_d)",
        fn("regex_v(varchar, text)", "boolean", "RETURN true;"),
        "CREATE OPERATOR public.~ (LEFTARG = varchar, RIGHTARG = text, FUNCTION = public.regex_v)",
        # aggregates
        fn("sum_step(bigint, amount_d)", "bigint", "RETURN -1;"),
        "CREATE AGGREGATE public.sum(amount_d) (SFUNC = public.sum_step, STYPE = bigint)",
        fn("agg_step(text, varchar, varchar)", "text", f"RETURN '{SHADOW}';"),
        "CREATE AGGREGATE public.string_agg(varchar, varchar) (SFUNC = public.agg_step, STYPE = text)",
        fn("count_step(bigint, varchar)", "bigint", "RETURN -1;"),
        "CREATE AGGREGATE public.count(varchar) (SFUNC = public.count_step, STYPE = bigint)",
        # a computed column, and a function that shares a real column's name
        fn("nickname(people)", "text", f"RETURN '{SHADOW}';"),
        fn("city(people)", "text", f"RETURN '{SHADOW}';"),
        # a cast with a user function
        fn("mood_text(mood)", "text", f"RETURN '{SHADOW}';"),
        "CREATE CAST (mood AS text) WITH FUNCTION public.mood_text(mood)",
        fn("mood_json(mood)", "jsonb", "RETURN '\"SHADOW\"';"),
        "CREATE CAST (mood AS jsonb) WITH FUNCTION public.mood_json(mood)",
        # attribute notation on a composite-typed column
        "CREATE TYPE addr AS (street text)",
        "CREATE TABLE homes (id int, a addr)",
        "INSERT INTO homes VALUES (1, ROW('Main'))",
        fn("owner(addr)", "text", f"RETURN '{SHADOW}';"),
        # views and a row-level security policy that run the owner's code
        # (resolved when the owner created them: binding cannot reach them)
        "CREATE VIEW v_plain AS SELECT id, city, pg_catalog.upper(city) AS loud, count(*) OVER () AS n FROM people",
        "CREATE VIEW v_shadowed AS SELECT id, upper(city) AS loud FROM people",  # the owner's upper(varchar)
        "CREATE VIEW v_nick AS SELECT id, public.nickname(p) AS nick FROM people p",
        "CREATE VIEW v_nested AS SELECT * FROM v_nick",
        "CREATE VIEW v_deep AS SELECT v.id FROM v_nested v JOIN people q ON q.id = v.id",
        "CREATE VIEW v_op AS SELECT id FROM people WHERE name = CAST('Kim' AS varchar)",
        "CREATE VIEW v_cast AS SELECT id, CAST(m AS text) AS m FROM moods",
        "CREATE VIEW v_agg AS SELECT public.sum(amount) AS total FROM people",
        fn("allow_row(int)", "boolean", "RETURN true;"),
        "CREATE TABLE guarded (id int, tag text)",
        "INSERT INTO guarded VALUES (1, 'g')",
        "ALTER TABLE guarded ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY guarded_read ON guarded FOR SELECT USING (public.allow_row(id))",
        "CREATE VIEW v_guarded AS SELECT id FROM guarded",
        "CREATE TABLE open_rows (id int)",
        "INSERT INTO open_rows VALUES (1)",
        "ALTER TABLE open_rows ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY open_read ON open_rows FOR SELECT USING (id > 0)",
    ]


@pytest.fixture(scope="module")
def shadowed_db():
    if not port_open("127.0.0.1", 5432):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    suffix = uuid.uuid4().hex[:10]
    name, reader = f"owlai_shadow_{suffix}", f"owlai_shreader_{suffix}"
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f"CREATE ROLE \"{reader}\" LOGIN PASSWORD 'reader-pw' NOSUPERUSER NOCREATEDB NOCREATEROLE")
    admin_dsn = f"{base}/{name}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for statement in _objects(name):
            conn.execute(statement)
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{reader}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{reader}"')
    host = base.split("@", 1)[1]
    yield {"dsn": f"postgresql://{reader}:reader-pw@{host}/{name}", "admin": admin_dsn}
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{reader}"')


def _side_rows(db) -> list[tuple]:
    import psycopg

    with psycopg.connect(db["admin"], autocommit=True) as conn:
        return conn.execute("SELECT tag FROM side").fetchall()


def _clear_side(db) -> None:
    import psycopg

    with psycopg.connect(db["admin"], autocommit=True) as conn:
        conn.execute("DELETE FROM side")


def _run(db, sql: str) -> list[tuple]:
    return execute_readonly(engine="postgresql", dsn=db["dsn"], sql=sql, row_cap=100, timeout_ms=5000).rows


def _run_unbound(db, sql: str) -> list[tuple]:
    """The text as written, as the reader, in a read-only transaction: what
    ran before binding."""
    import psycopg

    with psycopg.connect(db["dsn"], options="-c default_transaction_read_only=on -c search_path=public") as conn:
        rows = conn.execute(sql).fetchall()
        conn.rollback()
        return rows


# (statement, pg_catalog's result)
BOUND_CASES: list[tuple[str, list[tuple]]] = [
    ("SELECT lower(name) FROM people WHERE id = 1", [("kim",)]),
    ("SELECT upper(city) FROM people WHERE id = 1", [("SEOUL",)]),
    ("SELECT length(name) FROM people WHERE id = 3", [(4,)]),
    ("SELECT char_length(name) FROM people WHERE id = 3", [(4,)]),
    ("SELECT abs(amount) FROM people WHERE id = 1", [(10,)]),
    ("SELECT count(*) FROM people WHERE name = 'nobody'", [(0,)]),
    ("SELECT id FROM people WHERE name = 'Kim'", [(1,)]),
    ("SELECT id FROM people WHERE name IN ('Kim', 'nobody')", [(1,)]),
    ("SELECT id FROM people WHERE name NOT IN ('Kim', 'Lee') ORDER BY id", [(3,)]),
    ("SELECT id FROM people WHERE name = ANY (ARRAY['Lee'::varchar])", [(2,)]),
    ("SELECT id FROM people WHERE name IN (SELECT name FROM people WHERE id = 2)", [(2,)]),
    ("SELECT name || city FROM people WHERE id = 1", [("KimSeoul",)]),
    ("SELECT concat_ws('-', name, city) FROM people WHERE id = 1", [("Kim-Seoul",)]),
    ("SELECT id FROM people WHERE name LIKE 'K%'", [(1,)]),
    ("SELECT id FROM people WHERE name ILIKE 'k%'", [(1,)]),
    ("SELECT id FROM people WHERE name NOT LIKE 'K%' ORDER BY id", [(2,), (3,)]),
    ("SELECT id FROM people WHERE name NOT ILIKE 'k%' ORDER BY id", [(2,), (3,)]),
    ("SELECT id FROM people WHERE amount NOT BETWEEN 15 AND 25 ORDER BY id", [(1,), (3,)]),
    ("SELECT id FROM people WHERE name SIMILAR TO 'K%'", [(1,)]),
    ("SELECT id FROM people WHERE name !~ '^P' ORDER BY id", [(1,), (2,)]),
    ("SELECT id FROM people WHERE (name, city) = ('Kim', 'Seoul')", [(1,)]),
    ("SELECT id FROM people WHERE city = ANY (SELECT city FROM people WHERE id = 3) ORDER BY id", [(1,), (3,)]),
    ("SELECT p.id FROM people p JOIN people q ON q.name = p.name WHERE p.id = 2", [(2,)]),
    ("SELECT id FROM people WHERE name LIKE 'K!%' ESCAPE '!'", []),
    ("SELECT id FROM people WHERE name ~ '^P'", [(3,)]),
    ("SELECT id FROM people WHERE amount = 20", [(2,)]),
    ("SELECT id FROM people WHERE amount <> 20 ORDER BY id", [(1,), (3,)]),
    ("SELECT id FROM people WHERE amount BETWEEN 15 AND 25", [(2,)]),
    ("SELECT amount + 1 FROM people WHERE id = 1", [(11,)]),
    ("SELECT amount * 2 FROM people WHERE id = 1", [(20,)]),
    ("SELECT -amount FROM people WHERE id = 1", [(-10,)]),
    ("SELECT sum(amount) FROM people", [(60,)]),
    ("SELECT count(name) FROM people", [(3,)]),
    ("SELECT string_agg(name, ',' ORDER BY id) FROM people", [("Kim,Lee,Park",)]),
    ("SELECT CASE amount WHEN 10 THEN 'ten' ELSE 'other' END FROM people WHERE id = 1", [("ten",)]),
    ("SELECT nullif(amount, 10) FROM people WHERE id = 1", [(None,)]),
    ("SELECT id FROM people WHERE amount IS DISTINCT FROM 10 ORDER BY id", [(2,), (3,)]),
    ("SELECT id FROM people WHERE amount IS NOT DISTINCT FROM 10", [(1,)]),
    ("SELECT to_jsonb(p) ->> 'name' FROM people p WHERE id = 2", [("Lee",)]),
    ("SELECT trim(name) FROM people WHERE id = 1", [("Kim",)]),
    ("SELECT p.city FROM people p WHERE id = 1", [("Seoul",)]),  # the real column, not public.city(people)
    ("SELECT max(name) FROM people", [("Park",)]),
    ("SELECT to_hex(amount) FROM people WHERE id = 3", [("1e",)]),
    ("SELECT count(*) FROM people GROUP BY (amount OPERATOR(pg_catalog.%) 20) ORDER BY 1", [(1,), (2,)]),
    ("SELECT (h.a).street FROM homes h", [("Main",)]),
    ("SELECT s.count FROM (SELECT count(*) AS count FROM people) s", [(3,)]),
    ("WITH w AS (SELECT count(*) AS to_jsonb FROM people) SELECT x.to_jsonb FROM w AS x", [(3,)]),
    ("SELECT count(*) FROM people WHERE amount = ALL (ARRAY[10])", [(1,)]),
    (
        "SELECT city, count(*) FROM people GROUP BY GROUPING SETS ((city), ()) ORDER BY city",
        [("Busan", 1), ("Seoul", 2), (None, 3)],
    ),
    ("SELECT xmlelement(name p, name)::text FROM people WHERE id = 1", [("<p>Kim</p>",)]),
    ("SELECT xmlforest(name, city)::text FROM people WHERE id = 1", [("<name>Kim</name><city>Seoul</city>",)]),
    ("SELECT int4range(1, 5) @> 3, numrange(1, 2) && numrange(1.5, 3)", [(True, True)]),
]


@pytest.mark.parametrize(("sql", "expected"), BOUND_CASES, ids=[case[0][:60] for case in BOUND_CASES])
def test_statement_runs_pg_catalog_code_only(shadowed_db, sql: str, expected: list[tuple]) -> None:
    _clear_side(shadowed_db)
    assert _run(shadowed_db, sql) == expected
    assert _side_rows(shadowed_db) == []  # no look-alike ran, not even one that writes elsewhere


# The cases where the text as written reaches a look-alike (the others show
# pg_catalog's code winning anyway, or differ only in type resolution).
REAL_SHADOWS = [
    "SELECT lower(name) FROM people WHERE id = 1",
    "SELECT upper(city) FROM people WHERE id = 1",
    "SELECT length(name) FROM people WHERE id = 3",
    "SELECT abs(amount) FROM people WHERE id = 1",
    "SELECT count(*) FROM people WHERE name = 'nobody'",
    "SELECT id FROM people WHERE name IN ('Kim', 'nobody')",
    "SELECT name || city FROM people WHERE id = 1",
    "SELECT id FROM people WHERE name LIKE 'K!%' ESCAPE '!'",
    "SELECT id FROM people WHERE amount = 20",
    "SELECT p.id FROM people p JOIN people q ON q.name = p.name WHERE p.id = 2",
    "SELECT id FROM people WHERE amount BETWEEN 15 AND 25",
    "SELECT amount + 1 FROM people WHERE id = 1",
    "SELECT -amount FROM people WHERE id = 1",
    "SELECT sum(amount) FROM people",
    "SELECT count(name) FROM people",
    "SELECT string_agg(name, ',' ORDER BY id) FROM people",
    "SELECT CASE amount WHEN 10 THEN 'ten' ELSE 'other' END FROM people WHERE id = 1",
    "SELECT nullif(amount, 10) FROM people WHERE id = 1",
    "SELECT to_jsonb(p) ->> 'name' FROM people p WHERE id = 2",
]


@pytest.mark.parametrize("sql", REAL_SHADOWS, ids=[sql[:60] for sql in REAL_SHADOWS])
def test_unbound_text_reaches_the_look_alike(shadowed_db, sql: str) -> None:
    expected = dict(BOUND_CASES)[sql]
    _clear_side(shadowed_db)
    try:
        rows = _run_unbound(shadowed_db, sql)
    except Exception:
        rows = None  # the look-alike ran and failed in the read-only transaction
    assert rows != expected or _side_rows(shadowed_db) != []


REFUSED_AT_RUN: list[tuple[str, str]] = [
    ("SELECT p.nickname FROM people p", "function nickname"),
    ("SELECT (p).nickname FROM people p", "function nickname"),
    ("SELECT people.nickname FROM people", "function nickname"),
    ("SELECT m::text FROM moods", "cast mood"),
    ("SELECT CAST(m AS varchar) FROM moods", "cast mood"),
    ("SELECT lower(m::text) FROM moods", "cast mood"),
    ("SELECT upper(concat(m)) FROM moods", "cast mood"),
    ("SELECT to_jsonb(x) FROM moods x", "cast mood"),
    ("SELECT jsonb_agg(x) FROM moods AS x", "cast mood"),
    ("SELECT (h.a).owner FROM homes h", "function owner"),
    # pg_catalog's functions in attribute notation read the whole row too
    ("SELECT p.to_jsonb FROM people p", "function to_jsonb"),
    ("SELECT p.row_to_json FROM people p", "function row_to_json"),
    ("SELECT s.to_json FROM (SELECT * FROM people) s", "function to_json"),
    # a view or policy that calls the owner's code, at any depth
    ("SELECT nick FROM v_nick", "view or policy function nickname"),
    ("SELECT id FROM v_shadowed", "view or policy function upper"),
    ("SELECT id FROM v_nested", "view or policy function nickname"),
    ("SELECT count(*) FROM v_deep", "view or policy function nickname"),
    ("SELECT id FROM v_op", "view or policy function eq_v"),
    ("SELECT m FROM v_cast", "view or policy function mood_text"),
    ("SELECT total FROM v_agg", "view or policy function sum"),
    ("SELECT id FROM guarded", "view or policy function allow_row"),
    ("SELECT id FROM v_guarded", "view or policy function allow_row"),
    ("SELECT p.id FROM people p WHERE p.id IN (SELECT id FROM v_nick)", "view or policy function nickname"),
    ("WITH x AS (SELECT * FROM v_nested) SELECT count(*) FROM x", "view or policy function nickname"),
]


@pytest.mark.parametrize(("sql", "found"), REFUSED_AT_RUN, ids=[case[0][:60] for case in REFUSED_AT_RUN])
def test_database_code_reachable_through_catalog_is_refused(shadowed_db, sql: str, found: str) -> None:
    _clear_side(shadowed_db)
    with pytest.raises(QueryError) as raised:
        _run(shadowed_db, sql)
    assert raised.value.error_class == BIND_ERROR_CLASS
    assert found in raised.value.message
    assert _side_rows(shadowed_db) == []


def test_attribute_notation_without_binding_calls_the_function(shadowed_db) -> None:
    _clear_side(shadowed_db)
    assert _run_unbound(shadowed_db, "SELECT p.nickname FROM people p WHERE id = 1") == [(SHADOW,)]
    assert _side_rows(shadowed_db) == [("nickname",)]  # dblink wrote despite the read-only transaction


def test_views_and_policies_over_pg_catalog_code_stay_readable(shadowed_db) -> None:
    _clear_side(shadowed_db)
    assert sorted(_run(shadowed_db, "SELECT id, loud FROM v_plain")) == [(1, "SEOUL"), (2, "BUSAN"), (3, "SEOUL")]
    assert _run(shadowed_db, "SELECT id FROM open_rows") == [(1,)]
    assert _side_rows(shadowed_db) == []


def test_a_view_without_the_check_runs_the_owners_code(shadowed_db) -> None:
    _clear_side(shadowed_db)
    assert _run_unbound(shadowed_db, "SELECT nick FROM v_nested WHERE id = 1") == [(SHADOW,)]
    assert _side_rows(shadowed_db) == [("nickname",)]  # the case is real: the view's function wrote
    _clear_side(shadowed_db)


def test_a_table_with_user_typed_columns_stays_readable(shadowed_db) -> None:
    # Reading the column as itself runs no cast: enum output is pg_catalog's.
    assert _run(shadowed_db, "SELECT id, m FROM moods") == [(1, "calm")]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM people JOIN moods USING (id)",
        "SELECT * FROM people NATURAL JOIN moods",
        "SELECT 'calm'::mood",
        "SELECT CAST(1 AS public.amount_d)",
        "SELECT id FROM people WHERE amount BETWEEN SYMMETRIC 1 AND 2",
    ],
)
def test_implicit_resolution_is_refused_before_it_runs(shadowed_db, sql: str) -> None:
    with pytest.raises(BindError):
        bind_postgres(sql)
    with pytest.raises(QueryError) as raised:
        _run(shadowed_db, sql)
    assert raised.value.error_class == BIND_ERROR_CLASS


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT x || 'a' FROM (SELECT m AS x FROM moods) s",
        "WITH s AS (SELECT m AS x FROM moods) SELECT lower(x::text) FROM s",
        "SELECT m FROM moods UNION ALL SELECT 'x'::text",
    ],
)
def test_a_user_typed_column_behind_an_alias_is_still_caught(shadowed_db, sql: str) -> None:
    with pytest.raises(QueryError) as raised:
        _run(shadowed_db, sql)
    assert "cast mood" in raised.value.message


@pytest.mark.django_db
def test_schema_analysis_lists_the_databases_own_code(shadowed_db) -> None:
    from governance.models import DbConnection
    from governance.schema_analysis import database_code_record
    from governance.services import db_connection_set_stored_dsn
    from governance.sql.database_code import summary

    connection = DbConnection.objects.create(name="shadowed", engine="postgresql")
    db_connection_set_stored_dsn(connection=connection, dsn=shadowed_db["dsn"])
    entries = database_code_record(connection=connection)
    connection.refresh_from_db()
    assert connection.database_code == entries
    by_name = {entry["name"]: entry for entry in entries}
    lower = by_name["public.lower(character varying)"]
    assert (lower["kind"], lower["security_definer"], lower["extension"]) == ("function", True, "")
    assert by_name["public.sum(amount_d)"]["kind"] == "aggregate"
    assert by_name["public.=(character varying, character varying)"]["kind"] == "operator"
    assert by_name["public.=(character varying, character varying)"]["security_definer"] is True  # its function
    assert by_name["mood AS text WITH public.mood_text"]["kind"] == "cast"
    assert by_name["public.dblink_exec(text, text)"]["extension"] == "dblink"
    assert "SECURITY DEFINER" in summary(entries)
    assert all(not name.startswith("pg_catalog.") for name in by_name)


@pytest.mark.django_db
def test_schema_analysis_lists_mysql_stored_routines(mysql_customer_db) -> None:
    import pymysql

    from governance.models import DbConnection
    from governance.schema_analysis import database_code_record
    from governance.services import db_connection_set_stored_dsn
    from tests.support.customer_dbs import MYSQL_HOST, MYSQL_PORT

    database = mysql_customer_db.dsn.rsplit("/", 1)[1]
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=database, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "CREATE FUNCTION owlai_shadow(x INT) RETURNS INT DETERMINISTIC SQL SECURITY DEFINER RETURN x"
            )
            # The listing shows what the account could run: a SELECT-only
            # account sees (and may call) no routine until EXECUTE is granted.
            reader = mysql_customer_db.dsn.split("//", 1)[1].split(":", 1)[0]
            for host in ("%", "localhost"):
                cursor.execute(f"GRANT EXECUTE ON FUNCTION `{database}`.owlai_shadow TO '{reader}'@'{host}'")
        connection = DbConnection.objects.create(name="shop", engine="mysql")
        db_connection_set_stored_dsn(connection=connection, dsn=mysql_customer_db.dsn)
        entries = database_code_record(connection=connection)
    finally:
        with conn.cursor() as cursor:
            cursor.execute("DROP FUNCTION IF EXISTS owlai_shadow")
        conn.close()
    assert {"kind": "function", "name": f"{database}.owlai_shadow", "security_definer": True, "extension": ""} in (
        entries
    )


@pytest.mark.django_db
def test_schema_analysis_lists_nothing_for_sqlite(sqlite_customer_db) -> None:
    from governance.models import DbConnection
    from governance.schema_analysis import database_code_record
    from governance.services import db_connection_set_stored_dsn

    connection = DbConnection.objects.create(name="file", engine="sqlite")
    db_connection_set_stored_dsn(connection=connection, dsn=sqlite_customer_db.dsn)
    assert database_code_record(connection=connection) == []
    connection.refresh_from_db()
    assert connection.database_code == []


def test_rewritten_outputs_keep_the_labels_the_written_statement_gets(shadowed_db) -> None:
    sql = "SELECT nullif(amount, 10), amount IS DISTINCT FROM 10, strpos(name, 'i'), lower(name) FROM people"
    bound = execute_readonly(engine="postgresql", dsn=shadowed_db["dsn"], sql=sql, row_cap=1, timeout_ms=5000)
    assert bound.columns == ["nullif", "?column?", "strpos", "lower"]
