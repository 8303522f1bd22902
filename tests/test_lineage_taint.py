"""Lineage as taint: an output that reads personal data in ANY way is masked
whole; a count is the only exemption.

Two layers:

* a pure table of cases in PostgreSQL, MySQL and SQLite: the attack shapes
  (per-character encodings, comparisons, EXISTS, window specs, scalar
  subqueries with the personal data only in their WHERE, whole rows in every
  notation, JSON/array constructors, re-identified literals through CTEs /
  subqueries / UNION, character rewriting of free text, relations outside the
  schema) and the outputs that must stay readable (counts, plain
  non-personal columns);
* the attack cases again on the real disposable databases
  (``@pytest.mark.services``): the query must run in that dialect, and
  every output whose VALUES depend on personal data must be classified as
  personal data. Dependence is observed, not assumed: the query is run again
  with the personal-data columns changed (inside a rolled-back transaction)
  or with the re-identified literal replaced, and any column whose values
  change must be masked; and no unmasked column may contain a planted
  original or a simple encoding of one (reversed, hex, base64, digits
  translated to letters).
"""

from __future__ import annotations

import base64
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from governance.pii import lineage as sql_lineage
from governance.pii.lineage import OutputColumn, classify_outputs
from governance.pii.lineage import classifier as lineage_classifier
from governance.sql.execute import BIND_ERROR_CLASS, QueryError, execute_readonly
from tests.support.customer_dbs import CUSTOMER_SCHEMA, PLANTED_VALUES, _mysql_admin

PG, MY, LITE = "postgres", "mysql", "sqlite"
ALL = (PG, MY, LITE)
ENGINE = {PG: "postgresql", MY: "mysql", LITE: "sqlite"}
FIXTURE = {PG: "pg_customer_db", MY: "mysql_customer_db", LITE: "sqlite_customer_db"}

# Most severe kind of the connection (customers: phone > email > name): what a
# relation outside the schema is masked as.
CONNECTION = "phone"
# A rewritten free-text column has no classified source: the doubt kind.
DOUBT = sql_lineage._DOUBT_KIND

# Originals the executor substituted for tokens in this statement's literals.
TAINTED = {"김민준": "name", "010-1234-5678": "phone"}
# Same shape, other values: the literal differential.
REPLACEMENT = {"김민준": "홍길동", "010-1234-5678": "011-9999-0000"}


# A number source every dialect runs: g = 1..40 (a recursive CTE).
_N40 = "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 40) "
_E = {0: "email"}


@dataclass(frozen=True)
class Case:
    sql: str
    n: int
    masked: dict[int, str]
    dialects: tuple[str, ...] = ALL
    # Run on the real databases: an attack (or its benign twin) whose
    # unmasked outputs must not depend on personal data.
    attack: bool = True
    sql_by_dialect: dict[str, str] = field(default_factory=dict)

    def text(self, dialect: str) -> str:
        return self.sql_by_dialect.get(dialect, self.sql)


CASES: list[Case] = [
    # --- per-character encodings and properties of a personal-data column ---
    Case("SELECT id, length(name) FROM customers", 2, {1: "name"}),
    Case("SELECT id, char_length(name) FROM customers", 2, {1: "name"}, (PG, MY)),
    Case("SELECT id, octet_length(phone) FROM customers", 2, {1: "phone"}, (PG, MY)),
    Case("SELECT id, bit_length(email) FROM customers", 2, {1: "email"}, (PG, MY)),
    Case("SELECT id, ascii(substr(name, 2, 1)) FROM customers", 2, {1: "name"}, (PG, MY)),
    Case("SELECT id, unicode(substr(name, 2, 1)) FROM customers", 2, {1: "name"}, (LITE,)),
    Case("SELECT id, repeat(name, 2) FROM customers", 2, {1: "name"}, (PG, MY)),
    Case("SELECT id, lpad(phone, 20, '*') FROM customers", 2, {1: "phone"}, (PG, MY)),
    Case("SELECT id, strpos(name, '민') FROM customers", 2, {1: "name"}, (PG,)),
    Case("SELECT id, position('민' in name) FROM customers", 2, {1: "name"}, (PG, MY)),
    Case("SELECT id, instr(name, '민') FROM customers", 2, {1: "name"}, (MY, LITE)),
    Case("SELECT id, locate('-1', phone) FROM customers", 2, {1: "phone"}, (MY,)),
    Case("SELECT id, md5(phone) FROM customers", 2, {1: "phone"}, (PG, MY)),
    # comparisons, CASE conditions, casts
    Case("SELECT id, name > 'M' FROM customers", 2, {1: "name"}),
    Case("SELECT id, phone LIKE '010-1%' AS p FROM customers", 2, {1: "phone"}),
    Case("SELECT id, CASE WHEN phone LIKE '010-1%' THEN 1 ELSE 0 END FROM customers", 2, {1: "phone"}),
    Case("SELECT id, CASE WHEN email LIKE 'minjun%' THEN 'a' ELSE 'b' END FROM customers", 2, {1: "email"}),
    Case("SELECT id, coalesce(nullif(substr(name, 1, 1), '김'), '?') FROM customers", 2, {1: "name"}),
    Case(
        "SELECT id, CAST(phone AS TEXT) FROM customers",
        2,
        {1: "phone"},
        sql_by_dialect={MY: "SELECT id, CAST(phone AS CHAR) FROM customers"},
    ),
    Case("SELECT id, phone::bytea FROM customers", 2, {1: "phone"}, (PG,)),
    # EXISTS / IN / scalar subqueries: the personal data only in their WHERE
    Case(
        "SELECT c.id, EXISTS (SELECT 1 FROM customers c2 WHERE c2.id = c.id AND c2.name > 'M') FROM customers c",
        2,
        {1: "name"},
    ),
    Case(
        "SELECT o.id, o.customer_id IN (SELECT id FROM customers WHERE phone LIKE '010-1%') FROM orders o",
        2,
        {1: "phone"},
    ),
    Case(
        "SELECT o.id, (SELECT max(c.id) FROM customers c WHERE c.id = o.customer_id AND c.name > 'M') FROM orders o",
        2,
        {1: "name"},
    ),
    Case(
        "SELECT o.id, (SELECT 'yes' FROM customers c WHERE c.id = o.customer_id ORDER BY c.email LIMIT 1) "
        "FROM orders o",
        2,
        {1: "email"},
    ),
    Case("SELECT (SELECT ascii(substr(name, 3, 1)) FROM customers WHERE id = 1)", 1, {0: "name"}, (PG, MY)),
    Case("SELECT (SELECT unicode(substr(name, 3, 1)) FROM customers WHERE id = 1)", 1, {0: "name"}, (LITE,)),
    Case(
        "SELECT o.id, (SELECT max(x.id) FROM (SELECT id FROM customers WHERE name > 'M') x "
        "WHERE x.id = o.customer_id) FROM orders o",
        2,
        {1: "name"},
    ),
    # window functions and their PARTITION BY / ORDER BY
    Case("SELECT id, row_number() OVER (ORDER BY name) FROM customers", 2, {1: "name"}),
    Case("SELECT id, rank() OVER (ORDER BY phone DESC) FROM customers", 2, {1: "phone"}),
    Case("SELECT id, dense_rank() OVER (ORDER BY email) FROM customers", 2, {1: "email"}),
    Case("SELECT id, sum(id) OVER (PARTITION BY substr(email, 1, 1)) FROM customers", 2, {1: "email"}),
    Case("SELECT id, count(*) OVER (ORDER BY name) FROM customers", 2, {1: "name"}),
    Case("SELECT id, lag(id) OVER (ORDER BY phone) FROM customers", 2, {1: "phone"}),
    Case("SELECT id, row_number() OVER w FROM customers WINDOW w AS (ORDER BY name)", 2, {1: "name"}, (PG, LITE)),
    # derived tables and CTEs carry the taint
    Case("SELECT x.n FROM (SELECT length(name) AS n FROM customers) x", 1, {0: "name"}),
    Case("WITH t AS (SELECT id, name > 'M' AS big FROM customers) SELECT id, big FROM t", 2, {1: "name"}),
    # an outer join's condition decides NULLs: a per-row oracle
    Case(
        "SELECT c.id, c2.id FROM customers c LEFT JOIN customers c2 ON c2.id = c.id AND c2.name > 'M'",
        2,
        {1: "name"},
    ),
    # a row filter that compares a number source with personal data returns the value
    Case(
        "SELECT g FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 AND g = ascii(substr(c.name, 1, 1))",
        1,
        {0: "name"},
        (PG,),
    ),
    Case(
        "SELECT g.g FROM generate_series(1, 200000) g "
        "WHERE EXISTS (SELECT 1 FROM customers c WHERE c.id = 1 AND ascii(c.name) = g.g)",
        1,
        {0: "name"},
        (PG,),
    ),
    Case(
        "SELECT g FROM generate_series(1, 200000) g WHERE g IN (SELECT ascii(name) FROM customers)",
        1,
        {0: "name"},
        (PG,),
    ),
    Case(
        "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 40) "
        "SELECT n.g FROM n WHERE EXISTS (SELECT 1 FROM (SELECT length(email) AS a FROM customers) x WHERE x.a = n.g)",
        1,
        {0: "email"},
    ),
    Case(
        "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 40) "
        "SELECT n.g FROM n JOIN customers c ON n.g = length(c.email)",
        1,
        {0: "email"},
    ),
    Case(
        "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 40) "
        "SELECT x.g FROM (SELECT n.g FROM n, customers c WHERE n.g = length(c.email)) x",
        1,
        {0: "email"},
    ),
    # a LIMIT computed from personal data ends a number sequence at the value
    Case(
        "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 40) "
        "SELECT g FROM n LIMIT (SELECT length(email) FROM customers WHERE id = 1)",
        1,
        {0: "email"},
        (PG, LITE),
    ),
    Case(
        "SELECT l.x FROM customers c, LATERAL (SELECT g AS x FROM generate_series(1, 100) g LIMIT length(c.name)) l",
        1,
        {0: "name"},
        (PG,),
    ),
    # ... and a count over rows multiplied by personal data is the value
    Case("SELECT count(*) FROM customers c, generate_series(1, ascii(substr(c.name, 1, 1))) g", 1, {0: "name"}, (PG,)),
    Case(
        "SELECT count(*) FROM customers c JOIN generate_series(1, 200000) g ON g < ascii(substr(c.name, 1, 1))",
        1,
        {0: "name"},
        (PG,),
    ),
    Case(
        "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 40) "
        "SELECT c.id, (SELECT count(*) FROM n WHERE n.g <= length(c.email)) FROM customers c",
        2,
        {1: "email"},
    ),
    Case("SELECT count(*) FROM customers c, unnest(string_to_array(c.name, NULL)) u", 1, {0: "name"}, (PG,)),
    # session state set from a column in the same statement
    Case("SELECT t.id, @x FROM (SELECT id, @x := name FROM customers) t", 2, {1: CONNECTION}, (MY,)),
    Case(
        "SELECT t.id, current_setting('owl.x') FROM (SELECT id, set_config('owl.x', name, false) AS s "
        "FROM customers) t",
        2,
        {1: CONNECTION},
        (PG,),
    ),
    # --- whole rows in every notation (PostgreSQL) ---
    Case("SELECT c FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT c.row_to_json FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT c.to_jsonb FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT c.hstore FROM customers c", 1, {0: CONNECTION}, (PG,)),
    # PostgreSQL 15 refuses these two; older servers and other functions accept the notation
    Case("SELECT c.text FROM customers c", 1, {0: CONNECTION}, (PG,), attack=False),
    Case("SELECT customers.customers FROM customers", 1, {0: CONNECTION}, (PG,), attack=False),
    Case("SELECT (c).* FROM customers c", 5, dict.fromkeys(range(5), CONNECTION), (PG,)),
    Case("SELECT row_to_json(c) FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT to_jsonb(c) FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT hstore(c) FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT c::text FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT ROW(c.*) FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT json_agg(c) FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT array_agg(c) FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT length(c::text) FROM customers c", 1, {0: CONNECTION}, (PG,)),
    Case("SELECT to_json(x) FROM (SELECT id, phone FROM customers) x", 1, {0: "phone"}, (PG,)),
    # JSON / array constructors
    Case("SELECT json_build_object('n', name), ARRAY[city, email] FROM customers", 2, {0: "name", 1: "email"}, (PG,)),
    Case("SELECT JSON_OBJECT('n', name), JSON_ARRAY(email), city FROM customers", 3, {0: "name", 1: "email"}, (MY,)),
    Case("SELECT JSON_ARRAYAGG(phone), count(*) FROM customers", 2, {0: "phone"}, (MY,)),
    Case("SELECT json_object('n', name), json_array(email), city FROM customers", 3, {0: "name", 1: "email"}, (LITE,)),
    Case("SELECT json_group_array(phone), count(*) FROM customers", 2, {0: "phone"}, (LITE,)),
    # --- re-identified literals ---
    Case("SELECT '김민준'", 1, {0: "name"}),
    Case("SELECT upper('김민준'), substr('김민준', 1, 1), 'x'", 3, {0: "name", 1: "name"}),
    Case("SELECT ascii('김민준'), length('010-1234-5678')", 2, {0: "name", 1: "phone"}, (PG, MY)),
    Case("SELECT unicode('김민준'), length('010-1234-5678')", 2, {0: "name", 1: "phone"}, (LITE,)),
    Case(
        "SELECT '김민준' || 'x'",
        1,
        {0: "name"},
        (PG, LITE, MY),
        sql_by_dialect={MY: "SELECT CONCAT('김민준', 'x')"},
    ),
    Case("WITH t AS (SELECT '010-1234-5678' AS v) SELECT substr(v, 1, 3), 1 FROM t", 2, {0: "phone"}),
    Case("SELECT v FROM (SELECT 'a' AS v UNION ALL SELECT '김민준') x", 1, {0: "name"}),
    Case("SELECT (SELECT '김민준')", 1, {0: "name"}),
    Case("SELECT city FROM customers UNION SELECT '김민준'", 1, {0: "name"}),
    Case("SELECT a FROM (VALUES ('김민준')) AS v(a)", 1, {0: "name"}, (PG,)),
    Case("SELECT current_query() WHERE 'x' <> '김민준'", 1, {0: "phone"}, (PG,)),
    # still spelled as a token (the executor replaces it before running)
    Case("SELECT '[이름-1]', substr('[전화번호-2]', 1, 3)", 2, {0: "name", 1: "phone"}, attack=False),
    # --- character rewriting of a free-text column (notes.memo is unclassified) ---
    Case("SELECT translate(memo, '0123456789', 'abcdefghij') FROM notes", 1, {0: DOUBT}, (PG,)),
    Case("SELECT id, replace(replace(memo, '0', 'a'), '1', 'b') FROM notes", 2, {1: DOUBT}),
    Case("SELECT reverse(memo) FROM notes", 1, {0: DOUBT}, (PG, MY)),
    Case("SELECT encode(memo::bytea, 'base64') FROM notes", 1, {0: DOUBT}, (PG,)),
    Case("SELECT encode(convert_to(memo, 'UTF8'), 'hex') FROM notes", 1, {0: DOUBT}, (PG,)),
    Case("SELECT to_hex(id) FROM notes", 1, {0: DOUBT}, (PG,)),
    Case("SELECT hex(memo) FROM notes", 1, {0: DOUBT}, (MY, LITE)),
    Case("SELECT to_base64(memo) FROM notes", 1, {0: DOUBT}, (MY,)),
    Case("SELECT regexp_replace(memo, '[0-9]', 'x') FROM notes", 1, {0: DOUBT}, (PG, MY)),
    Case("SELECT string_to_array(memo, NULL) FROM notes", 1, {0: DOUBT}, (PG,)),
    Case("SELECT x.r FROM (SELECT reverse(memo) AS r FROM notes) x", 1, {0: DOUBT}, (PG, MY)),
    # --- relations outside the schema: may hold anything ---
    Case(
        "SELECT attname, histogram_bounds::text FROM pg_stats WHERE tablename = 'customers'",
        2,
        {0: CONNECTION, 1: CONNECTION},
        (PG,),
    ),
    Case("SELECT s.* FROM pg_stats s WHERE s.tablename = 'customers'", 14, dict.fromkeys(range(14), CONNECTION), (PG,)),
    Case("SELECT table_name, column_name FROM information_schema.columns", 2, {0: CONNECTION, 1: CONNECTION}, (MY,)),
    Case("SELECT tbl, stat FROM sqlite_stat1", 2, {0: CONNECTION, 1: CONNECTION}, (LITE,)),
    Case(
        "SELECT c.id, s.stat FROM customers c JOIN sqlite_stat1 s ON 1 = 1",
        2,
        {1: CONNECTION},
        (LITE,),
    ),
    Case(
        "SELECT * FROM dblink('dbname=x', 'SELECT name FROM customers') AS t(a text)", 1, {0: CONNECTION}, (PG,), False
    ),
    Case("SELECT query_to_xml('SELECT name FROM customers', true, false, '')", 1, {0: CONNECTION}, (PG,)),
    # --- a count that IS the value: its argument, its FILTER, the number of rows it counts ---
    Case(_N40 + "SELECT count(CASE WHEN n.g <= length(c.email) THEN 1 END) FROM n, customers c WHERE c.id = 1", 1, _E),
    Case(
        _N40 + "SELECT count(DISTINCT CASE WHEN n.g <= length(c.email) THEN n.g END) FROM n, customers c "
        "WHERE c.id = 1",
        1,
        _E,
    ),
    Case(_N40 + "SELECT count(DISTINCT n.g % length(c.email)) FROM n, customers c WHERE c.id = 1", 1, _E),
    Case(_N40 + "SELECT count(nullif(n.g <= length(c.email), false)) FROM n, customers c WHERE c.id = 1", 1, _E),
    Case(
        _N40 + "SELECT count(*) FILTER (WHERE n.g <= length(c.email)) FROM n, customers c WHERE c.id = 1",
        1,
        _E,
        (PG, LITE),
    ),
    Case(
        _N40 + "SELECT count(*) FROM (SELECT n.g FROM n LIMIT (SELECT length(email) FROM customers WHERE id = 1)) s",
        1,
        _E,
        (PG, LITE),
    ),
    Case(
        _N40 + "SELECT count(*) FROM (SELECT n.g % length(c.email) AS k FROM n, customers c WHERE c.id = 1 "
        "GROUP BY n.g % length(c.email)) s",
        1,
        _E,
    ),
    Case(
        _N40 + "SELECT count(*) FROM (SELECT DISTINCT n.g % length(c.email) AS k FROM n, customers c WHERE c.id = 1) s",
        1,
        _E,
    ),
    Case(
        _N40 + "SELECT count(*) FROM (SELECT a.g FROM n a, n b, customers c WHERE c.id = 1 AND b.g <= a.g "
        "GROUP BY a.g HAVING count(*) <= length(max(c.email))) s",
        1,
        _E,
    ),
    Case(
        _N40 + "SELECT count(*) FROM (SELECT n.g FROM n UNION SELECT n.g % length(c.email) FROM n, customers c "
        "WHERE c.id = 1) s",
        1,
        _E,
    ),
    Case("SELECT count(*) FROM (SELECT generate_series(1, length(email)) FROM customers WHERE id = 1) s", 1, _E, (PG,)),
    Case(
        "WITH RECURSIVE r(k) AS (SELECT 1 UNION ALL SELECT r.k + 1 FROM r, customers c "
        "WHERE c.id = 1 AND r.k < length(c.email)) SELECT count(*) FROM r",
        1,
        _E,
    ),
    # --- row choice by value: ORDER BY / GROUP BY / DISTINCT ON / HAVING keys computed from it ---
    Case(_N40 + "SELECT n.g FROM n, customers c WHERE c.id = 1 ORDER BY abs(n.g - length(c.email)) LIMIT 1", 1, _E),
    Case(
        _N40 + "SELECT x.g FROM (SELECT n.g FROM n, customers c WHERE c.id = 1 "
        "ORDER BY abs(n.g - length(c.email)) LIMIT 1) x",
        1,
        _E,
    ),
    Case(
        _N40 + ", pick AS (SELECT n.g FROM n, customers c WHERE c.id = 1 ORDER BY abs(n.g - length(c.email)) "
        "LIMIT 1) SELECT pick.g FROM pick",
        1,
        _E,
    ),
    Case(
        _N40 + "SELECT min(n.g) AS m FROM n, customers c WHERE c.id = 1 GROUP BY n.g < length(c.email) "
        "ORDER BY m DESC LIMIT 1",
        1,
        _E,
    ),
    Case(
        _N40 + "SELECT n.g, abs(n.g - length(c.email)) AS d FROM n, customers c WHERE c.id = 1 ORDER BY d LIMIT 1",
        2,
        {0: "email", 1: "email"},
    ),
    Case(
        _N40 + "SELECT n.g, n.g < length(c.email) FROM n, customers c WHERE c.id = 1 ORDER BY 2 DESC, 1 DESC LIMIT 1",
        2,
        {0: "email", 1: "email"},
    ),
    Case(
        _N40 + "SELECT a.g FROM n a, n b, customers c WHERE c.id = 1 AND b.g <= a.g GROUP BY a.g "
        "HAVING count(*) <= length(max(c.email)) ORDER BY a.g DESC LIMIT 1",
        1,
        _E,
    ),
    Case(
        "SELECT DISTINCT ON (g < length(c.email)) g FROM generate_series(1, 40) g, customers c WHERE c.id = 1 "
        "ORDER BY g < length(c.email), g DESC",
        1,
        _E,
        (PG,),
    ),
    Case(
        "SELECT g FROM generate_series(1, 40) g, customers c WHERE c.id = 1 "
        "ORDER BY abs(g - length(c.email)) FETCH FIRST 1 ROWS ONLY",
        1,
        _E,
        (PG,),
    ),
    Case(
        "SELECT l.g FROM customers c, LATERAL (SELECT g FROM generate_series(1, 40) g "
        "ORDER BY abs(g - length(c.email)) LIMIT 1) l WHERE c.id = 1",
        1,
        _E,
        (PG,),
    ),
    # ... while counts, sorts and groups over plain columns stay readable
    Case("SELECT count(*) FROM customers WHERE name LIKE '김%'", 1, {}, attack=False),
    Case("SELECT count(*) FROM (SELECT DISTINCT name FROM customers) s", 1, {}, attack=False),
    Case(
        "SELECT count(DISTINCT x.phone) FROM (SELECT phone FROM customers WHERE city = '서울') x", 1, {}, attack=False
    ),
    Case("SELECT count(*) FROM (SELECT id FROM customers WHERE phone LIKE '010%' LIMIT 2) s", 1, {}, attack=False),
    Case("SELECT count(IF(name LIKE '김%', 1, NULL)) FROM customers", 1, {}, (MY,), attack=False),
    Case("SELECT id FROM customers ORDER BY name LIMIT 1", 1, {}, attack=False),
    Case("SELECT id FROM customers ORDER BY name COLLATE NOCASE DESC LIMIT 1", 1, {}, (LITE,), attack=False),
    Case("SELECT id FROM customers ORDER BY (name) DESC", 1, {}, attack=False),
    Case("SELECT DISTINCT ON (name) id FROM customers ORDER BY name, id", 1, {}, (PG,), attack=False),
    Case("SELECT city, count(*) FROM customers GROUP BY city HAVING max(name) LIKE '김%'", 2, {}, attack=False),
    Case(
        "SELECT c.city, count(*) FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.name LIKE '김%' "
        "GROUP BY c.city ORDER BY 2 DESC LIMIT 5",
        2,
        {},
        attack=False,
    ),
    Case("SELECT x.id FROM (SELECT id, name FROM customers) x ORDER BY x.name LIMIT 2", 1, {}, attack=False),
    # --- must stay readable: counts ---
    Case("SELECT count(*) FROM customers", 1, {}, attack=False),
    Case("SELECT count(DISTINCT phone), count(email) FROM customers", 2, {}, attack=False),
    Case("SELECT count(*) FILTER (WHERE name LIKE 'A%') FROM customers", 1, {}, (PG, LITE), attack=False),
    Case("SELECT count(CASE WHEN name LIKE 'A%' THEN 1 END) FROM customers", 1, {}, attack=False),
    Case(
        "SELECT c.id, (SELECT count(*) FROM customers c2 WHERE c2.name = c.name) FROM customers c",
        2,
        {},
        attack=False,
    ),
    Case("SELECT city, count(*) FROM customers WHERE phone LIKE '010%' GROUP BY city", 2, {}, attack=False),
    Case("SELECT count(*) FROM pg_stats", 1, {}, (PG,), attack=False),
    # --- must stay readable: plain non-personal outputs ---
    Case("SELECT city FROM customers", 1, {}, attack=False),
    Case("SELECT amount FROM orders", 1, {}, attack=False),
    Case(
        "SELECT c.city, sum(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.city",
        2,
        {},
        attack=False,
    ),
    Case("SELECT id FROM customers WHERE name = '김민준'", 1, {}, attack=False),
    # a semi-join compares with ids: a filter, not a value
    Case(
        "SELECT o.customer_id, count(*) FROM orders o "
        "WHERE o.customer_id IN (SELECT id FROM customers WHERE phone LIKE '010%') GROUP BY 1",
        2,
        {},
        attack=False,
    ),
    Case(
        "SELECT o.amount FROM orders o JOIN customers c ON c.id = o.customer_id "
        "WHERE c.name = '김민준' OR o.amount > 9",
        1,
        {},
        attack=False,
    ),
    Case(
        "SELECT e.id FROM customers c JOIN customers e ON e.name = c.name WHERE c.phone LIKE '010%'",
        1,
        {},
        attack=False,
    ),
    Case("SELECT id, city FROM customers ORDER BY name", 2, {}, attack=False),
    Case("SELECT city FROM customers GROUP BY city, name", 1, {}, attack=False),
    Case("SELECT max(id) FROM customers GROUP BY name", 1, {}, attack=False),
    Case("SELECT o.id, c.city FROM orders o LEFT JOIN customers c ON c.id = o.customer_id", 2, {}, attack=False),
    Case("SELECT md5(memo), id FROM notes", 2, {}, (PG, MY), attack=False),
    Case("SELECT id, upper(memo) FROM notes", 2, {}, attack=False),
]

PARAMS = [(dialect, case) for case in CASES for dialect in case.dialects]
ATTACKS = [(dialect, case) for dialect, case in PARAMS if case.attack]


def _case_id(dialect: str, case: Case) -> str:
    text = re.sub(r"\s+", " ", case.text(dialect))
    return f"{dialect}-{text[:70]}"


def _masked(outputs: list[OutputColumn]) -> dict[int, str]:
    return {o.index: o.pii_kind for o in outputs if o.pii_kind}


def _classify(dialect: str, case: Case) -> list[OutputColumn]:
    return classify_outputs(case.text(dialect), dialect, CUSTOMER_SCHEMA, n_columns=case.n, tainted_literals=TAINTED)


def test_case_table_is_broad() -> None:
    assert len(PARAMS) >= 60
    assert {dialect for dialect, _ in PARAMS} == set(ALL)
    assert len(ATTACKS) >= 40


@pytest.mark.parametrize(("dialect", "case"), PARAMS, ids=[_case_id(d, c) for d, c in PARAMS])
def test_taint(dialect: str, case: Case) -> None:
    outputs = _classify(dialect, case)
    assert [o.index for o in outputs] == list(range(case.n))
    assert _masked(outputs) == case.masked, [(o.index, o.pii_kind, o.reason) for o in outputs]
    for output in outputs:
        assert output.reason
        if output.pii_kind is None:
            assert not any(CUSTOMER_SCHEMA[t][c] for t, c in output.sources), output


@pytest.mark.parametrize(("dialect", "case"), PARAMS, ids=[_case_id(d, c) for d, c in PARAMS])
def test_taint_with_and_without_the_shortcut(monkeypatch, dialect: str, case: Case) -> None:
    """Differential: the fast paths never decide differently from the walk."""
    fast = _masked(_classify(dialect, case))
    monkeypatch.setattr(lineage_classifier, "_may_reach_pii", lambda root, names: True)
    assert _masked(_classify(dialect, case)) == fast == case.masked


# --- the parameter and the reasons -------------------------------------------------------


def test_literals_taint_only_when_they_hold_an_original() -> None:
    sql = "SELECT upper('김민준'), upper('nobody') FROM customers"
    assert _masked(classify_outputs(sql, PG, CUSTOMER_SCHEMA, 2)) == {}
    tainted = classify_outputs(sql, PG, CUSTOMER_SCHEMA, 2, tainted_literals={"김민준": "name"})
    assert _masked(tainted) == {0: "name"}
    assert tainted[0].sources == () and "literal" in tainted[0].reason
    # a literal that merely contains the original (a token inside a longer literal)
    assert _masked(classify_outputs("SELECT 'Mr 김민준!'", PG, {}, 1, tainted_literals=TAINTED)) == {0: "name"}
    # empty originals are ignored (they would match every literal)
    assert _masked(classify_outputs("SELECT 'x'", PG, {}, 1, tainted_literals={"": "name"})) == {}


def test_current_query_taints_only_with_a_tainted_literal() -> None:
    assert _masked(classify_outputs("SELECT current_query()", PG, CUSTOMER_SCHEMA, 1)) == {}
    assert _masked(classify_outputs("SELECT current_query()", PG, CUSTOMER_SCHEMA, 1, tainted_literals=TAINTED)) == {
        0: "phone"
    }


def test_rewriting_masks_even_without_personal_data_in_the_connection() -> None:
    schema = {"notes": {"id": None, "memo": None}}
    outputs = classify_outputs("SELECT id, reverse(memo), memo FROM notes", PG, schema, 3)
    assert _masked(outputs) == {1: DOUBT}
    assert outputs[1].reason == "reverse() rewrites a column's characters; masked"
    # a relation outside a schema with no personal data at all: nothing to protect
    assert _masked(classify_outputs("SELECT * FROM pg_stats", PG, schema, 14)) == {}


def test_reasons_say_why() -> None:
    outputs = classify_outputs(
        "SELECT length(name), count(*) FILTER (WHERE name > 'M'), s.n_distinct FROM customers c, pg_stats s "
        "GROUP BY c.name, 3",
        PG,
        CUSTOMER_SCHEMA,
        3,
    )
    assert outputs[0].reason == "derived from customers.name"
    assert outputs[1].reason == "count only" and outputs[1].pii_kind is None
    assert outputs[2].reason == "reads pg_stats, which is not in the analysed schema; masked"
    # grouped by an EXPRESSION of the name (GROUP BY 1 = length(name)): every output is shaped by it
    grouped = classify_outputs(
        "SELECT length(name), count(*) FROM customers c GROUP BY 1",
        PG,
        CUSTOMER_SCHEMA,
        2,
    )
    assert grouped[1].reason == "derived from customers.name" and grouped[1].pii_kind == "name"


def test_shortcut_is_not_taken_for_attribute_notation_or_literals() -> None:
    for sql, literals in [
        ("SELECT c.row_to_json FROM customers c", None),
        ("SELECT c.city, '김민준' FROM customers c", TAINTED),
        ("SELECT city, translate(city, 'a', 'b') FROM customers", None),
    ]:
        outputs = classify_outputs(sql, PG, CUSTOMER_SCHEMA, tainted_literals=literals)
        assert not any(o.reason == "no personal-data column is named in the query" for o in outputs)
        assert _masked(outputs)


def test_fallback_applies_taint_rules_by_name() -> None:
    # `score` is unqualified next to an unknown table: the name-based fallback decides
    sql = "SELECT length(c.name), score, c.id, reverse(c.city), '김민준' FROM customers c JOIN loyalty u ON 1 = 1"
    outputs = classify_outputs(sql, PG, CUSTOMER_SCHEMA, 5, tainted_literals=TAINTED)
    assert all(o.reason.startswith("lineage unresolved") for o in outputs)
    assert _masked(outputs) == {0: "name", 1: CONNECTION, 3: DOUBT, 4: "name"}


def test_fallback_applies_count_and_row_choice_rules_by_name() -> None:
    # `score` is unqualified next to an unknown table: the name-based fallback decides
    base = "FROM customers c JOIN loyalty u ON 1 = 1"
    for sql, n, masked in [
        (f"SELECT c.id, score {base} ORDER BY c.name LIMIT 1", 2, {1: CONNECTION}),
        (f"SELECT c.id, c.city {base} ORDER BY abs(score - ascii(c.name)) LIMIT 1", 2, None),
        (f"SELECT c.city, count(*) {base} GROUP BY c.city, score < length(c.phone)", 2, None),
        (f"SELECT c.city, count(score % ascii(c.name)) {base} GROUP BY c.city", 2, {1: CONNECTION}),
        (f"SELECT c.city, count(DISTINCT c.phone), count(score) {base} GROUP BY c.city", 3, {2: CONNECTION}),
        (f"SELECT c.city, count(*) FILTER (WHERE score <= ascii(c.name)) {base} GROUP BY c.city", 2, None),
        (f"SELECT c.city, count(*) {base} GROUP BY c.city, score HAVING count(*) < ascii(max(c.name))", 2, None),
    ]:
        outputs = classify_outputs(sql, PG, CUSTOMER_SCHEMA, n)
        assert all(o.reason.startswith("lineage unresolved") for o in outputs), outputs
        if masked is None:  # row choice by value, or a mixed filter: every output masked
            assert all(o.pii_kind for o in outputs), (sql, outputs)
        else:
            assert _masked(outputs) == masked, (sql, outputs)


def test_budget_overrun_masks() -> None:
    deep = "SELECT " + " || ".join(["length(name)"] * 6000) + " FROM customers"
    outputs = classify_outputs(deep, PG, CUSTOMER_SCHEMA, 1)
    assert outputs[0].pii_kind is not None


# --- on the real databases ---------------------------------------------------------------

# Personal data planted by tests/support/customer_dbs.py in customers and in
# the first note: the values a column lineage leaves unmasked must not show
# (the later notes test the format detectors, which run after lineage).
PLANTED = list(PLANTED_VALUES[:10])
_DIGITS_TO_LETTERS = str.maketrans("0123456789", "abcdefghij")


def _encodings(value: str) -> set[str]:
    raw = value.encode()
    return {
        value.lower(),
        value[::-1].lower(),
        raw.hex(),
        base64.b64encode(raw).decode().lower().rstrip("="),
        value.translate(_DIGITS_TO_LETTERS).lower(),
    }


PLANTED_ENCODINGS = sorted({encoding for value in PLANTED for encoding in _encodings(value)})

MUTATIONS = {
    "postgresql": "UPDATE customers SET name = 'Aaaa' || id, phone = '0-' || (10 - id), email = 'm' || id || '@m.test'",
    "sqlite": "UPDATE customers SET name = 'Aaaa' || id, phone = '0-' || (10 - id), email = 'm' || id || '@m.test'",
    "mysql": "UPDATE customers SET name = CONCAT('Aaaa', id), phone = CONCAT('0-', 10 - id), "
    "email = CONCAT('m', id, '@m.test')",
}


def _cell(value: object) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return repr(value)


def _columns(rows: list, n: int) -> list[Counter]:
    return [Counter(_cell(row[i]) for row in rows) for i in range(n)]


def _pairs(rows: list, index: int) -> Counter:
    return Counter((_cell(row[0]), _cell(row[index])) for row in rows)


def _run_mutated(db, sql: str) -> list:
    """The query's rows with the personal-data columns changed, in a
    transaction that is rolled back (the database is shared by the session)."""
    mutation = MUTATIONS[db.engine]
    if db.engine == "postgresql":
        import psycopg

        with psycopg.connect(db.admin_dsn) as conn:
            try:
                conn.execute(mutation)
                return conn.execute(sql).fetchall()
            finally:
                conn.rollback()
    if db.engine == "mysql":
        conn = _mysql_admin(db.admin_dsn.rsplit("/", 1)[1])
        try:
            conn.begin()
            with conn.cursor() as cursor:
                cursor.execute(mutation)
                cursor.execute(sql)
                return list(cursor.fetchall())
        finally:
            conn.rollback()
            conn.close()
    conn = sqlite3.connect(db.admin_dsn.removeprefix("sqlite:///"))
    try:
        conn.execute(mutation)
        return conn.execute(sql).fetchall()
    finally:
        conn.rollback()
        conn.close()


def _run(db, sql: str) -> tuple[list[str], list]:
    result = execute_readonly(engine=db.engine, dsn=db.dsn, sql=sql, row_cap=500, timeout_ms=10_000)
    return result.columns, result.rows


@pytest.mark.services
@pytest.mark.parametrize(("dialect", "case"), ATTACKS, ids=[_case_id(d, c) for d, c in ATTACKS])
def test_attack_on_the_real_database(request, dialect: str, case: Case) -> None:
    db = request.getfixturevalue(FIXTURE[dialect])
    sql = case.text(dialect)
    try:
        columns, rows = _run(db, sql)
    except QueryError as refused:
        # PostgreSQL: the executor refuses what would run code other than
        # pg_catalog's (attribute notation), and an extension's function
        # called as pg_catalog's does not exist (42883): no output.
        assert refused.error_class in (BIND_ERROR_CLASS, "42883"), refused
        return
    outputs = _classify(dialect, case)
    assert len(columns) == case.n == len(outputs)
    masked = _masked(outputs)

    # 1. Values that change when the personal data changes must be masked.
    original = _columns(rows, case.n)
    if any(literal in sql for literal in REPLACEMENT):
        replaced = sql
        for literal, other in REPLACEMENT.items():
            replaced = replaced.replace(literal, other)
        changed_rows = _run(db, replaced)[1]
    else:
        changed_rows = _run_mutated(db, sql)
    changed = _columns(changed_rows, case.n)
    depends = {i for i in range(case.n) if original[i] != changed[i]}
    if 0 not in depends:
        # Column 0 unchanged (a key such as `id`): a value moving to another
        # row depends too (`row_number() OVER (ORDER BY name)` keeps {1, 2, 3}).
        depends |= {j for j in range(1, case.n) if _pairs(rows, j) != _pairs(changed_rows, j)}
    assert depends <= set(masked), f"columns {depends - set(masked)} depend on personal data but are not masked"

    # 2. No unmasked column shows a planted value or a simple encoding of one.
    for index in set(range(case.n)) - set(masked):
        for row in rows:
            text = _cell(row[index]).lower()
            leaked = [encoding for encoding in PLANTED_ENCODINGS if encoding in text]
            assert not leaked, (index, row[index], leaked)


@pytest.mark.services
@pytest.mark.parametrize("dialect", ALL)
def test_the_differential_oracle_sees_dependence(request, dialect: str) -> None:
    """The database check is not vacuous: a plain personal-data column and a
    length of one change under the mutation; a count and a city do not."""
    db = request.getfixturevalue(FIXTURE[dialect])
    sql = "SELECT name, length(phone), city, (SELECT count(*) FROM customers) FROM customers"
    original = _columns(_run(db, sql)[1], 4)
    changed = _columns(_run_mutated(db, sql), 4)
    assert [original[i] != changed[i] for i in range(4)] == [True, True, False, False]


# --- generated expressions ---------------------------------------------------------------

_PII_LEAVES = ["c.name", "c.phone", "c.email"]
_PLAIN_LEAVES = ["c.id", "c.city", "o.amount", "o.note", "'x'", "1"]
_COLUMN_LEAVES = [leaf for leaf in _PII_LEAVES + _PLAIN_LEAVES if leaf[0].isalpha()]
_UNARY = [
    "upper({})",
    "length({})",
    "substr({}, 1, 2)",
    "coalesce({}, 'a')",
    "{} || 'a'",
    "CAST({} AS TEXT)",
    "CASE WHEN {} IS NULL THEN 1 ELSE 0 END",
    "({} > 'M')",
    "(SELECT {})",
    "max({}) OVER (ORDER BY c.id)",
]
_BINARY = ["{} || {}", "coalesce({}, {})", "CASE WHEN {} = {} THEN 1 ELSE 2 END"]
_REWRITE = ["reverse({})", "translate({}, '01', 'ab')", "encode(convert_to({}, 'UTF8'), 'hex')"]


def _leaf(text: str) -> tuple:
    pii = text in _PII_LEAVES
    return text, pii, False, not text.startswith(("'", "1"))  # sql, reads PII, rewrites a column, has a column


_expressions = st.recursive(
    st.sampled_from(_PII_LEAVES + _PLAIN_LEAVES).map(_leaf),
    lambda inner: st.one_of(
        # A window ordered by c.id reads a column even over a literal.
        st.tuples(st.sampled_from(_UNARY), inner).map(
            lambda t: (t[0].format(t[1][0]), t[1][1], t[1][2], t[1][3] or "c.id" in t[0])
        ),
        st.tuples(st.sampled_from(_BINARY), inner, inner).map(
            lambda t: (t[0].format(t[1][0], t[2][0]), t[1][1] or t[2][1], t[1][2] or t[2][2], t[1][3] or t[2][3])
        ),
        st.tuples(st.sampled_from(_REWRITE), inner).map(
            lambda t: (t[0].format(t[1][0]), t[1][1], t[1][2] or t[1][3], t[1][3])
        ),
        # a count of a plain column hides it; a count of an expression is traced like it
        inner.map(lambda t: (f"count({t[0]})", *((False, False, False) if t[0] in _COLUMN_LEAVES else t[1:]))),
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(_expressions, st.booleans())
def test_generated_expressions_are_masked_exactly_when_they_read_personal_data(expression, shortcut) -> None:
    sql_text, reads_pii, rewrites, _ = expression
    sql = f"SELECT {sql_text} AS v, c.city FROM customers c JOIN orders o ON o.customer_id = c.id"
    if shortcut:
        outputs = classify_outputs(sql, PG, CUSTOMER_SCHEMA, n_columns=2)
    else:
        original = sql_lineage._may_reach_pii
        sql_lineage._may_reach_pii = lambda root, names: True
        try:
            outputs = classify_outputs(sql, PG, CUSTOMER_SCHEMA, n_columns=2)
        finally:
            sql_lineage._may_reach_pii = original
    assert bool(outputs[0].pii_kind) == (reads_pii or rewrites), (sql, outputs[0])
    assert outputs[1].pii_kind is None, (sql, outputs[1])
