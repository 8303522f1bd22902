"""Free text is taint, on real PostgreSQL, MariaDB and SQLite, through the
executor (governance.pii.lineage.FREE_TEXT, governance.pii.free_text).

`memos.memo` is a text column nobody classified; its rows hold a phone, an
account, a card, a resident registration number and an e-mail inside
prose. Read as itself it is scanned by the detectors (and stays readable
around the values); every rewrite of it - casts to binary and back, text
search types, number formatting, pieces cut out and joined in one cell, one
row or one piece per row, aggregates - must come back masked whole: each
attacked cell a token, and no output anywhere holding a memo's value by its
digits or its folded letters."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from governance.pii.masking import TOKEN_PATTERN
from tests.support.governed import governed_connection
from tests.support.taint_dbs import MEMO_VALUES, SCHEMA, mysql_taint_db, pg_taint_db, sqlite_taint_db  # noqa: F401

pytestmark = [pytest.mark.django_db, pytest.mark.services]

PG, MY, LITE = "postgresql", "mysql", "sqlite"
FIXTURE = {PG: "pg_taint_db", MY: "mysql_taint_db", LITE: "sqlite_taint_db"}
# g = 1..60 in every dialect: one piece per row.
N60 = "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 60) "


@dataclass(frozen=True)
class Attack:
    engine: str
    sql: str
    masked: tuple[int, ...] = (0,)  # output columns that must be tokens in every row

    @property
    def id(self) -> str:
        return f"{self.engine}:{self.sql[:70]}"


def _attacks() -> list[Attack]:
    pg = [
        "SELECT convert_from(memo::bytea, 'UTF8') FROM memos",
        "SELECT convert_from(convert_to(memo, 'UTF8'), 'UTF8') FROM memos",
        "SELECT memo::bytea FROM memos",
        "SELECT encode(memo::bytea, 'escape') FROM memos",
        "SELECT memo::tsvector FROM memos",
        "SELECT memo::tsvector::text FROM memos",
        "SELECT to_tsvector('simple', memo) FROM memos",
        "SELECT to_tsvector('simple', memo)::text FROM memos",
        "SELECT to_tsvector('simple', memo)::text || '' FROM memos",
        "SELECT plainto_tsquery('simple', memo)::text FROM memos",
        "SELECT to_char(regexp_replace(memo, '[^0-9]', '', 'g')::numeric, 'FM9999999999999999') FROM memos"
        " WHERE id < 5",
        "SELECT to_char(substr(regexp_replace(memo, '[^0-9]', '', 'g'), 1, 9)::int, '999,999,999') FROM memos"
        " WHERE id < 5",
        "SELECT format('%s', memo) FROM memos",
        "SELECT substr(memo, 1, 12) || substr(memo, 13) FROM memos",
        "SELECT left(memo, 12) || right(memo, -12) FROM memos",
        "SELECT overlay(memo placing '' from 1 for 0) FROM memos",
        "SELECT concat_ws('', substring(memo from 1 for 10), substring(memo from 11)) FROM memos",
        "SELECT memo::varchar(200) FROM memos",
        "SELECT lower(memo) FROM memos",
        "SELECT coalesce(memo, '') FROM memos",
        "SELECT CASE WHEN id > 0 THEN memo END FROM memos",
        "SELECT array_agg(memo)::text FROM memos",
        "SELECT json_agg(memo)::text FROM memos",
        "SELECT jsonb_build_object('m', memo)::text FROM memos",
        "SELECT string_agg(memo, ' | ') FROM memos",
        "SELECT m FROM memos m",
        "SELECT t.x FROM (SELECT substr(memo, 3) AS x FROM memos) t",
        "WITH c AS (SELECT substr(memo, 1, 40) AS x FROM memos) SELECT x FROM c",
        "SELECT id, g, substr(memo, g, 1) FROM memos, generate_series(1, 60) g",
        "SELECT string_agg(substr(memo, g, 1), '' ORDER BY g) FROM memos, generate_series(1, 60) g GROUP BY id",
        "SELECT (regexp_match(memo, '[0-9-]{10,}'))[1] FROM memos",
        "SELECT array_to_string(string_to_array(memo, ' '), '') FROM memos",
    ]
    my = [
        "SELECT CAST(CAST(memo AS BINARY) AS CHAR) FROM memos",
        "SELECT CONVERT(CAST(memo AS BINARY) USING utf8mb4) FROM memos",
        "SELECT CONVERT(memo USING utf8mb4) FROM memos",
        "SELECT concat(substr(memo, 1, 12), substr(memo, 13)) FROM memos",
        "SELECT concat(left(memo, 12), mid(memo, 13, 200)) FROM memos",
        "SELECT substring_index(memo, ' ', 3) FROM memos",
        "SELECT lpad(memo, 80, ' ') FROM memos",
        "SELECT format(substr(memo, 7, 3), 0) FROM memos",
        "SELECT json_object('m', memo) FROM memos",
        "SELECT json_arrayagg(memo) FROM memos",
        "SELECT group_concat(memo SEPARATOR ' | ') FROM memos",
        "SELECT lower(memo) FROM memos",
        "SELECT t.x FROM (SELECT substr(memo, 3) AS x FROM memos) t",
        N60 + "SELECT m.id, n.g, substr(m.memo, n.g, 1) FROM memos m, n",
        N60 + "SELECT group_concat(substr(m.memo, n.g, 1) ORDER BY n.g SEPARATOR '') FROM memos m, n GROUP BY m.id",
        "SELECT regexp_replace(memo, '[^0-9]', '') FROM memos",
        "SELECT CASE WHEN id > 0 THEN memo END FROM memos",
        "SELECT ifnull(memo, '') FROM memos",
    ]
    lite = [
        "SELECT CAST(CAST(memo AS BLOB) AS TEXT) FROM memos",
        "SELECT CAST(memo AS BLOB) FROM memos",
        "SELECT substr(memo, 1, 12) || substr(memo, 13) FROM memos",
        "SELECT printf('%s', memo) FROM memos",
        "SELECT printf('%d', replace(replace(memo, '-', ''), ' ', '')) FROM memos",
        "SELECT replace(memo, '-', '') FROM memos",
        "SELECT trim(memo) FROM memos",
        "SELECT lower(memo) FROM memos",
        "SELECT memo || '' FROM memos",
        "SELECT json_object('m', memo) FROM memos",
        "SELECT json_group_array(memo) FROM memos",
        "SELECT group_concat(memo, ' | ') FROM memos",
        "SELECT coalesce(memo, '') FROM memos",
        "SELECT t.x FROM (SELECT substr(memo, 3) AS x FROM memos) t",
        N60 + "SELECT m.id, n.g, substr(m.memo, n.g, 1) FROM memos m, n",
        N60 + "SELECT group_concat(p, '') FROM"
        " (SELECT m.id AS i, substr(m.memo, n.g, 1) AS p FROM memos m, n ORDER BY n.g) GROUP BY i",
        "SELECT quote(memo) FROM memos",
    ]
    # One piece per column of one row: every column a piece, every one masked.
    pieces = "SELECT substr(memo, 1, 10), substr(memo, 11, 10), substr(memo, 21, 10), substr(memo, 31) FROM memos"
    cases = [Attack(PG, sql) for sql in pg] + [Attack(MY, sql) for sql in my] + [Attack(LITE, sql) for sql in lite]
    cases += [Attack(engine, pieces, (0, 1, 2, 3)) for engine in (PG, MY, LITE)]
    for case in list(cases):
        if " g, substr(" in case.sql or "n.g, substr(" in case.sql:
            cases[cases.index(case)] = Attack(case.engine, case.sql, (2,))
    return cases


ATTACKS = _attacks()


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _folded(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def assert_no_memo_value(payload: dict) -> None:
    """No cell, row or column of the result holds a memo's value, by its
    digits or its folded letters (pieces put back together included)."""
    rows = payload.get("rows") or []
    cells = [
        json.dumps(cell, ensure_ascii=False) if not isinstance(cell, str) else cell for row in rows for cell in row
    ]
    by_row = ["".join(map(str, row)) for row in rows]
    by_column = ["".join(str(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows), default=0))]
    for text in [*cells, *by_row, *by_column, json.dumps(payload, ensure_ascii=False)]:
        for value in MEMO_VALUES:
            assert value not in _digits(text) and value not in _folded(text), (value, text[:200])


def _governed(request, engine: str, django_user_model):
    return governed_connection(request.getfixturevalue(FIXTURE[engine]), django_user_model, schema=SCHEMA)


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.id for a in ATTACKS])
def test_a_rewrite_of_free_text_is_masked_whole(attack, request, django_user_model):
    governed = _governed(request, attack.engine, django_user_model)
    payload, outcome = governed.run(attack.sql)
    assert outcome == "success", payload
    assert payload["rows"], payload
    for row in payload["rows"]:
        for index in attack.masked:
            cell = row[index]
            assert cell is None or cell == "" or TOKEN_PATTERN.fullmatch(str(cell)), (index, row)
    assert_no_memo_value(payload)


@pytest.mark.parametrize("engine", [PG, MY, LITE])
def test_free_text_read_as_itself_is_scanned_not_masked_whole(engine, request, django_user_model):
    governed = _governed(request, engine, django_user_model)
    payload, outcome = governed.run("SELECT id, memo FROM memos ORDER BY id")
    assert outcome == "success", payload
    memos = [row[1] for row in payload["rows"]]
    # The prose around the values is kept; the values are the detectors' tokens.
    assert memos[0].startswith("고객 연락처 [") and memos[0].endswith(" 로 회신"), memos
    assert all(TOKEN_PATTERN.search(memo) for memo in memos), memos
    assert_no_memo_value(payload)
    # Through a derived table, a CTE and a UNION it is still itself.
    for sql in (
        "SELECT t.m FROM (SELECT memo AS m FROM memos) t ORDER BY 1",
        "WITH c AS (SELECT id, memo FROM memos) SELECT memo FROM c ORDER BY id",
        "SELECT memo FROM memos WHERE id < 3 UNION ALL SELECT memo FROM memos WHERE id >= 3",
    ):
        payload, outcome = governed.run(sql)
        assert outcome == "success", payload
        assert all(not TOKEN_PATTERN.fullmatch(row[0]) for row in payload["rows"]), (sql, payload)
        assert_no_memo_value(payload)


@pytest.mark.parametrize("engine", [PG, MY, LITE])
def test_counting_and_grouping_by_free_text_stay_readable(engine, request, django_user_model):
    governed = _governed(request, engine, django_user_model)
    payload, outcome = governed.run("SELECT count(memo), count(DISTINCT memo), count(*) FROM memos")
    assert outcome == "success", payload
    assert payload["rows"] == [[5, 5, 5]]
    payload, outcome = governed.run("SELECT count(*) FROM memos GROUP BY memo ORDER BY 1")
    assert payload["rows"] == [[1]] * 5, payload


@pytest.mark.parametrize("engine", [PG, MY, LITE])
def test_a_row_count_set_by_free_text_is_refused(engine, request, django_user_model):
    governed = _governed(request, engine, django_user_model)
    sql = {
        PG: "SELECT 1 FROM memos, generate_series(1, ascii(substr(memo, 7, 1))) g WHERE id = 1",
        MY: N60 + "SELECT n.g FROM memos m, n WHERE m.id = 1 AND n.g <= ascii(substr(m.memo, 7, 1)) - 40",
        LITE: N60 + "SELECT n.g FROM memos m, n WHERE m.id = 1 AND n.g <= unicode(substr(m.memo, 7, 1)) - 40",
    }[engine]
    payload, outcome = governed.run(sql)
    if outcome == "success":
        # The comparison carries the memo's character into g: masked.
        assert all(TOKEN_PATTERN.fullmatch(str(row[0])) for row in payload["rows"]), payload
    else:
        assert outcome == "denied", payload


@pytest.mark.parametrize("engine", [PG, MY, LITE])
def test_numbers_and_unclassified_non_text_columns_stay_readable(engine, request, django_user_model):
    # The taint is for text: ids are numbers, and sums of them stay readable.
    governed = _governed(request, engine, django_user_model)
    payload, outcome = governed.run("SELECT sum(id), max(id) * 2, avg(id) FROM memos")
    assert outcome == "success", payload
    total, doubled, average = payload["rows"][0]
    assert (int(total), int(doubled), float(average)) == (15, 10, 3.0)


# --- free text as the schema analysis marks it ------------------------------------------

MONTHLY = {
    PG: "SELECT substr(ordered_on, 1, 7) AS month, sum(amount) FROM sales GROUP BY 1 ORDER BY 1",
    MY: "SELECT substr(ordered_on, 1, 7) AS month, sum(amount) FROM sales GROUP BY 1 ORDER BY 1",
    LITE: "SELECT strftime('%Y-%m', ordered_on) AS month, sum(amount) FROM sales GROUP BY 1 ORDER BY 1",
}


def _analysed(request, engine: str, django_user_model):
    from governance.schema_analysis import schema_analysis_run

    governed = governed_connection(request.getfixturevalue(FIXTURE[engine]), django_user_model, schema={"x": {}})
    assert schema_analysis_run(connection_id=governed.connection.pk) > 0
    return governed


@pytest.mark.parametrize("engine", [PG, MY, LITE])
def test_analysed_codes_and_dates_stay_readable_through_functions(engine, request, django_user_model):
    governed = _analysed(request, engine, django_user_model)
    payload, outcome = governed.run(MONTHLY[engine])
    assert outcome == "success", payload
    assert [[month, int(total)] for month, total in payload["rows"]] == [["2025-10", 350], ["2025-11", 40]]
    payload, outcome = governed.run("SELECT upper(status), count(*) FROM sales GROUP BY upper(status) ORDER BY 1")
    assert payload["rows"] == [["PAID", 2], ["REFUNDED", 1]], payload


@pytest.mark.parametrize("engine", [PG, MY, LITE])
def test_analysed_free_text_is_still_taint(engine, request, django_user_model):
    governed = _analysed(request, engine, django_user_model)
    for sql in ("SELECT lower(memo) FROM memos", "SELECT substr(memo, 1, 12) || substr(memo, 13) FROM memos"):
        sql = (
            sql.replace("substr(memo, 1, 12) || substr(memo, 13)", "concat(substr(memo, 1, 12), substr(memo, 13))")
            if engine == MY
            else sql
        )
        payload, outcome = governed.run(sql)
        assert outcome == "success", payload
        assert all(TOKEN_PATTERN.fullmatch(row[0]) for row in payload["rows"]), payload
        assert_no_memo_value(payload)


@pytest.mark.parametrize("engine", [PG, MY, LITE])
def test_unanalysed_text_dates_are_free_text(engine, request, django_user_model):
    # Classified by hand, never analysed: no one has seen the values, so a
    # text column is free text (when in doubt, taint); the number is not.
    governed = _governed(request, engine, django_user_model)
    payload, outcome = governed.run(MONTHLY[engine])
    # Grouping by a function of free text sets how many rows come back: refused.
    assert outcome == "denied", payload
    payload, outcome = governed.run(MONTHLY[engine].replace(" GROUP BY 1 ORDER BY 1", " GROUP BY id"))
    assert outcome == "success", payload
    assert all(TOKEN_PATTERN.fullmatch(row[0]) for row in payload["rows"]), payload
    assert sorted(int(row[1]) for row in payload["rows"]) == [40, 100, 250]
    payload, outcome = governed.run("SELECT sum(amount) FROM sales")
    assert int(payload["rows"][0][0]) == 390, payload
