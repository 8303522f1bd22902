"""Masking knows where a value came from, on real PostgreSQL, MariaDB and
SQLite, through the executor.

- Outputs made only of the model's own literals come back exactly as
  written, whether or not the vault holds the value: matching them against
  the vault would tell the model which of its guesses are real (a list of
  thousands of guesses per query).
- A token the model writes is re-identified for the database, and whatever
  the original becomes in the output stays masked.
- Known values match on a normalised form (spaces, invisible characters,
  decomposed Hangul) and across the cells of one row.
- An error quoting a cell value keeps nothing of it, even when the value is
  one of the statement's own aliases."""

from __future__ import annotations

import json
import unicodedata

import pytest

from governance.pii.masking import TOKEN_PATTERN
from tests.support.governed import governed_connection
from tests.support.taint_dbs import SCHEMA, mysql_taint_db, pg_taint_db, sqlite_taint_db  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.services]

PG, MY, LITE = "postgresql", "mysql", "sqlite"
ENGINES = (PG, MY, LITE)
FIXTURE = {PG: "pg_taint_db", MY: "mysql_taint_db", LITE: "sqlite_taint_db"}
NAME, OTHER_NAME, PHONE = "김민준", "이서연", "010-2718-2818"


@pytest.fixture(params=ENGINES)
def governed(request, django_user_model):
    governed = governed_connection(request.getfixturevalue(FIXTURE[request.param]), django_user_model, schema=SCHEMA)
    # The vault now holds both names and both phones.
    payload, outcome = governed.run("SELECT name, phone FROM people ORDER BY id")
    assert outcome == "success" and all(TOKEN_PATTERN.fullmatch(c) for row in payload["rows"] for c in row), payload
    governed.engine = request.param
    return governed


def _text(payload) -> str:
    return json.dumps(payload, ensure_ascii=False)


# --- the model's own literals: no membership oracle ---------------------------------

GUESSES = [NAME, "홍길동", OTHER_NAME, "박지후", "김민주"]


def test_a_list_of_guessed_names_comes_back_as_written(governed):
    sql = " UNION ALL ".join(f"SELECT '{guess}' AS guess" for guess in GUESSES)
    payload, outcome = governed.run(sql)
    assert outcome == "success", payload
    assert [row[0] for row in payload["rows"]] == GUESSES


def test_guesses_side_by_side_come_back_as_written(governed):
    payload, outcome = governed.run("SELECT " + ", ".join(f"'{g}' AS g{i}" for i, g in enumerate(GUESSES)))
    assert outcome == "success", payload
    assert payload["rows"] == [GUESSES]


def test_a_values_list_of_guesses_comes_back_as_written(governed):
    if governed.engine == MY:
        sql = "SELECT '김민준' AS g UNION SELECT '홍길동' UNION SELECT '이서연'"
    else:
        sql = "VALUES ('김민준'), ('홍길동'), ('이서연')"
    payload, outcome = governed.run(sql)
    assert outcome == "success", payload
    assert sorted(row[0] for row in payload["rows"]) == sorted([NAME, "홍길동", OTHER_NAME])


def test_guessed_names_built_by_known_functions_come_back_as_written(governed):
    joined = "concat('김', '민준')" if governed.engine == MY else "'김' || '민준'"
    payload, outcome = governed.run(f"SELECT upper('x') AS u, {joined} AS n, replace('김_민준', '_', '') AS m")
    assert outcome == "success", payload
    assert payload["rows"] == [["X", NAME, NAME]], payload


def test_guessed_values_split_over_literal_columns_are_not_joined(governed):
    payload, outcome = governed.run("SELECT '010-2718' AS a, '-2818' AS b, '김' AS c, '민준' AS d")
    assert outcome == "success", payload
    assert payload["rows"] == [["010-2718", "-2818", "김", "민준"]]


def test_a_guess_filtered_by_the_data_is_still_only_the_guess(governed):
    # The filter is the accepted yes/no (like a count); the output is the model's literal.
    payload, outcome = governed.run("SELECT '김민준' AS g FROM people WHERE id = 1")
    assert outcome == "success", payload
    assert payload["rows"] == [[NAME]]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT CASE WHEN id = 1 THEN '김민준' ELSE '홍길동' END AS g FROM people ORDER BY id",
        "SELECT CASE WHEN id > 0 THEN '010-2718-2818' END AS g FROM people ORDER BY id",
        "SELECT coalesce(NULL, '김민준') AS g, id FROM people ORDER BY id",
    ],
)
def test_guesses_next_to_non_personal_data_come_back_as_written(governed, sql):
    payload, outcome = governed.run(sql)
    assert outcome == "success", payload
    written = {"김민준", "홍길동", PHONE}
    assert {row[0] for row in payload["rows"]} <= written and not TOKEN_PATTERN.search(_text(payload)), payload


def test_a_guess_next_to_personal_data_is_masked_with_it(governed):
    payload, outcome = governed.run("SELECT CASE WHEN name = '김민준' THEN '김민준' END AS g FROM people WHERE id = 1")
    assert outcome == "success", payload
    assert TOKEN_PATTERN.fullmatch(payload["rows"][0][0]), payload  # it reads the name: masked whole


# --- re-identified literals are always masked ------------------------------------------


@pytest.mark.parametrize(
    "template",
    [
        "SELECT '{t}' AS v",
        "SELECT '{t}' AS v UNION ALL SELECT 'x'",
        "SELECT lower('{t}') AS v",
        "SELECT replace('{t}', 'x', 'y') AS v",
        "SELECT id FROM people WHERE name = '{t}'",
    ],
)
def test_a_re_identified_token_never_comes_back_as_its_original(governed, template):
    token = governed.tokenise("name", NAME)
    payload, outcome = governed.run(template.format(t=token))
    assert outcome == "success", payload
    assert NAME not in _text(payload), payload
    if "WHERE" in template:
        assert payload["rows"] == [[1]]  # the original ran: the row was found
    else:
        assert TOKEN_PATTERN.fullmatch(payload["rows"][0][0]), payload


# --- normalised known values, and values split across cells -----------------------------


@pytest.mark.parametrize(
    "row_id, spelled", [(3, "김 민준"), (4, "김\u200b민준"), (5, unicodedata.normalize("NFD", NAME))]
)
def test_a_known_value_respelled_in_free_text_is_masked(governed, row_id, spelled):
    payload, outcome = governed.run(f"SELECT a FROM parts WHERE id = {row_id}")
    assert outcome == "success", payload
    cell = payload["rows"][0][0]
    assert cell.startswith("담당 ") and TOKEN_PATTERN.search(cell), cell
    assert spelled not in cell and unicodedata.normalize("NFC", cell).find(NAME) < 0, cell


@pytest.mark.parametrize("row_id, value", [(1, PHONE), (2, NAME)])
def test_a_known_value_split_over_two_columns_masks_both(governed, row_id, value):
    payload, outcome = governed.run(f"SELECT a, b FROM parts WHERE id = {row_id}")
    assert outcome == "success", payload
    a, b = payload["rows"][0]
    assert TOKEN_PATTERN.fullmatch(a) and TOKEN_PATTERN.fullmatch(b), payload
    assert a == b  # the one value's token


def test_cells_that_only_look_alike_next_to_each_other_stay(governed):
    payload, outcome = governed.run("SELECT b, id FROM parts WHERE id = 3")
    assert payload["rows"] == [["x", 3]], payload


# --- error text keeps no quoted cell value ------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT CAST(name AS integer) AS 김민준 FROM people WHERE id = 1",
        'SELECT CAST(name AS integer) AS "김민준" FROM people WHERE id = 1',
        "SELECT name::integer AS 김민준, name AS 이서연 FROM people",
        "SELECT to_date(name, 'YYYY') AS 김민준 FROM people WHERE id = 1",
        "SELECT CAST(name AS integer) FROM people p(김민준) WHERE id = 1",
    ],
)
def test_an_error_quoting_a_cell_equal_to_an_alias_keeps_nothing_of_it(request, django_user_model, sql):
    governed = governed_connection(request.getfixturevalue("pg_taint_db"), django_user_model, schema=SCHEMA)
    payload, outcome = governed.run(sql)
    assert outcome in ("failed", "denied"), payload
    assert NAME not in _text(payload) and OTHER_NAME not in _text(payload), payload
    assert NAME not in "".join(row.reason for row in governed.audit_rows())


def test_an_error_keeps_the_schema_names_it_quotes(request, django_user_model):
    governed = governed_connection(request.getfixturevalue("pg_taint_db"), django_user_model, schema=SCHEMA)
    payload, outcome = governed.run("SELECT phone FROM people WHERE memo = 1")
    assert outcome == "failed", payload
    assert '"memo"' in payload["error"], payload  # a column of the schema (another table's): kept
