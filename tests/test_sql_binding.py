"""The binder's rewrite and its token-level verification, without a server
(tests/test_sql_binding_pg.py runs the same on a real database with
look-alike functions and operators)."""

from __future__ import annotations

import pytest

from governance.sql.binding import BOUND_OPERATORS, BindError, bind_postgres, unbound_reason
from governance.sql.guard import analyse_sql

# (statement, a piece its binding must contain)
REWRITES = [
    ("SELECT lower(name) FROM t", "pg_catalog.LOWER(name)"),
    ("SELECT count(*) FROM t", "pg_catalog.COUNT(*)"),
    ("SELECT a FROM t WHERE a = 1", "(a OPERATOR(pg_catalog.=) 1)"),
    ("SELECT a <> b, a != b FROM t", "(a OPERATOR(pg_catalog.<>) b)"),
    ("SELECT a + b * c FROM t", "(a OPERATOR(pg_catalog.+) (b OPERATOR(pg_catalog.*) c))"),
    ("SELECT (a + b) * c FROM t", "OPERATOR(pg_catalog.*) c"),
    ("SELECT a || b FROM t", "(a OPERATOR(pg_catalog.||) b)"),
    ("SELECT a FROM t WHERE a IN (1, 2)", "((a OPERATOR(pg_catalog.=) 1) OR (a OPERATOR(pg_catalog.=) 2))"),
    ("SELECT a FROM t WHERE a NOT IN (1, 2)", "NOT ((a OPERATOR(pg_catalog.=) 1)"),
    ("SELECT a FROM t WHERE a IN (SELECT b FROM u)", "(a OPERATOR(pg_catalog.=) ANY (SELECT b FROM u))"),
    ("SELECT a FROM t WHERE a BETWEEN 1 AND 5", "((a OPERATOR(pg_catalog.>=) 1) AND (a OPERATOR(pg_catalog.<=) 5))"),
    ("SELECT a FROM t WHERE a LIKE 'x%'", "(a OPERATOR(pg_catalog.~~) 'x%')"),
    ("SELECT a FROM t WHERE a ILIKE 'x%'", "(a OPERATOR(pg_catalog.~~*) 'x%')"),
    ("SELECT a FROM t WHERE a NOT LIKE 'x%'", "(NOT (a OPERATOR(pg_catalog.~~) 'x%'))"),
    ("SELECT a FROM t WHERE a NOT ILIKE 'x%'", "(NOT (a OPERATOR(pg_catalog.~~*) 'x%'))"),
    ("SELECT a FROM t WHERE a NOT BETWEEN 1 AND 2", "NOT ((a OPERATOR(pg_catalog.>=) 1)"),
    ("SELECT a FROM t WHERE a NOT SIMILAR TO 'x'", "NOT (a OPERATOR(pg_catalog.~)"),
    ("SELECT a FROM t WHERE a !~ 'x'", "NOT (a OPERATOR(pg_catalog.~) 'x')"),
    ("SELECT a FROM t WHERE a LIKE 'x!%' ESCAPE '!'", "OPERATOR(pg_catalog.~~) pg_catalog.like_escape('x!%', '!')"),
    ("SELECT a FROM t WHERE a SIMILAR TO 'x%'", "OPERATOR(pg_catalog.~) pg_catalog.similar_to_escape('x%'))"),
    ("SELECT a FROM t WHERE a ~ '^x'", "(a OPERATOR(pg_catalog.~) '^x')"),
    ("SELECT a FROM t WHERE a ~* '^x'", "(a OPERATOR(pg_catalog.~*) '^x')"),
    ("SELECT CASE a WHEN 1 THEN 'x' END FROM t", "CASE WHEN (a OPERATOR(pg_catalog.=) 1) THEN 'x' END"),
    ("SELECT nullif(a, 0) FROM t", "(CASE WHEN (a OPERATOR(pg_catalog.=) 0) THEN NULL ELSE a END)"),
    ("SELECT a IS DISTINCT FROM b FROM t", "ELSE (a OPERATOR(pg_catalog.<>) b) END"),
    ("SELECT a IS NOT DISTINCT FROM b FROM t", "ELSE (a OPERATOR(pg_catalog.=) b) END"),
    ("SELECT -a FROM t", "(a OPERATOR(pg_catalog.*) (-1))"),
    ("SELECT -1, - 2.5", "SELECT -1, -2.5"),
    ("SELECT CASE WHEN a > 0 THEN -1 ELSE -2 END FROM t", "THEN -1 ELSE -2 END"),
    ("SELECT round(x, -1), ARRAY[-1] FROM t", "pg_catalog.ROUND(x, -1), ARRAY[-1]"),
    ("SELECT ~a FROM t", "(a OPERATOR(pg_catalog.#) (-1))"),
    ("SELECT j -> 'a', j ->> 'b' FROM t", "(j OPERATOR(pg_catalog.->) 'a'), (j OPERATOR(pg_catalog.->>) 'b')"),
    ("SELECT j #> '{a}', j #>> '{a}' FROM t", "(j OPERATOR(pg_catalog.#>) '{a}')"),
    ("SELECT j @> '{}', a <@ b, a && b FROM t", "(a OPERATOR(pg_catalog.&&) b)"),
    ("SELECT j ? 'k' FROM t", "(j OPERATOR(pg_catalog.?) 'k')"),
    ("SELECT v @@ q FROM t", "(v OPERATOR(pg_catalog.@@) q)"),
    ("SELECT * FROM generate_series(1, 3) AS g(n)", "FROM pg_catalog.GENERATE_SERIES(1, 3) AS g(n)"),
    ("SELECT sum(a) FILTER (WHERE a > 0) FROM t", "pg_catalog.SUM(a) FILTER(WHERE (a OPERATOR(pg_catalog.>) 0))"),
    ("SELECT row_number() OVER (ORDER BY a) FROM t", "pg_catalog.ROW_NUMBER() OVER (ORDER BY a)"),
    ("SELECT pg_catalog.lower(a) FROM t", "pg_catalog.lower(a)"),
    ('SELECT "pg_catalog".lower(a) FROM t', '"pg_catalog".lower(a)'),
    ("SELECT (a, b) < (c, d) FROM t", "((a, b) OPERATOR(pg_catalog.<) (c, d))"),
    ("SELECT a = ANY (ARRAY[1, 2]) FROM t", "(a OPERATOR(pg_catalog.=) ANY(ARRAY[1, 2]))"),
    # sqlglot renders to_hex as HEX, which PostgreSQL lacks: the written name is kept
    ("SELECT to_hex(id) FROM t", "pg_catalog.to_hex(id)"),
    ("SELECT ROW(c.*) FROM t AS c", "ROW(c.*)"),
    ("SELECT a FROM t GROUP BY (a) ORDER BY (a)", "GROUP BY (a) ORDER BY (a)"),
    ("SELECT a FROM t ORDER BY a ROWS", None),  # parse error path below handles it
]


@pytest.mark.parametrize(("sql", "piece"), [r for r in REWRITES if r[1]], ids=[r[0][:60] for r in REWRITES if r[1]])
def test_binding_rewrites_to_pg_catalog(sql: str, piece: str) -> None:
    bound = bind_postgres(sql).sql
    assert piece in bound
    assert unbound_reason(bound) is None
    # the bound text is itself a query the guard accepts, reading the same tables
    original, again = analyse_sql(sql, "postgres"), analyse_sql(bound, "postgres")
    if original.allowed:
        assert again.allowed, again.reason
        assert again.tables == original.tables


# Grammar forms PostgreSQL binds to pg_catalog itself stay as they are.
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT substring(a FROM 1 FOR 2) FROM t",
        "SELECT position('x' IN a) FROM t",
        "SELECT trim(both ' ' FROM a) FROM t",
        "SELECT extract(year FROM a) FROM t",
        "SELECT a AT TIME ZONE 'UTC' FROM t",
        "SELECT coalesce(a, b), greatest(a, b), least(a, b) FROM t",
        "SELECT CAST(a AS int), a::numeric(10, 2) FROM t",
        "SELECT EXISTS (SELECT 1 FROM t)",
        "SELECT current_date, current_timestamp",
        "SELECT (a, b) OVERLAPS (c, d) FROM t",
        "SELECT sum(a) OVER (ORDER BY b ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
        "WITH r(n) AS (SELECT 1) SELECT n FROM r",
        "SELECT a FROM t WHERE a IS NULL AND b IS NOT TRUE",
    ],
)
def test_grammar_bound_forms_pass_verification(sql: str) -> None:
    assert unbound_reason(bind_postgres(sql).sql) is None


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT * FROM a JOIN b USING (id)", "USING"),
        ("SELECT * FROM a NATURAL JOIN b", "NATURAL"),
        ("SELECT a FROM t WHERE a BETWEEN SYMMETRIC 1 AND 2", "SYMMETRIC"),
        ("SELECT 'x'::mood", "not built in"),
        ("SELECT CAST(a AS public.t) FROM t", "not built in"),
        ("SELECT 1; SELECT 2", "exactly one statement"),
        ("SELECT (", "could not be parsed"),
    ],
)
def test_what_cannot_be_bound_is_refused(sql: str, reason: str) -> None:
    with pytest.raises(BindError) as raised:
        bind_postgres(sql)
    assert reason in str(raised.value)


# The verification on tokens catches whatever the rewrite would have missed.
@pytest.mark.parametrize(
    ("rendered", "reason"),
    [
        ("SELECT a = b FROM t", "operator not bound"),
        ("SELECT a || b FROM t", "operator not bound"),
        ("SELECT a + 1 FROM t", "operator not bound"),
        ("SELECT a - 1 FROM t", "operator not bound"),
        ("SELECT a * b FROM t", "operator not bound"),
        ("SELECT j -> 'a' FROM t", "operator not bound"),
        ("SELECT a OPERATOR(public.=) b FROM t", "operator not bound"),
        ("SELECT a OPERATOR(pg_catalog.<->) b FROM t", "operator not bound"),
        ("SELECT lower(a) FROM t", "function not bound to pg_catalog: lower"),
        ("SELECT public.lower(a) FROM t", "function not bound to pg_catalog: lower"),
        ('SELECT "PG_CATALOG".lower(a) FROM t', "function not bound"),
        ('SELECT a OPERATOR("PG_CATALOG".=) b FROM t', "operator not bound"),
        ("SELECT nullif(a, b) FROM t", "function not bound to pg_catalog: nullif"),
        ("SELECT substring(a, 1, 2) FROM t", None),  # substring is grammar-bound only with FROM: see below
        ("SELECT a FROM t WHERE a IN (1, 2)", "IN"),
        ("SELECT a FROM t WHERE a LIKE 'x'", "LIKE"),
        ("SELECT a FROM t WHERE a ILIKE 'x'", "ILIKE"),
        ("SELECT a FROM t WHERE a BETWEEN 1 AND 2", "BETWEEN"),
        ("SELECT a FROM t WHERE a IS DISTINCT FROM b", "IS"),
        ("SELECT CASE a WHEN 1 THEN 2 END FROM t", "CASE x WHEN"),
        ("SELECT * FROM a JOIN b USING (id)", "USING"),
        ("SELECT * FROM generate_series(1, 2)", "function not bound"),
        # a minus after something that ends an operand is the binary operator
        ("SELECT CASE WHEN a THEN 1 END - 1 FROM t", "operator not bound"),
        ("SELECT NULL - 1", "operator not bound"),
        ("SELECT CURRENT_DATE - 1", "operator not bound"),
        ("SELECT a.b - 1 FROM t AS a", "operator not bound"),
    ],
)
def test_verification_refuses_unbound_text(rendered: str, reason: str | None) -> None:
    found = unbound_reason(rendered)
    if reason is None:
        return
    assert found is not None and reason in found


def test_substring_without_keywords_is_bound_as_a_call() -> None:
    # sqlglot renders substring(a, 1, 2) in keyword form, which the grammar binds.
    assert "SUBSTRING(a FROM 1 FOR 2)" in bind_postgres("SELECT substring(a, 1, 2) FROM t").sql


def test_a_bound_statement_names_no_user_schema() -> None:
    sql = (
        "SELECT c.city, count(*), sum(o.amount) FILTER (WHERE o.amount > 10), string_agg(c.name, ',') "
        "FROM customers c JOIN orders o ON o.customer_id = c.id "
        "WHERE c.email ILIKE '%@example.com' AND o.amount BETWEEN 1 AND 100 AND c.city IN ('a', 'b') "
        "GROUP BY c.city HAVING count(*) > 1 ORDER BY 2 DESC"
    )
    bound = bind_postgres(sql)
    assert unbound_reason(bound.sql) is None
    assert bound.tables == ('"customers"', '"orders"')
    assert "public" not in bound.sql


def test_guard_accepts_only_pg_catalog_standard_operators() -> None:
    assert analyse_sql("SELECT a OPERATOR(pg_catalog.=) 1 FROM t", "postgres").allowed
    assert analyse_sql("SELECT a OPERATOR(pg_catalog.~~*) 'x' FROM t", "postgres").allowed
    for other in ("public.=", "pg_catalog.<->", "myschema.||"):
        verdict = analyse_sql(f"SELECT a OPERATOR({other}) 1 FROM t", "postgres")
        assert not verdict.allowed and other in verdict.reason
    assert not analyse_sql("SELECT a OPERATOR(pg_catalog.=) 1 FROM t", "mysql").allowed
    assert "pg_catalog.=" in BOUND_OPERATORS


def test_attribute_notation_and_whole_rows_are_reported_for_the_catalog_check() -> None:
    bound = bind_postgres("SELECT p.nickname, to_jsonb(p) FROM people p WHERE p.id = 1")
    assert "nickname" in bound.names
    # an explicit output column of a subquery is no attribute-notation candidate
    assert "count" not in bind_postgres("SELECT s.count FROM (SELECT count(*) AS count FROM t) s").names
    assert "to_json" in bind_postgres("SELECT s.to_json FROM (SELECT * FROM t) s").names
    assert bound.whole_row
    assert not bind_postgres("SELECT id, name FROM people").whole_row
    # A column read as itself needs no cast check; one inside an expression does.
    assert bind_postgres("SELECT m, id FROM moods ORDER BY m").cast_names == ()
    assert bind_postgres("SELECT lower(m::text) FROM moods").cast_names == ("m",)
    assert bind_postgres("SELECT x FROM (SELECT m AS x FROM moods) s").cast_names is None


def test_the_guard_accepts_exactly_the_operators_the_binder_writes() -> None:
    from governance.sql.binding import OPERATORS

    assert {f"pg_catalog.{op}" for op in OPERATORS.values()} | {"pg_catalog.@@"} == set(BOUND_OPERATORS)


@pytest.mark.parametrize(
    "sql, allowed",
    [
        ("SELECT memo::tsvector FROM memos", True),
        ("SELECT memo::TSVECTOR FROM memos", True),
        ("SELECT CAST(memo AS tsquery) FROM memos", True),
        ("SELECT memo::public.tsvector FROM memos", False),  # a user schema's type
        ('SELECT memo::"TSVECTOR" FROM memos', False),  # quoted: another name
        ("SELECT memo::mood FROM memos", False),  # a user type
    ],
)
def test_catalog_types_sqlglot_does_not_know_bind_and_user_types_do_not(sql: str, allowed: bool) -> None:
    try:
        bind_postgres(sql)
    except BindError:
        assert not allowed
    else:
        assert allowed
