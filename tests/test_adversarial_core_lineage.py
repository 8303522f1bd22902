"""Adversarial review of the run core's lineage (governance/pii/lineage/).

Two breaks, each reproduced through the real executor and at unit level;
each test failed before its fix.

* AGGREGATES OVER MULTIPLIED ROWS. Only COUNT applied the count rules
  (_Classifier._count_multiplied): ``sum(1)`` over ``customers c,
  generate_series(1, ascii(c.name))`` IS ascii(c.name), and so are
  ``avg``, ``string_agg('x', '')``, ``array_agg(1)``, ``max(row_number()
  OVER ())`` of a derived table, ``sum(1) ... WHERE g <= ascii(name)``. An
  aggregate without GROUP BY returns one row, so the row-count refusal
  did not catch them either. Fix: every output of a scope whose rows
  personal data multiplies or makes carries that taint (walk.py
  _scope_output).
* RENAMED COLUMNS OF A TABLE. PostgreSQL's ``customers c(name, id)`` renames
  the table's columns by position: ``SELECT id FROM customers c(name, id)``
  returns the NAME column. The walk resolved ``id`` by name
  (walk.py _column_of). Fix: a column of a table whose alias lists columns
  is the whole row (the schema's column order is not proof of the table's).
* CORRELATED COUNTS. A count nested in an output was exempt whatever its
  filter compared: ``sum((SELECT count(*) FROM customers c WHERE c.id = 1
  AND ascii(c.name) >= g)) FROM generate_series(1, 60000) g`` IS the code,
  one query per character (and ``SELECT g, (SELECT count(*) ... < g)`` shows
  it as the step). Fix: personal data that a nested count's filter (WHERE,
  ON, FILTER, CASE, derived tables) compares with a column of an OUTER row
  taints it (walk.py _correlated).
"""

from __future__ import annotations

import json

import pytest

from governance.pii.lineage import classify_outputs
from tests.support.customer_dbs import CUSTOMER_SCHEMA
from tests.support.governed import governed_connection, spell

pytestmark = [pytest.mark.django_db, pytest.mark.services]

NAME = "김민준"
PHONE = "010-1234-5678"


def _schema():
    return {table: dict(columns) for table, columns in CUSTOMER_SCHEMA.items()}


AGGREGATES_OF_MULTIPLIED_ROWS = [
    "SELECT sum(1) FROM customers c, generate_series(1, ascii(c.name)) g",
    "SELECT sum(o.id) FROM customers c, generate_series(1, ascii(c.name)) g, orders o",
    "SELECT length(string_agg('x', '')) FROM customers c, generate_series(1, ascii(c.name)) g",
    "SELECT array_length(array_agg(1), 1) FROM customers c, generate_series(1, ascii(c.name)) g",
    "SELECT sum(1) FROM orders o JOIN customers c ON o.amount <= ascii(c.name)",
    "SELECT sum(1) FROM generate_series(1, 100000) g WHERE g <= (SELECT ascii(name) FROM customers WHERE id = 1)",
    "SELECT sum(1) FROM generate_series(1, 100000) g, customers c WHERE g <= ascii(c.name) AND c.id = 1",
    "SELECT sum(1) FROM (SELECT 1 FROM generate_series(1, 100000) LIMIT (SELECT ascii(name) FROM customers)) s",
    "SELECT sum(1) FROM (SELECT generate_series(1, ascii(name)) FROM customers WHERE id = 1) s",
    "SELECT max(rn) FROM (SELECT row_number() OVER () rn FROM customers c, generate_series(1, ascii(c.name)) g) s",
    "SELECT sum(1) FROM generate_series(1, 100000) g WHERE EXISTS (SELECT 1 FROM customers c WHERE g <= ascii(c.name))",
]


@pytest.mark.parametrize("sql", AGGREGATES_OF_MULTIPLIED_ROWS)
def test_lineage_masks_an_aggregate_over_rows_personal_data_multiplies(sql):
    outputs = classify_outputs(sql, "postgres", _schema(), n_columns=1)
    assert all(o.pii_kind for o in outputs), outputs


def test_lineage_keeps_an_aggregate_over_filtered_rows():
    # Filtering real rows stays a row choice, like count(*) WHERE ... (accepted).
    (output,) = classify_outputs("SELECT sum(amount) FROM orders WHERE customer_id = 1", "postgres", _schema(), 1)
    assert output.pii_kind is None, output


RENAMED_COLUMNS = [
    "SELECT id FROM customers c(name, id)",
    "SELECT c.id FROM customers AS c(name, id)",
    "SELECT city FROM customers c(id, city)",
    "SELECT upper(city) FROM customers c(id, city)",
]


@pytest.mark.parametrize("sql", RENAMED_COLUMNS)
def test_lineage_masks_a_column_renamed_by_position(sql):
    (output,) = classify_outputs(sql, "postgres", _schema(), n_columns=1)
    assert output.pii_kind, output


def test_pg_sum_over_multiplied_rows_spells_the_name(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT sum(1) FROM customers c, generate_series(1, ascii(substr(c.name, {k}, 1))) g WHERE c.id = 1",
        len(NAME),
    )
    assert spelled != NAME, "sum(1) over rows generate_series(1, ascii(...)) made returned the name"


def test_pg_string_agg_over_filtered_numbers_spells_the_phone(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT length(string_agg('x', '')) FROM generate_series(1, 200) g, customers c "
        "WHERE g <= ascii(substr(c.phone, {k}, 1)) AND c.id = 1",
        len(PHONE),
    )
    assert spelled != PHONE


def test_sqlite_total_over_recursive_rows_spells_the_name(sqlite_customer_db, django_user_model):
    governed = governed_connection(sqlite_customer_db, django_user_model)
    spelled = spell(
        governed,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 60000) "
        "SELECT CAST(sum(1) AS INTEGER) FROM r, customers c WHERE r.n <= unicode(substr(c.name, {k}, 1)) "
        "AND c.id = 1",
        len(NAME),
    )
    assert spelled != NAME


def test_mysql_sum_over_recursive_rows_spells_the_phone(mysql_customer_db, django_user_model):
    governed = governed_connection(mysql_customer_db, django_user_model)
    spelled = spell(
        governed,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 200) "
        "SELECT CAST(sum(1) AS SIGNED) FROM r, customers c WHERE r.n <= ascii(substr(c.phone, {k}, 1)) AND c.id = 1",
        len(PHONE),
    )
    assert spelled != PHONE


def test_pg_renamed_column_returns_the_names_in_clear(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, outcome = governed.run("SELECT id FROM customers c(name, id) ORDER BY 1")
    assert outcome == "success", payload
    assert NAME not in json.dumps(payload, ensure_ascii=False), payload


CORRELATED_COUNTS = [
    "SELECT sum((SELECT count(*) FROM customers c WHERE c.id = 1 AND ascii(c.name) >= g)) "
    "FROM generate_series(1, 60000) g",
    "SELECT (SELECT count(*) FROM customers c WHERE ascii(c.name) < g.g) FROM generate_series(44000, 44010) g",
    "SELECT (SELECT count(*) FROM customers c WHERE ascii(c.name) < o.amount) FROM orders o",
    "SELECT sum((SELECT count(*) FILTER (WHERE ascii(c.name) >= g) FROM customers c WHERE c.id = 1)) "
    "FROM generate_series(1, 60000) g",
    "SELECT sum((SELECT count(*) FROM (SELECT 1 FROM customers c WHERE ascii(c.name) >= g) s)) "
    "FROM generate_series(1, 60000) g",
    "SELECT sum((SELECT count(*) FROM customers c JOIN orders o ON o.customer_id = c.id AND ascii(c.name) >= g)) "
    "FROM generate_series(1, 60000) g",
    "SELECT sum((SELECT count(CASE WHEN ascii(c.name) >= g THEN 1 END) FROM customers c)) "
    "FROM generate_series(1, 60000) g",
]


@pytest.mark.parametrize("sql", CORRELATED_COUNTS)
def test_lineage_masks_a_count_correlated_with_personal_data(sql):
    (output,) = classify_outputs(sql, "postgres", _schema(), n_columns=1)
    assert output.pii_kind, output


def test_lineage_keeps_a_correlated_count_that_compares_only_plain_columns():
    # Correlated on a plain column, personal data compared only with a constant: a count.
    sql = (
        "SELECT c.city, (SELECT count(*) FROM customers c2 WHERE c2.city = c.city AND c2.name LIKE '김%') "
        "FROM customers c"
    )
    outputs = classify_outputs(sql, "postgres", _schema(), n_columns=2)
    assert [o.pii_kind for o in outputs] == [None, None], outputs


def test_pg_sum_of_correlated_counts_spells_the_name(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT sum((SELECT count(*) FROM customers c WHERE c.id = 1 AND ascii(substr(c.name, {k}, 1)) >= g)) "
        "FROM generate_series(1, 60000) g",
        len(NAME),
    )
    assert spelled != NAME, "sum of a correlated count over generate_series returned the name"


def test_sqlite_sum_of_correlated_counts_spells_the_phone(sqlite_customer_db, django_user_model):
    governed = governed_connection(sqlite_customer_db, django_user_model)
    spelled = spell(
        governed,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 200) "
        "SELECT sum((SELECT count(*) FROM customers c WHERE c.id = 1 AND unicode(substr(c.phone, {k}, 1)) >= r.n)) "
        "FROM r",
        len(PHONE),
    )
    assert spelled != PHONE
