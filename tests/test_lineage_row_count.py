"""The NUMBER of result rows as a channel: :func:`rows_read_pii`.

Column masking hides values, not rows: ``SELECT 1 FROM customers c,
generate_series(1, ascii(c.name))`` returns as many rows as the character
code. ``rows_read_pii`` says when personal data decides how many rows a
result has beyond filtering rows of real tables (the count rules of the
lineage module, applied to the whole result).

Two layers:

* a pure table of cases in PostgreSQL, MySQL and SQLite: the leaking shapes
  (table and set-returning functions, LIMIT / OFFSET / FETCH WITH TIES from
  personal data, joins and recursive CTEs counting up to a value, GROUP BY /
  DISTINCT / UNION over expressions of it, a tainted literal) must return a
  kind; filters, id joins, plain grouping, plain limits, number sources over
  constants and counts must return None; plus the fail-closed paths;
* the same cases on the real disposable databases (``@pytest.mark.services``):
  each leaking query runs for customer 1 and customer 2 (or with the tainted
  literal replaced) and its row count really differs - equal to the value
  where it is a simple function of it - while each legitimate query runs
  and is not flagged.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from governance.pii import lineage as sql_lineage
from governance.pii.lineage import classify_outputs, rows_read_pii
from governance.sql.execute import execute_readonly
from tests.support.customer_dbs import CUSTOMER_SCHEMA

PG, MY, LITE = "postgres", "mysql", "sqlite"
ALL = (PG, MY, LITE)
FIXTURE = {PG: "pg_customer_db", MY: "mysql_customer_db", LITE: "sqlite_customer_db"}
DOUBT = sql_lineage._DOUBT_KIND

NAMES = {1: "김민준", 2: "이서연"}
EMAILS = {1: "minjun.kim@example.com", 2: "seoyeon@example.co.kr"}
PHONES = {1: "010-1234-5678", 2: "010-2222-3333"}
TAINTED = {"김민준": "name", "이서연": "name"}  # the original substituted in each run


def _utf8_first_byte(text: str) -> int:
    return text.encode()[0]


# A number source in every dialect: g = 1..300 (MySQL's recursion depth is 1000).
_N300 = "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 300) "


@dataclass(frozen=True)
class Leak:
    """A query whose row count encodes a personal value. ``{v}`` is replaced
    by each of ``values`` (customer ids by default, or a literal); ``rows``
    maps a value to the row count the database must return, when it is a
    simple function of the personal data."""

    dialect: str
    sql: str
    kind: str
    rows: Callable[[str], int] | None = None
    values: tuple[str, str] = ("1", "2")
    tainted: dict[str, str] = field(default_factory=dict)

    def text(self, value: str) -> str:
        return self.sql.replace("{v}", value)


def _name_code(value: str) -> int:
    return ord(NAMES[int(value)][0])


def _email_length(value: str) -> int:
    return len(EMAILS[int(value)])


LEAKS: list[Leak] = [
    # --- PostgreSQL ---
    Leak(PG, "SELECT 1 FROM customers c, generate_series(1, ascii(substr(c.name, 1, 1))) WHERE c.id = {v}", "name",
         _name_code),
    Leak(PG, "SELECT g FROM generate_series(1, 200000) g LIMIT (SELECT ascii(name) FROM customers WHERE id = {v})",
         "name", _name_code),
    Leak(PG, "SELECT g FROM generate_series(1, 200000) g JOIN customers c ON g <= ascii(c.name) WHERE c.id = {v}",
         "name", _name_code),
    Leak(PG, "SELECT generate_series(1, ascii(name)) FROM customers WHERE id = {v}", "name", _name_code),
    Leak(PG, "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n "
         "WHERE g < (SELECT length(email) FROM customers WHERE id = {v})) SELECT g FROM n", "email", _email_length),
    Leak(PG, "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT n.g + 1 FROM n JOIN customers c "
         "ON c.id = {v} AND n.g < length(c.phone) + length(c.email)) SELECT g FROM n", "phone",
         lambda v: len(PHONES[int(v)]) + len(EMAILS[int(v)])),
    Leak(PG, "SELECT g % length(c.email) FROM generate_series(1, 100) g, customers c WHERE c.id = {v} "
         "GROUP BY g % length(c.email)", "email", _email_length),
    Leak(PG, "SELECT DISTINCT g % length(c.email) FROM generate_series(1, 100) g, customers c WHERE c.id = {v}",
         "email", _email_length),
    Leak(PG, "SELECT g % length(c.email) FROM generate_series(1, 100) g, customers c WHERE c.id = {v} UNION SELECT 0",
         "email", _email_length),
    Leak(PG, "SELECT unnest(string_to_array(c.email, NULL)) FROM customers c WHERE c.id = {v}", "email",
         _email_length),
    Leak(PG, "SELECT g FROM generate_series(1, 100) g OFFSET (SELECT length(email) FROM customers WHERE id = {v})",
         "email", lambda v: 100 - _email_length(v)),
    Leak(PG, "SELECT g FROM generate_series(1, 100) g ORDER BY g <= (SELECT length(email) FROM customers "
         "WHERE id = {v}) DESC FETCH FIRST 1 ROWS WITH TIES", "email", _email_length),
    Leak(PG, "SELECT x.g FROM (SELECT g FROM generate_series(1, 100) g, customers c "
         "WHERE c.id = {v} AND g <= length(c.email)) x", "email", _email_length),
    Leak(PG, "SELECT 1 FROM customers c CROSS JOIN LATERAL generate_series(1, length(c.email)) WHERE c.id = {v}",
         "email", _email_length),
    Leak(PG, "SELECT g FROM generate_series(1, 100000) g WHERE g <= ascii('{v}')", "name",
         lambda v: ord(v[0]), values=("김민준", "이서연"), tainted=TAINTED),
    # --- MySQL (MariaDB / MySQL 8): numbers from a recursive CTE ---
    Leak(MY, _N300 + "SELECT n.g FROM n JOIN customers c ON n.g <= ascii(c.name) WHERE c.id = {v}", "name",
         lambda v: _utf8_first_byte(NAMES[int(v)])),
    Leak(MY, "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n "
         "WHERE g < (SELECT length(email) FROM customers WHERE id = {v})) SELECT g FROM n", "email", _email_length),
    Leak(MY, _N300 + "SELECT n.g % length(c.email) FROM n, customers c WHERE c.id = {v} GROUP BY n.g % length(c.email)",
         "email", _email_length),
    Leak(MY, _N300 + "SELECT DISTINCT n.g % length(c.email) FROM n, customers c WHERE c.id = {v}", "email",
         _email_length),
    Leak(MY, _N300 + "SELECT n.g % length(c.email) FROM n, customers c WHERE c.id = {v} UNION SELECT 0", "email",
         _email_length),
    Leak(MY, _N300 + "SELECT n.g FROM n, customers c WHERE c.id = {v} AND n.g <= ascii(c.phone) + length(c.email)",
         "phone", lambda v: ord(PHONES[int(v)][0]) + _email_length(v)),
    # --- SQLite ---
    Leak(LITE, _N300 + "SELECT n.g FROM n JOIN customers c ON n.g <= length(c.email) WHERE c.id = {v}", "email",
         _email_length),
    Leak(LITE, _N300 + "SELECT g FROM n LIMIT (SELECT length(email) FROM customers WHERE id = {v})", "email",
         _email_length),
    Leak(LITE, "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n "
         "WHERE g < (SELECT unicode(name) FROM customers WHERE id = {v})) SELECT g FROM n", "name", _name_code),
    Leak(LITE, _N300 + "SELECT n.g % length(c.email) FROM n, customers c WHERE c.id = {v} "
         "GROUP BY n.g % length(c.email)", "email", _email_length),
    Leak(LITE, _N300 + "SELECT DISTINCT n.g % length(c.email) FROM n, customers c WHERE c.id = {v}", "email",
         _email_length),
    Leak(LITE, _N300 + "SELECT n.g % length(c.email) FROM n, customers c WHERE c.id = {v} UNION SELECT 0", "email",
         _email_length),
    Leak(LITE, _N300 + "SELECT g FROM n LIMIT 300 OFFSET (SELECT length(phone) + length(email) FROM customers "
         "WHERE id = {v})", "phone", lambda v: 300 - len(PHONES[int(v)]) - _email_length(v)),
]  # fmt: skip


@dataclass(frozen=True)
class Legit:
    dialect: str
    sql: str
    tainted: dict[str, str] = field(default_factory=dict)


_LEGIT_ALL = [
    "SELECT id, name, phone FROM customers WHERE name = '김민준'",
    "SELECT id FROM customers WHERE name LIKE '김%'",
    "SELECT id, city FROM customers WHERE phone LIKE '010-1%' OR email LIKE '%.kr'",
    "SELECT o.id, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.phone LIKE '010%'",
    "SELECT c.id FROM customers c JOIN customers c2 ON c2.name = c.name",
    "SELECT city, count(*) FROM customers GROUP BY city",
    "SELECT city FROM customers GROUP BY city, name",
    "SELECT DISTINCT city FROM customers",
    "SELECT DISTINCT name FROM customers",
    "SELECT id, name FROM customers ORDER BY id LIMIT 10",
    "SELECT id FROM customers ORDER BY length(name) DESC, id LIMIT 2",
    "SELECT id FROM customers LIMIT 2 OFFSET 1",
    "SELECT * FROM customers",
    "SELECT count(*) FROM customers WHERE name LIKE '김%'",
    "SELECT count(DISTINCT phone), count(*) FROM customers",
    "SELECT id FROM customers WHERE id IN (SELECT customer_id FROM orders) UNION ALL SELECT id FROM orders",
    "SELECT name FROM customers UNION SELECT note FROM orders",
    "SELECT id FROM customers WHERE id IN (SELECT id FROM customers WHERE email LIKE '%example%')",
]
LEGIT: list[Legit] = [
    *(Legit(dialect, sql) for dialect in ALL for sql in _LEGIT_ALL),
    *(
        Legit(dialect, _N300 + sql)
        for dialect in ALL
        for sql in (
            "SELECT n.g, c.city FROM n JOIN customers c ON c.id = n.g",
            "SELECT n.g, c.name FROM n, customers c WHERE n.g <= 3",
            "SELECT n.g FROM n LIMIT 10",
        )
    ),
    Legit(PG, "SELECT g, c.city FROM generate_series(1, 3) g JOIN customers c ON c.id = g"),
    Legit(PG, "SELECT g, c.name FROM generate_series(1, 3) g CROSS JOIN customers c WHERE c.name LIKE '김%'"),
    Legit(PG, "SELECT DISTINCT ON (city) city, name FROM customers ORDER BY city, name"),
    Legit(PG, "SELECT id FROM customers FETCH FIRST 2 ROWS ONLY"),
    # One row whatever it reads: the count's VALUE is masked by classify_outputs.
    Legit(PG, "SELECT count(*) FROM customers c, generate_series(1, ascii(c.name))"),
    Legit(PG, "SELECT id, name FROM customers WHERE name = '김민준'", TAINTED),
    Legit(LITE, "SELECT max(unicode(name)) FROM customers"),
    Legit(MY, "SELECT id FROM customers LIMIT 1, 2"),
]


def _leak_id(leak: Leak) -> str:
    return f"{leak.dialect}:{leak.text(leak.values[0])[-70:]}"


def _legit_id(legit: Legit) -> str:
    return f"{legit.dialect}:{legit.sql[-70:]}"


# --- pure cases --------------------------------------------------------------------------------


@pytest.mark.parametrize("leak", LEAKS, ids=[_leak_id(leak) for leak in LEAKS])
def test_row_count_leak_is_flagged(leak: Leak) -> None:
    for value in leak.values:
        found = rows_read_pii(leak.text(value), leak.dialect, CUSTOMER_SCHEMA, tainted_literals=leak.tainted)
        assert found == leak.kind


@pytest.mark.parametrize("legit", LEGIT, ids=[_legit_id(legit) for legit in LEGIT])
def test_legitimate_row_count_is_not_flagged(legit: Legit) -> None:
    assert rows_read_pii(legit.sql, legit.dialect, CUSTOMER_SCHEMA, tainted_literals=legit.tainted) is None


def test_the_count_of_multiplied_rows_is_masked_as_a_value() -> None:
    """The one-row count exempted above is not a hole: its value is masked."""
    sql = "SELECT count(*) FROM customers c, generate_series(1, ascii(c.name))"
    assert classify_outputs(sql, PG, CUSTOMER_SCHEMA, 1)[0].pii_kind == "name"


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        # the most severe kind among several
        ("SELECT 1 FROM customers c, generate_series(1, length(c.name) + length(c.phone))", "phone"),
        # a set-operation branch that multiplies
        ("SELECT id FROM customers UNION ALL SELECT 1 FROM customers c, generate_series(1, length(c.email))", "email"),
        # an aggregate with a set-returning output is as many rows as that
        ("SELECT generate_series(1, max(length(email))) FROM customers", "email"),
        # a set-returning ORDER BY key makes rows
        ("SELECT 1 FROM customers ORDER BY generate_series(1, length(phone))", "phone"),
        # GROUP BY an expression of personal data, without any number source
        ("SELECT count(*) FROM customers GROUP BY length(email) % 3", "email"),
        # HAVING comparing personal data with a count
        ("SELECT city FROM customers GROUP BY city HAVING count(*) < max(length(name))", "name"),
        # a whole row is personal data too (unresolved by the walk: doubt)
        ("SELECT 1 FROM customers c, generate_series(1, length(c::text))", DOUBT),
        ("SELECT 1 FROM customers c, generate_series(1, length(row_to_json(c)::text))", DOUBT),
        # a relation outside the schema may hold anything: the connection's kind
        ("SELECT 1 FROM pg_stats s, generate_series(1, length(s.attname))", "phone"),
    ],
)
def test_more_shapes(sql: str, kind: str) -> None:
    assert rows_read_pii(sql, PG, CUSTOMER_SCHEMA) == kind


def test_a_rewritten_free_text_column_is_doubt() -> None:
    sql = "SELECT 1 FROM notes n, generate_series(1, ascii(n.memo)) WHERE n.id = 1"
    assert rows_read_pii(sql, PG, CUSTOMER_SCHEMA) == DOUBT


def test_no_personal_data_named_skips_the_walk(monkeypatch) -> None:
    """The common case is cheap: no PII column, star, whole row or literal
    named -> None before qualify."""

    def boom(*args, **kwargs):
        raise AssertionError("walked")

    monkeypatch.setattr(sql_lineage._Classifier, "_prepare", boom)
    for sql in (
        "SELECT city, count(*) FROM customers GROUP BY city",
        "SELECT o.id, g FROM orders o, generate_series(1, o.amount) g",
        "SELECT id FROM notes LIMIT (SELECT count(*) FROM customers)",
    ):
        assert rows_read_pii(sql, PG, CUSTOMER_SCHEMA) is None
    assert rows_read_pii("SELECT 1 FROM generate_series(1, 3)", PG, {}) is None


# --- fail closed ---------------------------------------------------------------------------------


def test_unresolved_with_a_row_shape_is_doubt(monkeypatch) -> None:
    def unresolved(*args, **kwargs):
        raise sql_lineage._Unresolved("test")

    monkeypatch.setattr(sql_lineage._Classifier, "_prepare", unresolved)
    flagged = [
        "SELECT 1 FROM customers c, generate_series(1, ascii(c.name))",
        "SELECT g FROM generate_series(1, 9) g LIMIT (SELECT length(name) FROM customers)",
        "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 3) "
        "SELECT n.g, c.name FROM n, customers c",
        "SELECT DISTINCT length(phone) FROM customers",
        "SELECT count(*) FROM customers GROUP BY length(phone)",
        "SELECT o.id FROM orders o JOIN customers c ON o.amount < length(c.name)",
        "SELECT name FROM customers UNION SELECT note FROM orders",
    ]
    for sql in flagged:
        assert rows_read_pii(sql, PG, CUSTOMER_SCHEMA) == DOUBT, sql
    plain = [
        "SELECT id, name FROM customers WHERE name LIKE '김%'",  # names PII, no row shape
        "SELECT c.id FROM customers c JOIN customers c2 ON c2.name = c.name LIMIT 5",
        "SELECT DISTINCT name, city FROM customers",
        "SELECT o.id, g FROM orders o, generate_series(1, o.amount) g",  # fast path: no PII named
    ]
    for sql in plain:
        assert rows_read_pii(sql, PG, CUSTOMER_SCHEMA) is None, sql


def test_unparsable_statement() -> None:
    broken = "SELECT 1 FROM customers c, generate_series(1, ascii(c.name)) WHERE (c.id = 1"
    assert rows_read_pii(broken, PG, CUSTOMER_SCHEMA) == DOUBT
    assert rows_read_pii("SELECT name FROM customers WHERE (id = 1", PG, CUSTOMER_SCHEMA) is None
    assert rows_read_pii("SELECT g FROM generate_series(1, 3) g WHERE (g = 1", PG, CUSTOMER_SCHEMA) is None
    # a table function or a list right after FROM is a row shape
    assert rows_read_pii("SELECT 1 FROM customers c, f(c.name) WHERE (c.id = 1", PG, CUSTOMER_SCHEMA) == DOUBT
    assert rows_read_pii("SELECT 1 FROM myfn(1) x, customers c WHERE (c.name = 1", PG, CUSTOMER_SCHEMA) == DOUBT
    # a tainted literal is personal data even without a column
    literal = "SELECT g FROM generate_series(1, 99999) g WHERE (g <= ascii('김민준')"
    assert rows_read_pii(literal, PG, CUSTOMER_SCHEMA, tainted_literals=TAINTED) == DOUBT
    assert rows_read_pii(literal, "oracle", CUSTOMER_SCHEMA, tainted_literals=TAINTED) == DOUBT
    assert rows_read_pii("SELECT 1; SELECT 2 FROM customers c, generate_series(1, length(c.name))", PG,
                         CUSTOMER_SCHEMA) == DOUBT  # fmt: skip


def test_internal_error_fails_closed(monkeypatch) -> None:
    def crash(self):
        raise RuntimeError("bug")

    monkeypatch.setattr(sql_lineage._Classifier, "rows_kind", crash)
    assert rows_read_pii("SELECT name FROM customers", PG, CUSTOMER_SCHEMA) == DOUBT
    assert rows_read_pii("SELECT id FROM customers", PG, CUSTOMER_SCHEMA) is None
    assert rows_read_pii(None, PG, CUSTOMER_SCHEMA) == DOUBT  # type: ignore[arg-type]


def test_typical_join_is_fast() -> None:
    sql = (
        "SELECT o.id, o.amount, c.city FROM orders o JOIN customers c ON c.id = o.customer_id "
        "WHERE c.name LIKE '김%' AND o.amount > 1000 ORDER BY o.amount DESC LIMIT 20"
    )
    assert rows_read_pii(sql, PG, CUSTOMER_SCHEMA) is None
    per_call = min(timeit.repeat(lambda: rows_read_pii(sql, PG, CUSTOMER_SCHEMA), number=20, repeat=3)) / 20
    assert per_call < 0.05, per_call


# --- the real databases --------------------------------------------------------------------------


def _row_count(db, sql: str) -> int:
    result = execute_readonly(engine=db.engine, dsn=db.dsn, sql=sql, row_cap=100_000, timeout_ms=10_000)
    assert not result.truncated
    return len(result.rows)


@pytest.mark.services
@pytest.mark.parametrize("leak", LEAKS, ids=[_leak_id(leak) for leak in LEAKS])
def test_row_count_really_depends_on_personal_data(request, leak: Leak) -> None:
    db = request.getfixturevalue(FIXTURE[leak.dialect])
    counts = [_row_count(db, leak.text(value)) for value in leak.values]
    assert counts[0] != counts[1], counts
    if leak.rows is not None:
        assert counts == [leak.rows(value) for value in leak.values]
    for value in leak.values:
        assert rows_read_pii(leak.text(value), leak.dialect, CUSTOMER_SCHEMA, tainted_literals=leak.tainted)


@pytest.mark.services
@pytest.mark.parametrize("legit", LEGIT, ids=[_legit_id(legit) for legit in LEGIT])
def test_legitimate_query_runs_and_is_not_flagged(request, legit: Legit) -> None:
    db = request.getfixturevalue(FIXTURE[legit.dialect])
    _row_count(db, legit.sql)
    assert rows_read_pii(legit.sql, legit.dialect, CUSTOMER_SCHEMA, tainted_literals=legit.tainted) is None
