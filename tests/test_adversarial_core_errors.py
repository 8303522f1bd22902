"""Adversarial review of the error channel (governance/sql/execute.py
scrub_error_message, chat/executor/tools/sql.py).

Break: an error may quote back "the schema's own names", and that schema was
the whole connection's. A person granted only `orders` asks for
`SELECT memo FROM orders`: the error says `column "memo" does not exist`
while a made-up name comes back as `column "…" does not exist` - an oracle
on the names of tables and columns they may not read (here `notes.memo`,
`customers.email`). Fix: the words an error may quote are the granted
tables' names only. Each case failed before the fix (PostgreSQL, MariaDB,
SQLite).
"""

from __future__ import annotations

import json

import pytest

from tests.support.governed import governed_connection

pytestmark = [pytest.mark.django_db, pytest.mark.services]


@pytest.fixture(params=["pg_customer_db", "mysql_customer_db", "sqlite_customer_db"])
def orders_only(request, django_user_model):
    from governance.models import DbGrant

    governed = governed_connection(request.getfixturevalue(request.param), django_user_model)
    DbGrant.objects.filter(connection=governed.connection).update(whole_database=False, tables=["orders"])
    return governed


@pytest.mark.parametrize("hidden", ["memo", "email", "notes", "customers"])
def test_error_does_not_confirm_a_name_of_an_ungranted_table(orders_only, hidden):
    made_up, made_up_outcome = orders_only.run("SELECT zzqq FROM orders")
    payload, outcome = orders_only.run(f"SELECT {hidden} FROM orders")
    assert outcome == made_up_outcome == "failed", payload
    assert hidden not in json.dumps(payload), payload
    assert payload["error"] == made_up["error"], (payload, made_up)
    assert hidden not in json.dumps([row.reason for row in orders_only.audit_rows()])


def test_error_still_quotes_a_granted_column(orders_only):
    # The granted table's own names stay readable: errors remain useful.
    payload, outcome = orders_only.run("SELECT amount FROM orders o, orders p")  # ambiguous column
    assert outcome == "failed", payload
    assert "amount" in payload["error"], payload
