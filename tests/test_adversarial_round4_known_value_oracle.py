"""Found by adversarial review (round 4): the vault as an ORACLE for values
the statement computed from personal data.

Class: KNOWN VALUES / TOKEN CODEBOOK. Lineage masks a computed output whole
(``ascii(substr(name, 1, 1))``, ``substr(phone, 5, 4)``) with the token of
the cell's own value, and that value then sat in the vault like an original:

* as a KNOWN VALUE it was masked wherever it appeared later, so a number
  sequence the model writes shows it: ``SELECT g::text FROM
  generate_series(44600, 44620) g`` came back with ``[이름-1]`` in place of
  44608 (= ascii('김')), ``lpad(g::text, 4, '0')`` over 1230..1240 with a
  token in place of 1234 (the phone's middle digits) - one query each;
* as a TOKEN shared by equal values it is a codebook: in
  ``ascii(substr(CASE WHEN c.id = 1 THEN c.name ELSE chr(g) END, 1, 1))``
  the row whose token equals one of the chr(g) rows' tokens says which g
  the code is.

Fix (provenance): only a schema column passed on unchanged
(``OutputColumn.unchanged``) keeps the value's token and becomes a known
value; every other masked cell gets a token of its own that no lookup finds
and the known values never search for (``DbVault.derived_tokens``), also in
a fork. Each end-to-end test failed before the fix.
"""

from __future__ import annotations

import pytest

from governance.pii.lineage import classify_outputs
from tests.support.customer_dbs import CUSTOMER_SCHEMA
from tests.support.governed import governed_connection

pytestmark = [pytest.mark.django_db, pytest.mark.services]

NAME_CODE = ord("김")  # 44608


def _schema():
    return {table: dict(columns) for table, columns in CUSTOMER_SCHEMA.items()}


def _tokens(payload) -> list:
    return [cell for row in payload["rows"] for cell in row if isinstance(cell, str) and cell.startswith("[")]


@pytest.mark.parametrize(
    ("sql", "unchanged"),
    [
        ("SELECT name, phone FROM customers", [True, True]),
        ("SELECT x FROM (SELECT name x FROM customers UNION SELECT phone FROM customers) s", [True]),
        ("SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id ORDER BY c.name", [True]),
        ("SELECT ascii(substr(name, 1, 1)) FROM customers", [False]),
        ("SELECT max(name), lower(email) FROM customers", [False, False]),
        ("SELECT CASE WHEN length(c.name) > 0 THEN g END FROM customers c, generate_series(1, 9) g", [False]),
        ("SELECT '[이름-1]'", [False]),
        ("SELECT x FROM (SELECT name x FROM customers UNION SELECT chr(44608)) s", [False]),
    ],
)
def test_lineage_says_which_masked_outputs_are_columns_passed_on_unchanged(sql, unchanged):
    outputs = classify_outputs(sql, "postgres", _schema(), None, tainted_literals={"김민준": "name"})
    assert [o.unchanged for o in outputs] == unchanged, outputs


def test_pg_a_masked_character_code_is_not_found_again_in_a_number_sequence(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, outcome = governed.run("SELECT ascii(substr(name, 1, 1)) FROM customers WHERE id = 1")
    assert outcome == "success" and _tokens(payload), payload
    payload, outcome = governed.run(f"SELECT g::text, g FROM generate_series({NAME_CODE - 10}, {NAME_CODE + 10}) g")
    assert outcome == "success", payload
    assert not _tokens(payload), f"the code of the name's first character was marked by a token: {payload}"
    payload, _ = governed.run(
        f"SELECT string_agg(g::text, ',') FROM generate_series({NAME_CODE - 10}, {NAME_CODE + 10}) g"
    )
    assert "[" not in payload["rows"][0][0], payload


def test_pg_masked_phone_digits_are_not_found_again_in_padded_numbers(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, outcome = governed.run("SELECT substr(phone, 5, 4), substr(phone, 10, 4) FROM customers WHERE id = 1")
    assert outcome == "success" and len(_tokens(payload)) == 2, payload
    payload, outcome = governed.run("SELECT lpad(g::text, 4, '0') FROM generate_series(1200, 1300) g")
    assert outcome == "success", payload
    assert not _tokens(payload), f"the phone's middle digits were marked by a token: {payload}"
    payload, _ = governed.run("SELECT lpad(g::text, 4, '0') FROM generate_series(5600, 5700) g")
    assert not _tokens(payload), payload


def test_pg_equal_computed_values_do_not_share_a_token(pg_customer_db, django_user_model):
    # One query: the chr(g) rows are a codebook for the name row's code.
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, outcome = governed.run(
        "SELECT c.id, g, ascii(substr(CASE WHEN c.id = 1 THEN c.name ELSE chr(g) END, 1, 1)) "
        f"FROM customers c, generate_series({NAME_CODE - 3}, {NAME_CODE + 3}) g WHERE c.id IN (1, 2) ORDER BY 1, 2"
    )
    assert outcome == "success", payload
    codebook = {row[2]: row[1] for row in payload["rows"] if row[0] == 2}
    looked_up = {codebook.get(row[2]) for row in payload["rows"] if row[0] == 1}
    assert looked_up == {None}, f"the name's code read from the codebook: {looked_up}"


def test_pg_a_codebook_written_by_the_detectors_does_not_read_computed_digits(pg_customer_db, django_user_model):
    # The detectors give model-written phones their tokens; a computed cell must not reuse them.
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, outcome = governed.run(
        "SELECT g, '010-' || lpad(g::text, 4, '0') || '-0000' FROM generate_series(1230, 1240) g"
    )
    assert outcome == "success", payload
    codebook = {row[1]: row[0] for row in payload["rows"]}
    payload, outcome = governed.run("SELECT substr(phone, 1, 9) || '-0000' FROM customers WHERE id = 1")
    assert outcome == "success", payload
    assert codebook.get(payload["rows"][0][0]) is None, "the phone's middle digits read from the codebook"


def test_pg_a_column_read_as_itself_is_still_a_known_value(pg_customer_db, django_user_model):
    # What the provenance keeps: a name read as itself masks it in free text later.
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, _ = governed.run("SELECT name FROM customers WHERE id = 1")
    (token,) = _tokens(payload)
    payload, _ = governed.run("SELECT memo FROM notes WHERE id = 1")
    assert token in payload["rows"][0][0] and "김민준" not in payload["rows"][0][0], payload


def test_mysql_a_masked_character_code_is_not_found_again(mysql_customer_db, django_user_model):
    governed = governed_connection(mysql_customer_db, django_user_model)
    payload, outcome = governed.run("SELECT substr(phone, 5, 4) FROM customers WHERE id = 1")
    assert outcome == "success" and _tokens(payload), payload
    payload, outcome = governed.run(
        "WITH RECURSIVE r(n) AS (SELECT 1200 UNION ALL SELECT n + 1 FROM r WHERE n < 1300) "
        "SELECT CAST(n AS CHAR) FROM r"
    )
    assert outcome == "success", payload
    assert not _tokens(payload), payload


def test_sqlite_a_masked_character_code_is_not_found_again(sqlite_customer_db, django_user_model):
    governed = governed_connection(sqlite_customer_db, django_user_model)
    payload, outcome = governed.run("SELECT unicode(substr(name, 1, 1)) FROM customers WHERE id = 1")
    assert outcome == "success" and _tokens(payload), payload
    payload, outcome = governed.run(
        f"WITH RECURSIVE r(n) AS (SELECT {NAME_CODE - 10} UNION ALL SELECT n + 1 FROM r WHERE n < {NAME_CODE + 10}) "
        "SELECT CAST(n AS TEXT) FROM r"
    )
    assert outcome == "success", payload
    assert not _tokens(payload), payload


def test_a_computed_value_stays_unsearchable_in_the_vault(pg_customer_db, django_user_model):
    from chat.vault import DbVault

    governed = governed_connection(pg_customer_db, django_user_model)
    vault = DbVault(governed.conversation.pk)
    first, second = vault.derived_tokens([("name", "44608"), ("name", "44608")])
    assert first != second
    kind_number = [(kind, int(number)) for kind, number in [first.strip("[]").rsplit("-", 1)]]
    assert vault.is_derived("name", kind_number[0][1])
    assert vault.original_for("name", kind_number[0][1]) == "44608"
    assert not vault.known_values().replace("44608 이름").startswith("["), "a computed value became a known value"
    assert vault.token_for("name", "44608") not in (first, second)


def test_the_name_based_fallback_keeps_a_bare_column_unchanged_and_nothing_else():
    # A schema that lists only the classified columns: the walk cannot place `id`.
    schema = {"customers": {"name": "name"}}
    outputs = classify_outputs("SELECT c.name AS n, upper(name), c FROM customers c WHERE id = 1", "sqlite", schema, 3)
    assert [(o.pii_kind, o.unchanged) for o in outputs] == [("name", True), ("name", False), ("name", False)]
