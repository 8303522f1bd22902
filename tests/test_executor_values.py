"""No value leaves the executor in clear through the side doors: echoed
tokens, database errors, JSON keys, column names; the checked statement is
the one that runs; sessions pin what the checks assume; accounts that can do
more than read are refused. Against real PostgreSQL, MariaDB and SQLite."""

from __future__ import annotations

import json

import pytest

from governance.sql.execute import QueryError, execute_readonly, scrub_error_message, statement_words
from tests.support.governed import governed_connection

pytestmark = [pytest.mark.django_db, pytest.mark.services, pytest.mark.usefixtures("english")]

NAME = "김민준"
PHONE = "010-1234-5678"


@pytest.fixture(params=["pg", "mysql", "sqlite"])
def customer_db(request):
    return request.getfixturevalue(
        {"pg": "pg_customer_db", "mysql": "mysql_customer_db"}.get(request.param, "sqlite_customer_db")
    )


@pytest.fixture
def governed(customer_db, django_user_model):
    return governed_connection(customer_db, django_user_model)


def _clear_of(value: str, *things) -> bool:
    return all(value not in json.dumps(thing, ensure_ascii=False, default=str) for thing in things)


def _audit_fields(governed) -> list:
    return [
        (row.reason, row.sql_text, row.resource_name, row.tables, row.tool, row.row_count)
        for row in governed.audit_rows()
    ]


# --- echo: a token written as a literal never comes back as its original -------------

ECHO_SHAPES = {
    "pg": [
        "SELECT '{t}'",
        "SELECT '{t}' AS x FROM customers",
        "SELECT upper('{t}')",
        "SELECT '{t}' || ''",
        "SELECT substr('{t}', 1, 2)",
        "SELECT json_build_object('{t}', 1)",
        "WITH x AS (SELECT '{t}' AS v) SELECT v FROM x",
        "SELECT v FROM (SELECT '{t}' AS v UNION ALL SELECT 'a') s",
        "SELECT id FROM customers WHERE name = '{t}' UNION ALL SELECT length('{t}')",
    ],
    "mysql": [
        "SELECT '{t}'",
        "SELECT upper('{t}')",
        "SELECT concat('{t}', '')",
        "SELECT substr('{t}', 1, 2)",
        "SELECT json_object('{t}', 1)",
        "WITH x AS (SELECT '{t}' AS v) SELECT v FROM x",
    ],
    "sqlite": [
        "SELECT '{t}'",
        "SELECT upper('{t}')",
        "SELECT '{t}' || ''",
        "SELECT substr('{t}', 1, 2)",
        "SELECT json_object('{t}', 1)",
        "WITH x AS (SELECT '{t}' AS v) SELECT v FROM x",
    ],
}


def _engine_key(governed) -> str:
    return {"postgresql": "pg"}.get(governed.db.engine, governed.db.engine)


def test_echoed_tokens_never_return_their_original(governed):
    token = governed.tokenise("name", NAME)
    for shape in ECHO_SHAPES[_engine_key(governed)]:
        payload, outcome = governed.run(shape.format(t=token))
        assert _clear_of(NAME, payload), (shape, payload)
        assert _clear_of(NAME[:2], payload.get("rows", [])), (shape, payload)
    assert _clear_of(NAME, _audit_fields(governed))


def test_the_original_does_reach_the_database_in_a_filter(governed):
    token = governed.tokenise("name", NAME)
    payload, outcome = governed.run(f"SELECT id, city FROM customers WHERE name = '{token}'")
    assert outcome == "success", payload
    assert payload["rows"] == [[1, "서울"]]
    # The audit row keeps the SQL as the model wrote it: the token, never the name.
    (row,) = governed.audit_rows()
    assert token in row.sql_text and NAME not in row.sql_text


def test_a_vaulted_value_is_masked_wherever_it_appears(governed):
    """Known values: `notes.memo` is not classified, yet the name the vault
    already holds (from an earlier result) is replaced in it."""
    first, _ = governed.run("SELECT name FROM customers WHERE id = 1")
    token = first["rows"][0][0]
    assert token.startswith("[이름-")
    payload, outcome = governed.run("SELECT memo FROM notes WHERE id = 1")
    assert outcome == "success"
    assert NAME not in payload["rows"][0][0] and token in payload["rows"][0][0]


# --- errors carry no values ---------------------------------------------------------------


def test_a_database_error_quoting_a_value_reaches_neither_model_nor_audit(governed):
    sql = {
        "pg": "SELECT CAST(name AS integer) FROM customers",
        "mysql": "SELECT EXTRACTVALUE(1, CONCAT(0x7e, (SELECT name FROM customers WHERE id = 1)))",
        "sqlite": "SELECT json_extract(name, '$') FROM customers",
    }[_engine_key(governed)]
    payload, outcome = governed.run(sql)
    assert outcome in ("failed", "denied"), payload
    assert _clear_of(NAME, payload, _audit_fields(governed))


@pytest.mark.parametrize(
    ("engine", "sql"),
    [
        ("pg", "SELECT CAST(name AS integer) FROM customers WHERE id = 1"),
        ("pg", "SELECT CAST(phone AS date) FROM customers WHERE id = 1"),
        ("pg", "SELECT to_number(name, '999') FROM customers WHERE id = 1"),
        ("mysql", "SELECT EXTRACTVALUE(1, CONCAT(0x7e, (SELECT name FROM customers WHERE id = 1)))"),
        ("mysql", "SELECT UPDATEXML(1, CONCAT(0x7e, (SELECT phone FROM customers WHERE id = 1)), 1)"),
        ("mysql", "SELECT CAST(name AS SIGNED) + (SELECT 1 UNION SELECT 2) FROM customers WHERE id = 1"),
    ],
)
def test_execution_layer_elides_values_from_errors_even_without_the_guard(engine, sql, request):
    db = request.getfixturevalue("pg_customer_db" if engine == "pg" else "mysql_customer_db")
    with pytest.raises(QueryError) as raised:
        execute_readonly(engine=db.engine, dsn=db.dsn, sql=sql, row_cap=5, timeout_ms=5000)
    error = raised.value
    assert NAME not in str(error) and PHONE not in str(error) and "1234" not in str(error)
    assert error.error_class  # SQLSTATE / MySQL error number


@pytest.mark.parametrize(
    ("message", "words", "expected"),
    [
        ('invalid input syntax for type integer: "김민준"', {"name"}, 'invalid input syntax for type integer: "…"'),
        ('column "nme" does not exist', {"nme"}, 'column "nme" does not exist'),
        ('column "nme" does not exist', set(), 'column "…" does not exist'),
        ("XPATH syntax error: '~010-1234-5678'", set(), 'XPATH syntax error: "…"'),
        ("XPATH syntax error: ~010-1234-5678", set(), "XPATH syntax error: …"),
        ("Unknown column 'x' in 'field list'", {"x"}, "Unknown column 'x' in \"…\""),
        ('unterminated "abc 010-1234', set(), 'unterminated "…"'),
        ("a 'it''s' b", set(), 'a "…" b'),
        ("Key (email)=(a@b.c) already exists", set(), "Key (email)=(…) already exists"),
        ("first line\nDETAIL: 김민준", set(), "first line"),
        # Unquoted values: after the first ": ", and numbers anywhere.
        ("date field value out of range: 2020-1012345678-01", set(), "date field value out of range: …"),
        ('invalid value for parameter "start": -44608', {"start"}, 'invalid value for parameter "start": …'),
        ("no such column: nme", {"nme"}, "no such column: nme"),
        ("no such column: 김민준", set(), "no such column: …"),
        ("value too long for type character varying(3)", set(), "value too long for type character varying(…)"),
    ],
)
def test_scrub_error_message(message, words, expected):
    assert scrub_error_message(message, frozenset(words)) == expected


def test_statement_words_are_identifiers_not_literals():
    words = statement_words("SELECT \"Name\", cast(x AS int) FROM t WHERE y = '김민준' -- 010", "postgres")
    assert {"name", "x", "t", "y", "cast"} <= words
    assert "김민준" not in words and "010" not in words


# --- column names ----------------------------------------------------------------------


def test_a_column_alias_made_of_a_vaulted_value_is_masked(governed):
    governed.run("SELECT name FROM customers WHERE id = 1")  # the vault now holds the name
    quote = "`" if governed.db.engine == "mysql" else '"'
    payload, outcome = governed.run(f"SELECT city AS {quote}{NAME}{quote} FROM customers WHERE id = 1")
    assert _clear_of(NAME, payload)


# --- pinned session settings -----------------------------------------------------------


def test_postgres_session_pins_standard_strings_and_search_path(pg_customer_db):
    import psycopg

    reader = pg_customer_db.dsn.split("//", 1)[1].split(":", 1)[0]
    with psycopg.connect(pg_customer_db.admin_dsn, autocommit=True) as admin:
        admin.execute(f'ALTER ROLE "{reader}" SET standard_conforming_strings = off')
        admin.execute(f'ALTER ROLE "{reader}" SET search_path = pg_catalog, information_schema')
    try:
        result = execute_readonly(
            engine="postgresql",
            dsn=pg_customer_db.dsn,
            sql="SELECT current_setting('standard_conforming_strings'), current_setting('search_path'), 'a\\'",
            row_cap=1,
            timeout_ms=5000,
        )
    finally:
        with psycopg.connect(pg_customer_db.admin_dsn, autocommit=True) as admin:
            admin.execute(f'ALTER ROLE "{reader}" RESET ALL')
    assert result.rows == [("on", '"public"', "a\\")]


def test_mysql_session_pins_sql_mode(mysql_customer_db):
    import pymysql

    admin = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
    with admin.cursor() as cursor:
        cursor.execute("SELECT @@GLOBAL.sql_mode")
        (saved,) = cursor.fetchone()
        cursor.execute("SET GLOBAL sql_mode = 'ANSI,NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT'")
    try:
        result = execute_readonly(
            engine="mysql",
            dsn=mysql_customer_db.dsn,
            sql="SELECT @@SESSION.sql_mode, 'a\\'b', \"c\"",
            row_cap=1,
            timeout_ms=5000,
        )
    finally:
        with admin.cursor() as cursor:
            cursor.execute("SET GLOBAL sql_mode = %s", (saved,))
        admin.close()
    mode, backslash, quoted = result.rows[0]
    assert "ANSI_QUOTES" not in mode and "NO_BACKSLASH_ESCAPES" not in mode and "PIPES_AS_CONCAT" not in mode
    assert backslash == "a'b" and quoted == "c"


# --- account hygiene ----------------------------------------------------------------------


SUPERUSER_DSNS = {
    "postgresql": "postgresql://postgres@127.0.0.1:5432/postgres",
    "mysql": "mysql://root@127.0.0.1:3306/mysql",
}


@pytest.mark.parametrize("engine", ["postgresql", "mysql"])
def test_the_executor_refuses_an_account_that_can_do_more_than_read(engine, django_user_model, request):
    from governance.services import db_connection_set_stored_dsn

    db = request.getfixturevalue("pg_customer_db" if engine == "postgresql" else "mysql_customer_db")
    governed = governed_connection(db, django_user_model)
    payload, outcome = governed.run("SELECT count(*) FROM customers")
    assert outcome == "success", payload
    db_connection_set_stored_dsn(connection=governed.connection, dsn=db.admin_dsn)
    payload, outcome = governed.run("SELECT count(*) FROM customers")
    assert outcome == "denied"
    assert "SELECT" in payload["error"] and "account" in payload["error"]
    assert governed.audit_rows()[-1].call_outcome == "denied"


@pytest.mark.parametrize("engine", ["postgresql", "mysql"])
def test_registering_or_analysing_a_superuser_dsn_is_refused(engine, admin_client, request):
    from governance.models import DbConnection
    from governance.schema_analysis import schema_analysis_run
    from governance.services import GovernanceError, db_connection_set_stored_dsn

    db = request.getfixturevalue("pg_customer_db" if engine == "postgresql" else "mysql_customer_db")
    form = {
        "name": "risky",
        "business_summary": "",
        "engine": engine,
        "exposure": "internal_only",
        "dsn_env": "",
        "stored_dsn": db.admin_dsn,
        "row_cap": "500",
        "statement_timeout_ms": "15000",
        "schemas": "[]",
    }
    response = admin_client.post("/admin/governance/dbconnection/add/", form)
    assert response.status_code == 200 and not DbConnection.objects.filter(name="risky").exists()
    assert "SELECT" in response.content.decode()
    form["stored_dsn"] = db.dsn
    response = admin_client.post("/admin/governance/dbconnection/add/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    connection = DbConnection.objects.get(name="risky")
    db_connection_set_stored_dsn(connection=connection, dsn=db.admin_dsn)
    with pytest.raises(GovernanceError):
        schema_analysis_run(connection_id=connection.pk)


# --- row counts ----------------------------------------------------------------------------

ROW_COUNT_LEAKS = {
    "pg": "SELECT 1 FROM customers c, generate_series(1, ascii(substr(c.name, 1, 1))) WHERE c.id = 1",
    "mysql": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 70000) "
        "SELECT n.i FROM n, customers c WHERE c.id = 1 AND n.i <= ascii(c.name)"
    ),
    "sqlite": (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 70000) "
        "SELECT n.i FROM n, customers c WHERE c.id = 1 AND n.i <= unicode(c.name)"
    ),
}


def test_a_query_whose_row_count_personal_data_decides_is_refused(governed):
    payload, outcome = governed.run(ROW_COUNT_LEAKS[_engine_key(governed)])
    assert outcome == "denied", payload
    assert "how many rows" in payload["error"]
    # Filtering rows by personal data is a count, and stays allowed.
    payload, outcome = governed.run("SELECT id FROM customers WHERE name LIKE '김%'")
    assert outcome == "success" and payload["rows"] == [[1]], payload
