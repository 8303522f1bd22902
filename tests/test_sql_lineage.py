"""Tests for governance.pii.lineage: which output columns of a query are
derived from personal data and must be masked whole. Pure: no database."""

from __future__ import annotations

import re

import pytest

from governance.pii import lineage as sql_lineage
from governance.pii.detectors import PiiKind
from governance.pii.lineage import OutputColumn, classify_outputs
from governance.pii.lineage import classifier as lineage_classifier
from governance.pii.lineage import outputs as lineage_outputs

SCHEMA: dict[str, dict[str, str | None]] = {
    "customers": {"id": None, "name": "name", "phone": "phone", "email": "email", "city": None, "grade": None},
    "consultations": {"id": None, "customer_id": None, "category": None, "memo": None, "created_at": None},
    "orders": {"id": None, "customer_id": None, "amount": None, "product": None},
    "employees": {"id": None, "name": "name", "rrn": "rrn", "salary": None},
}

PG, MY, LITE = "postgres", "mysql", "sqlite"

# Kind used when every output is masked in doubt over customers: the most
# severe of its kinds (phone > email > name).
CUSTOMERS_DOUBT = "phone"
# Kind used for a relation outside the schema: the most severe kind of the
# whole connection (employees.rrn), since it may hold anything.
CONNECTION_DOUBT = "rrn"

# (dialect, sql, n_columns the database returned, {masked index: kind})
CASES: list[tuple[str, str, int, dict[int, str]]] = [
    # plain columns
    (PG, "SELECT id, name, phone, city FROM customers", 4, {1: "name", 2: "phone"}),
    # column and table aliases
    (PG, "SELECT c.name AS customer, c.city AS town FROM customers AS c", 2, {0: "name"}),
    # SELECT * expands in schema order
    (PG, "SELECT * FROM customers", 6, {1: "name", 2: "phone", 3: "email"}),
    # t.* between other columns
    (
        PG,
        "SELECT o.amount, c.*, o.product FROM orders o JOIN customers c ON c.id = o.customer_id",
        8,
        {2: "name", 3: "phone", 4: "email"},
    ),
    # join: the same column names in two tables, qualify tells them apart
    (
        PG,
        "SELECT c.id, c.name, e.name, e.rrn, e.salary FROM customers c JOIN employees e ON e.id = c.id",
        5,
        {1: "name", 2: "name", 3: "rrn"},
    ),
    (PG, "SELECT o.id, c.id FROM orders o JOIN customers c ON c.id = o.customer_id", 2, {}),
    # unqualified names that only one joined table has
    (PG, "SELECT rrn, amount FROM employees e JOIN orders o ON o.id = e.id", 2, {0: "rrn"}),
    # CTE renaming a PII column
    (
        PG,
        "WITH contacts AS (SELECT id AS customer_key, phone AS reach FROM customers) "
        "SELECT customer_key, reach FROM contacts",
        2,
        {1: "phone"},
    ),
    # CTE column list renames too
    (PG, "WITH x(a, b) AS (SELECT city, email FROM customers) SELECT b, a FROM x", 2, {0: "email"}),
    # nested subqueries in FROM
    (
        PG,
        "SELECT x.who, x.town FROM (SELECT y.n AS who, y.city AS town FROM "
        "(SELECT name AS n, city FROM customers) y) x",
        2,
        {0: "name"},
    ),
    # scalar subqueries in SELECT (correlated)
    (
        PG,
        "SELECT o.id, (SELECT c.phone FROM customers c WHERE c.id = o.customer_id) AS buyer_phone, o.amount "
        "FROM orders o",
        3,
        {1: "phone"},
    ),
    (PG, "SELECT c.city, (SELECT COUNT(*) FROM orders o WHERE o.customer_id = c.id) FROM customers c", 2, {}),
    # expressions over PII: concat / upper / substring / lower
    (
        PG,
        "SELECT upper(name), substring(phone, 1, 3), name || ' (' || city || ')', concat(city, email), lower(city) "
        "FROM customers",
        5,
        {0: "name", 1: "phone", 2: "name", 3: "email"},
    ),
    # COUNT(*) vs COUNT(phone) vs COUNT(DISTINCT phone) vs MAX / MIN
    (
        PG,
        "SELECT COUNT(*), COUNT(phone), COUNT(DISTINCT phone), MAX(phone), MIN(email) FROM customers",
        5,
        {3: "phone", 4: "email"},
    ),
    # string_agg (PostgreSQL), group_concat (MySQL, SQLite)
    (PG, "SELECT city, string_agg(name, ', ') FROM customers GROUP BY city", 2, {1: "name"}),
    (MY, "SELECT city, GROUP_CONCAT(name SEPARATOR ', '), COUNT(*) FROM customers GROUP BY city", 3, {1: "name"}),
    (LITE, "SELECT group_concat(email, ';') FROM customers", 1, {0: "email"}),
    # CASE: a condition on PII leaks a property of it; masked
    (
        PG,
        "SELECT CASE WHEN phone LIKE '010%' THEN 'mobile' ELSE 'other' END AS phone_type, "
        "CASE WHEN grade = 'VIP' THEN 'vip' ELSE 'normal' END FROM customers",
        2,
        {0: "phone"},
    ),
    # UNION: PII only in the second branch
    (PG, "SELECT category, memo FROM consultations UNION ALL SELECT city, name FROM customers", 2, {1: "name"}),
    (
        PG,
        "(SELECT city FROM customers) UNION (SELECT product FROM orders) UNION (SELECT rrn FROM employees) "
        "ORDER BY 1 LIMIT 5",
        1,
        {0: "rrn"},
    ),
    # window functions: a rank over ORDER BY name orders names, PARTITION BY
    # phone groups by it - the window spec taints like the argument
    (
        PG,
        "SELECT id, ROW_NUMBER() OVER (PARTITION BY phone ORDER BY name), RANK() OVER (ORDER BY email), "
        "SUM(id) OVER (PARTITION BY phone), FIRST_VALUE(name) OVER (ORDER BY id) FROM customers",
        5,
        {1: "phone", 2: "email", 3: "phone", 4: "name"},
    ),
    # literal columns
    (PG, "SELECT 1 AS one, 'fixed' AS label, NULL, name FROM customers", 4, {3: "name"}),
    # GROUP BY city with a count
    (PG, "SELECT city, COUNT(*) AS n FROM customers GROUP BY city ORDER BY n DESC", 2, {}),
    # length() says something about the characters (length(name) per row, with
    # other functions, spells it out): tainted like any function
    (
        PG,
        "SELECT length(phone), char_length(name), octet_length(email) FROM customers",
        3,
        {0: "phone", 1: "name", 2: "email"},
    ),
    # a predicate over PII in the select list is derived from it
    (PG, "SELECT phone IS NULL AS no_phone FROM customers", 1, {0: "phone"}),
    # EXISTS in an output is a per-row oracle: tainted by everything in it;
    # COUNT(...) FILTER is a count, the one exemption
    (
        PG,
        "SELECT id, EXISTS (SELECT * FROM employees e WHERE e.name = c.name), "
        "COUNT(*) FILTER (WHERE c.phone IS NULL) OVER () FROM customers c",
        3,
        {1: "rrn"},
    ),
    # PII only in WHERE / subquery filters
    (
        PG,
        "SELECT o.amount FROM orders o WHERE o.customer_id IN (SELECT id FROM customers WHERE phone LIKE '010%')",
        1,
        {},
    ),
    # the most severe kind wins when an output mixes several
    (PG, "SELECT name || ':' || rrn FROM employees", 1, {0: "rrn"}),
    # schema-qualified table, quoted identifiers in any case
    (PG, "SELECT c.phone FROM public.customers c", 1, {0: "phone"}),
    (PG, 'SELECT "Name", C."PHONE", "city" FROM "Customers" C', 3, {0: "name", 1: "phone"}),
    # PostgreSQL whole-row references carry every column
    (PG, "SELECT c FROM customers c", 1, {0: CUSTOMERS_DOUBT}),
    (PG, "SELECT row_to_json(c) FROM customers c", 1, {0: CUSTOMERS_DOUBT}),
    # recursive CTE: values flow through the recursion
    (
        PG,
        "WITH RECURSIVE r(a, b, depth) AS (SELECT id, rrn, 1 FROM employees "
        "UNION ALL SELECT b, a, depth + 1 FROM r WHERE depth < 3) SELECT a, depth FROM r",
        2,
        {0: "rrn"},
    ),
    # LATERAL, UNNEST, table functions
    (PG, "SELECT l.n, l.m FROM customers c, LATERAL (SELECT c.name AS n, 1 AS m) l", 2, {0: "name"}),
    (PG, "SELECT u FROM customers c, unnest(ARRAY[c.email, c.city]) AS t(u)", 1, {0: "email"}),
    (LITE, "SELECT j.value FROM customers c, json_each(c.name) j", 1, {0: "name"}),
    # MySQL backticks, SQLite concatenation
    (MY, "SELECT `c`.`name`, `c`.`city` FROM `customers` AS `c`", 2, {0: "name"}),
    (MY, "SELECT name, COUNT(*) FROM customers GROUP BY name", 2, {0: "name"}),
    (LITE, "SELECT name || ' ' || phone AS contact, city FROM customers", 2, {0: "phone"}),
    (LITE, "SELECT * FROM employees", 4, {1: "name", 2: "rrn"}),
    # nothing the query reads has personal data
    (PG, "SELECT o.product, SUM(o.amount) FROM orders o GROUP BY o.product", 2, {}),
    (PG, "SELECT * FROM consultations", 5, {}),
    (PG, "VALUES (1, 'a')", 2, {}),
    # --- fallbacks ---
    # unknown table (catalog, statistics view, unclassified table): its
    # columns may hold anything, masked when the connection has personal data
    (
        PG,
        "SELECT c.name, u.score, c.city FROM customers c JOIN loyalty u ON u.customer_id = c.id",
        3,
        {0: "name", 1: CONNECTION_DOUBT},
    ),
    # unknown table behind `*`: names cannot be mapped -> everything masked
    (
        PG,
        "SELECT * FROM customers c JOIN loyalty u ON u.customer_id = c.id",
        9,
        dict.fromkeys(range(9), CONNECTION_DOUBT),
    ),
    # unknown table alone: may hold anything -> masked
    (PG, "SELECT * FROM loyalty", 3, dict.fromkeys(range(3), CONNECTION_DOUBT)),
    # parse failure: tables found by word, everything masked; with no table
    # found, what it reads is unknown -> masked with the connection's kind
    (PG, "SELEC name, city FROM customers", 2, {0: CUSTOMERS_DOUBT, 1: CUSTOMERS_DOUBT}),
    (PG, "SELEC memo FROM consultations", 1, {0: CONNECTION_DOUBT}),
    # the database returned a different number of columns (stale schema)
    (PG, "SELECT * FROM customers", 7, dict.fromkeys(range(7), CUSTOMERS_DOUBT)),
    # a CTE named like the table it reads: never the "no personal data" path
    (PG, "WITH customers AS (SELECT name FROM customers) SELECT * FROM customers", 1, {0: CUSTOMERS_DOUBT}),
    # more than one statement
    (PG, "SELECT city FROM customers; SELECT 1", 1, {0: CUSTOMERS_DOUBT}),
    # PII tables read, no PII column named, no star, no whole row: nothing masked
    (MY, "SELECT city, COUNT(*) FROM customers GROUP BY city", 2, {}),
    (LITE, "SELECT c.grade, count(*) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.grade", 2, {}),
    (PG, "SELECT e.salary FROM employees e WHERE e.id IN (SELECT customer_id FROM orders)", 1, {}),
]


def _case_id(index: int, dialect: str, sql: str) -> str:
    text = re.sub(r"\s+", " ", sql)
    return f"{index:02d}-{dialect}-{text[:60]}"


def _masked(outputs: list[OutputColumn]) -> dict[int, str]:
    return {o.index: o.pii_kind for o in outputs if o.pii_kind}


def test_case_table_covers_all_dialects() -> None:
    assert len(CASES) >= 20
    assert {dialect for dialect, *_ in CASES} == set(sql_lineage.SUPPORTED_DIALECTS)


@pytest.mark.parametrize(
    ("dialect", "sql", "n_columns", "expected"),
    CASES,
    ids=[_case_id(i, d, s) for i, (d, s, _, _) in enumerate(CASES)],
)
def test_masked_outputs(dialect: str, sql: str, n_columns: int, expected: dict[int, str]) -> None:
    outputs = classify_outputs(sql, dialect, SCHEMA, n_columns=n_columns)
    assert [o.index for o in outputs] == list(range(n_columns))
    assert _masked(outputs) == expected, [(o.index, o.pii_kind, o.reason) for o in outputs]
    for output in outputs:
        assert output.reason, "every decision says why"
        if output.pii_kind is None:
            assert not any(SCHEMA[t][c] for t, c in output.sources), output


# --- sources, reasons, names --------------------------------------------------------


def test_sources_and_reasons() -> None:
    outputs = classify_outputs(
        "SELECT c.phone, COUNT(DISTINCT c.phone), c.city, 'x', max(name || email) FROM customers c GROUP BY 1, 3",
        PG,
        SCHEMA,
        n_columns=5,
    )
    phone, count, city, literal, mixed = outputs
    assert phone == OutputColumn(
        0, "phone", "phone", (("customers", "phone"),), "derived from customers.phone", unchanged=True
    )
    assert not mixed.unchanged  # computed: its cells get tokens of their own
    assert (count.pii_kind, count.sources, count.reason) == (None, (), "count only")
    assert (city.pii_kind, city.sources) == (None, (("customers", "city"),))
    assert literal.pii_kind is None and "literal" in literal.reason
    # PII sources first, most severe first: the caller takes sources[0] as the origin.
    assert mixed.pii_kind == "email"
    assert mixed.sources == (("customers", "email"), ("customers", "name"))
    # Grouping by an EXPRESSION of personal data shapes every output (row choice by value).
    grouped = classify_outputs("SELECT c.city, count(*) FROM customers c GROUP BY 1, name || email", PG, SCHEMA, 2)
    assert [o.pii_kind for o in grouped] == ["email", "email"]


def test_fallback_reasons_say_lineage_unresolved() -> None:
    # `score` is unqualified next to an unknown table: the walk cannot place it
    by_name = classify_outputs("SELECT c.name, score, c.id FROM customers c JOIN loyalty u ON 1 = 1", PG, SCHEMA, 3)
    assert by_name[0].reason.startswith("lineage unresolved: column 'score' not resolved")
    assert "customers.name" in by_name[0].reason
    assert by_name[0].sources == (("customers", "name"),)
    # it may come from the unknown table: masked in doubt
    assert by_name[1].pii_kind == CONNECTION_DOUBT and by_name[1].reason.startswith("lineage unresolved")
    assert by_name[2].pii_kind is None and by_name[2].reason.startswith("lineage unresolved")
    doubt = classify_outputs("SELECT * FROM customers", PG, SCHEMA, n_columns=7)
    assert all(o.reason == "lineage unresolved: 7 columns returned, 6 resolved; masked (doubt)" for o in doubt)
    parse = classify_outputs("SELEC name FROM customers", PG, SCHEMA, n_columns=1)
    assert parse[0].reason == "lineage unresolved: parse error; masked (doubt)"


def test_output_names_best_effort() -> None:
    names = [o.name for o in classify_outputs("SELECT c.*, upper(c.name) AS up, count(*) FROM customers c", PG, SCHEMA)]
    assert names == ["id", "name", "phone", "email", "city", "grade", "up", "count"]
    mysql = [o.name for o in classify_outputs("SELECT `Name` AS `Full`, city FROM customers", MY, SCHEMA)]
    assert mysql == ["Full", "city"]


def test_without_n_columns_the_select_list_counts() -> None:
    outputs = classify_outputs("SELECT * FROM customers", PG, SCHEMA)
    assert _masked(outputs) == {1: "name", 2: "phone", 3: "email"}
    assert classify_outputs("SELECT city FROM customers", PG, SCHEMA)[0].pii_kind is None


# --- schema keys -------------------------------------------------------------------------


def test_qualified_schema_keys() -> None:
    schema = {"crm.customers": SCHEMA["customers"], "orders": SCHEMA["orders"]}
    # the query leaves out the schema the key has
    outputs = classify_outputs("SELECT c.phone, o.amount FROM customers c JOIN orders o ON 1 = 1", PG, schema, 2)
    assert _masked(outputs) == {0: "phone"}
    assert outputs[0].sources == (("crm.customers", "phone"),)
    # both written out
    assert _masked(classify_outputs("SELECT phone FROM crm.customers", PG, schema, 1)) == {0: "phone"}


def test_ambiguous_bare_table_name_falls_back() -> None:
    schema = {"a.people": {"id": None, "phone": "phone"}, "b.people": {"id": None, "rrn": "rrn"}}
    outputs = classify_outputs("SELECT id, phone FROM people", PG, schema, 2)
    # which schema's table is read depends on the search path: names decide
    assert _masked(outputs) == {1: "phone"}
    assert outputs[0].reason.startswith("lineage unresolved")


# --- fail closed -------------------------------------------------------------------------


def _raise(*args, **kwargs):
    raise RuntimeError("boom")


def test_exception_inside_lineage_falls_back(monkeypatch) -> None:
    monkeypatch.setattr(lineage_outputs, "qualify", _raise)
    outputs = classify_outputs("SELECT name, city, phone FROM customers", PG, SCHEMA, n_columns=3)
    assert _masked(outputs) == {0: "name", 2: "phone"}
    assert "RuntimeError" in outputs[1].reason
    monkeypatch.setattr(lineage_outputs, "traverse_scope", _raise)
    outputs = classify_outputs("WITH x AS (SELECT name AS n FROM customers) SELECT n FROM x", PG, SCHEMA, 1)
    assert _masked(outputs) == {0: CUSTOMERS_DOUBT}


def test_exception_anywhere_masks_everything(monkeypatch) -> None:
    monkeypatch.setattr(sql_lineage._Classifier, "run", _raise)
    outputs = classify_outputs("SELECT city FROM customers", PG, SCHEMA, n_columns=2)
    assert _masked(outputs) == {0: "rrn", 1: "rrn"}  # most severe kind in the whole schema
    assert outputs[0].reason == "internal error: RuntimeError; masked (doubt)"


def test_parser_exception_falls_back(monkeypatch) -> None:
    # Both ways lineage reads a statement: the shared parse, and a copy of its own.
    monkeypatch.setattr(lineage_classifier, "parse_sql", _raise)
    monkeypatch.setattr(lineage_classifier, "parsed", _raise)
    outputs = classify_outputs("SELECT city FROM customers", PG, SCHEMA, n_columns=1)
    assert _masked(outputs) == {0: CUSTOMERS_DOUBT}


@pytest.mark.parametrize(
    ("sql", "dialect", "schema"),
    [
        (None, PG, SCHEMA),
        ("SELECT name FROM customers", "oracle", SCHEMA),
        ("SELECT name FROM customers", PG, None),
        ("SELECT name FROM customers", PG, {"customers": None}),
        ("SELECT " + " || ".join(["name"] * 3000) + " FROM customers", PG, SCHEMA),
        ("SELECT " + "(" * 500 + "name" + ")" * 500 + " FROM customers", PG, SCHEMA),
        ("", PG, SCHEMA),
    ],
    ids=["sql-none", "unknown-dialect", "schema-none", "table-none", "long-chain", "deep-parens", "empty"],
)
def test_odd_input_never_raises_and_never_unmasks_pii(sql, dialect, schema) -> None:
    outputs = classify_outputs(sql, dialect, schema, n_columns=1)
    assert len(outputs) == 1
    could_be_pii = schema is None or (schema is SCHEMA and sql)
    if could_be_pii:
        assert outputs[0].pii_kind is not None, outputs


def test_lineage_budget_bounds_pathological_recursion() -> None:
    # Every column of a recursive CTE feeding every other: the walk gives up
    # quickly and masks everything instead of exploring every path.
    cols = [f"c{i}" for i in range(10)]
    feed = ", ".join([" || ".join(cols)] * len(cols))
    sql = (
        f"WITH RECURSIVE r({', '.join(cols)}) AS (SELECT rrn{', id' * 9} FROM employees "
        f"UNION ALL SELECT {feed} FROM r) SELECT {', '.join(cols)} FROM r"
    )
    outputs = classify_outputs(sql, PG, SCHEMA, n_columns=10)
    assert _masked(outputs) == dict.fromkeys(range(10), "rrn")
    assert outputs[0].reason == "lineage unresolved: lineage too complex; masked (doubt)"


def test_fallback_matches_output_alias_and_whole_rows() -> None:
    outputs = classify_outputs(
        "SELECT u.x AS phone, u.y, c FROM customers c JOIN loyalty u ON u.id = c.id", PG, SCHEMA, n_columns=3
    )
    # u.x reads an unknown table (connection doubt, more severe than the alias's phone)
    assert _masked(outputs) == {0: CONNECTION_DOUBT, 1: CONNECTION_DOUBT, 2: CUSTOMERS_DOUBT}


def test_statement_shapes_without_lineage_mask_everything() -> None:
    several = classify_outputs("SELECT city FROM customers; SELECT 1", PG, SCHEMA, n_columns=1)
    assert several[0].reason == "lineage unresolved: expected one statement, got 2; masked (doubt)"
    explain = classify_outputs("EXPLAIN SELECT name FROM customers", PG, SCHEMA, n_columns=1)
    assert explain[0].pii_kind == CUSTOMERS_DOUBT
    assert explain[0].reason.startswith("lineage unresolved: not a query")


def test_engine_names_are_accepted() -> None:
    assert _masked(classify_outputs("SELECT phone FROM customers", "postgresql", SCHEMA, 1)) == {0: "phone"}


def test_severity_order_knows_every_kind() -> None:
    assert set(sql_lineage._SEVERITY) == {kind.value for kind in PiiKind}


# --- the "no PII column named" shortcut ---------------------------------------------

SHORTCUT_REASON = "no personal-data column is named in the query"


def test_shortcut_agrees_with_the_full_walk_on_every_case(monkeypatch) -> None:
    """Differential: every case of the table gives the same masked outputs
    with the shortcut as with the full lineage walk."""
    took_shortcut = 0
    for dialect, sql, n_columns, expected in CASES:
        outputs = classify_outputs(sql, dialect, SCHEMA, n_columns=n_columns)
        took_shortcut += any(o.reason == SHORTCUT_REASON for o in outputs)
        with monkeypatch.context() as patched:
            patched.setattr(lineage_classifier, "_may_reach_pii", lambda root, names: True)
            walked = classify_outputs(sql, dialect, SCHEMA, n_columns=n_columns)
        assert _masked(outputs) == _masked(walked) == expected, sql
    assert took_shortcut >= 5  # the comparison is not vacuous


@pytest.mark.parametrize(
    ("sql", "n_columns", "expected"),
    [
        ("SELECT count(*) FROM customers", 1, {}),
        ("SELECT city, count(*) AS n FROM customers WHERE city LIKE '서%' GROUP BY city", 2, {}),
        ("SELECT c.city, sum(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY 1", 2, {}),
    ],
)
def test_shortcut_taken_when_no_pii_column_is_named(sql: str, n_columns: int, expected: dict) -> None:
    outputs = classify_outputs(sql, PG, SCHEMA, n_columns=n_columns)
    assert _masked(outputs) == expected
    assert all(o.reason == SHORTCUT_REASON for o in outputs)


@pytest.mark.parametrize(
    ("sql", "n_columns"),
    [
        ("SELECT c FROM customers c", 1),  # PostgreSQL whole-row reference
        ("SELECT customers FROM customers", 1),
        ("SELECT to_json(x) FROM (SELECT * FROM customers) x", 1),
        ("SELECT x.* FROM customers x", 6),
        ("SELECT row_to_json(c) FROM customers AS c WHERE c.city = '서울'", 1),
        ("SELECT city FROM customers WHERE PHONE LIKE '010%'", 1),  # named (only in WHERE): walked
        ('SELECT "Name" FROM customers', 1),
    ],
)
def test_shortcut_not_taken_for_stars_whole_rows_and_named_pii(sql: str, n_columns: int) -> None:
    outputs = classify_outputs(sql, PG, SCHEMA, n_columns=n_columns)
    assert not any(o.reason == SHORTCUT_REASON for o in outputs), [o.reason for o in outputs]
    if "WHERE PHONE" not in sql:
        assert _masked(outputs), "every one of these outputs carries personal data"


@pytest.mark.parametrize(
    ("dialect", "sql", "n_columns"),
    [
        # PostgreSQL column-name lists rename columns by position
        (PG, "SELECT x.c3, x.b FROM (customers JOIN orders ON true) x(a, b, c3)", 2),
        (PG, "SELECT b FROM (customers NATURAL JOIN orders) AS x(a, b)", 1),
        (PG, "SELECT n FROM customers AS c(i, n, p, e)", 1),
        # SQLite reads a quoted string after a dot as a column name
        (LITE, "SELECT c.'name', c.'phone', c.'email' FROM customers c", 3),
        (LITE, "SELECT group_concat(c.'name') AS n FROM customers c", 1),
        (LITE, "WITH t AS (SELECT c.'name' AS z FROM customers c) SELECT z FROM t", 1),
        (LITE, "SELECT 'c'.'name' FROM customers c", 1),
        (LITE, "SELECT 'c'.name FROM customers c", 1),
        # MySQL under ANSI_QUOTES (db_exec turns it off; masked regardless)
        (MY, 'SELECT c."phone" FROM customers c', 1),
    ],
)
def test_renamed_or_oddly_named_columns_are_masked(dialect: str, sql: str, n_columns: int) -> None:
    """Found in review: names the shortcut (and the name-based fallback) could
    not see. Every output of these queries carries personal data."""
    outputs = classify_outputs(sql, dialect, SCHEMA, n_columns=n_columns)
    assert len(outputs) == n_columns
    assert all(o.pii_kind for o in outputs), [(o.index, o.pii_kind, o.reason) for o in outputs]


def test_a_column_count_the_parser_did_not_expect_is_never_shortcut() -> None:
    outputs = classify_outputs("SELECT city FROM customers", PG, SCHEMA, n_columns=2)
    assert len(outputs) == 2 and all(o.pii_kind for o in outputs)
