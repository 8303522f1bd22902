"""Found by adversarial review: the ROW-CHOICE exemption of the lineage taint
(governance/pii/lineage/, _Classifier._lineage with full=False and
_Classifier._derived_column) lets a plain number column return a personal
value.

Class: LINEAGE / ROW CHOICE. The outermost query's ORDER BY / GROUP BY /
DISTINCT ON, and every row filter of the derived tables and CTEs it reads,
"choose rows" and do not taint outputs. Over a number source that is false:

* ORDER BY abs(g - ascii(name)) LIMIT 1 over g = 1..N returns the one g that
  EQUALS ascii(name) (also FETCH FIRST, and inside a derived table);
* GROUP BY g < ascii(name) splits g at the value: min(g) of one group is it;
* DISTINCT ON (g < ascii(name)) ... ORDER BY ..., g DESC likewise.

_limit_taint covers a LIMIT *computed* from personal data, and _compared a
column compared in WHERE / ON / HAVING, but an ORDER BY or GROUP BY key is
neither. Each test failed before the fix: the value came back in clear.
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


ROW_CHOICES_THAT_ARE_VALUES = [
    "SELECT g FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 ORDER BY abs(g - ascii(c.name)) LIMIT 1",
    "SELECT g FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 "
    "ORDER BY abs(g - ascii(c.name)) FETCH FIRST 1 ROWS ONLY",
    "SELECT x.g FROM (SELECT g FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 "
    "ORDER BY abs(g - ascii(c.name)) LIMIT 1) x",
    "SELECT min(g) FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 GROUP BY g < ascii(c.name)",
    "SELECT sum(g) FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 GROUP BY (g <= ascii(c.name))",
    "SELECT DISTINCT ON (g < ascii(c.name)) g FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 "
    "ORDER BY g < ascii(c.name), g DESC",
]


@pytest.mark.parametrize("sql", ROW_CHOICES_THAT_ARE_VALUES)
def test_lineage_masks_a_number_chosen_to_equal_a_personal_value(sql):
    # Class: LINEAGE / ROW CHOICE (before the fix: "no source column (literal)").
    outputs = classify_outputs(sql, "postgres", _schema(), n_columns=1)
    assert all(o.pii_kind for o in outputs), outputs


def test_pg_order_by_limit_spells_the_name(pg_customer_db, django_user_model):
    # Class: LINEAGE / ROW CHOICE, outermost ORDER BY + LIMIT.
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT g FROM generate_series(1, 200000) g, customers c WHERE c.id = 1 "
        "ORDER BY abs(g - ascii(substr(c.name, {k}, 1))) LIMIT 1",
        len(NAME),
    )
    assert spelled != NAME


def test_pg_group_by_predicate_spells_the_phone(pg_customer_db, django_user_model):
    # Class: LINEAGE / ROW CHOICE, outermost GROUP BY a predicate on the phone.
    governed = governed_connection(pg_customer_db, django_user_model)
    spelled = spell(
        governed,
        "SELECT min(g) FROM generate_series(1, 200) g, customers c WHERE c.id = 1 "
        "GROUP BY g < ascii(substr(c.phone, {k}, 1)) ORDER BY 1 DESC LIMIT 1",
        len(PHONE),
    )
    assert spelled != PHONE


def test_sqlite_order_by_limit_spells_the_name(sqlite_customer_db, django_user_model):
    # Class: LINEAGE / ROW CHOICE, ORDER BY + LIMIT; SQLite.
    governed = governed_connection(sqlite_customer_db, django_user_model)
    spelled = spell(
        governed,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 60000) "
        "SELECT r.n FROM r, customers c WHERE c.id = 1 ORDER BY abs(r.n - unicode(substr(c.name, {k}, 1))) LIMIT 1",
        len(NAME),
    )
    assert spelled != NAME


def test_mysql_order_by_limit_spells_the_phone(mysql_customer_db, django_user_model):
    # Class: LINEAGE / ROW CHOICE, ORDER BY + LIMIT; MariaDB.
    governed = governed_connection(mysql_customer_db, django_user_model)
    spelled = spell(
        governed,
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 200) "
        "SELECT r.n FROM r, customers c WHERE c.id = 1 ORDER BY abs(r.n - ascii(substr(c.phone, {k}, 1))) LIMIT 1",
        len(PHONE),
    )
    assert spelled != PHONE
