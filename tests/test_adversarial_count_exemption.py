"""Found by adversarial review: the COUNT exemption of the lineage taint
(governance/pii/lineage/, _Classifier._trace / _count_multiplied) lets a
count return a personal value, one character code per query.

Class: LINEAGE / COUNT EXEMPTION. A count is exempt "because it returns a
number of rows". But the rows it counts can be chosen - or the values it
counts made distinct - by an expression of a personal-data column, and then
the number IS the value: count(*) FILTER (WHERE g <= ascii(name)) over
g = 1..N is ascii(name). _count_multiplied only looks at WHERE / JOIN ON /
HAVING atoms and FROM-table-function arguments; it ignores

* the count's own FILTER (WHERE ...) and its argument (CASE / NULLIF /
  DISTINCT expressions of the name),
* LIMIT / OFFSET, GROUP BY, DISTINCT and set-returning functions in the
  SELECT list of the derived tables the count reads.

Each test reconstructs a planted value through the real executor; each
failed before the fix: the value came back in clear (as code points).
"""

from __future__ import annotations

import pytest

from governance.pii.lineage import classify_outputs
from tests.support.customer_dbs import CUSTOMER_SCHEMA
from tests.support.governed import governed_connection, spell

pytestmark = [pytest.mark.django_db, pytest.mark.services]

NAME = "김민준"
PHONE = "010-1234-5678"


def _schema():
    return {table: dict(columns) for table, columns in CUSTOMER_SCHEMA.items()}


# --- unit level: lineage says "count only" for counts that are the value -----------

COUNTS_THAT_ARE_VALUES = [
    # the count's own FILTER
    "SELECT count(*) FILTER (WHERE g <= ascii(c.name)) FROM generate_series(1, 100000) g, customers c WHERE c.id = 1",
    # the count's argument
    "SELECT count(CASE WHEN g <= ascii(c.name) THEN 1 END) FROM generate_series(1, 100000) g, customers c "
    "WHERE c.id = 1",
    "SELECT count(NULLIF(g <= ascii(c.name), false)) FROM generate_series(1, 100000) g, customers c WHERE c.id = 1",
    "SELECT count(DISTINCT g % ascii(c.name)) FROM generate_series(1, 100000) g, customers c WHERE c.id = 1",
    # the rows of a derived table: LIMIT, OFFSET, GROUP BY, DISTINCT, an SRF in its SELECT list
    "SELECT count(*) FROM (SELECT 1 FROM generate_series(1, 100000) LIMIT (SELECT ascii(name) FROM customers "
    "WHERE id = 1)) s",
    "SELECT count(*) FROM (SELECT 1 FROM generate_series(1, 100000) OFFSET 100000 - (SELECT ascii(name) "
    "FROM customers WHERE id = 1)) s",
    "SELECT count(*) FROM (SELECT 1 FROM generate_series(1, 100000) g, customers c WHERE c.id = 1 "
    "GROUP BY g % ascii(c.name)) s",
    "SELECT count(*) FROM (SELECT DISTINCT g % ascii(c.name) FROM generate_series(1, 100000) g, customers c "
    "WHERE c.id = 1) s",
    "SELECT count(*) FROM (SELECT generate_series(1, ascii(name)) FROM customers WHERE id = 1) s",
]


@pytest.mark.parametrize("sql", COUNTS_THAT_ARE_VALUES)
def test_lineage_masks_a_count_whose_value_is_a_personal_value(sql):
    # Class: LINEAGE / COUNT EXEMPTION (before the fix: "count only").
    (output,) = classify_outputs(sql, "postgres", _schema(), n_columns=1)
    assert output.pii_kind, output


# --- end to end: the planted name and phone spelled out through counts ---------------


def test_pg_count_filter_spells_the_name(pg_customer_db, django_user_model):
    # Class: LINEAGE / COUNT EXEMPTION, FILTER (WHERE ...) of the count.
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT count(*) FILTER (WHERE g <= ascii(substr(c.name, {k}, 1))) "
        "FROM generate_series(1, 200000) g, customers c WHERE c.id = 1",
        len(NAME),
    )
    assert spelled != NAME, "count(*) FILTER (WHERE g <= ascii(...)) returned the name in clear"


def test_pg_count_over_limited_derived_table_spells_the_phone(pg_customer_db, django_user_model):
    # Class: LINEAGE / COUNT EXEMPTION, LIMIT of a derived table.
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT count(*) FROM (SELECT 1 FROM generate_series(1, 1000) "
        "LIMIT (SELECT ascii(substr(phone, {k}, 1)) FROM customers WHERE id = 1)) s",
        len(PHONE),
    )
    assert spelled != PHONE, "count(*) over a LIMIT chosen by the phone returned the phone in clear"


def test_pg_count_over_set_returning_select_list_spells_the_name(pg_customer_db, django_user_model):
    # Class: LINEAGE / COUNT EXEMPTION, set-returning function in a derived table's SELECT list.
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT count(*) FROM (SELECT generate_series(1, ascii(substr(name, {k}, 1))) FROM customers WHERE id = 1) s",
        len(NAME),
    )
    assert spelled != NAME


def test_sqlite_count_case_spells_the_name(sqlite_customer_db, django_user_model):
    # Class: LINEAGE / COUNT EXEMPTION, CASE inside count(); SQLite.
    governed = governed_connection(sqlite_customer_db, django_user_model)
    spelled = spell(
        governed,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 60000) "
        "SELECT count(CASE WHEN r.n <= unicode(substr(c.name, {k}, 1)) THEN 1 END) FROM r, customers c "
        "WHERE c.id = 1",
        len(NAME),
    )
    assert spelled != NAME


def test_mysql_count_distinct_spells_the_phone(mysql_customer_db, django_user_model):
    # Class: LINEAGE / COUNT EXEMPTION, COUNT(DISTINCT expression of the phone); MariaDB.
    governed = governed_connection(mysql_customer_db, django_user_model)
    spelled = spell(
        governed,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 200) "
        "SELECT count(DISTINCT CASE WHEN r.n <= ascii(substr(c.phone, {k}, 1)) THEN r.n END) "
        "FROM r, customers c WHERE c.id = 1",
        len(PHONE),
    )
    assert spelled != PHONE
