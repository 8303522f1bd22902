"""Free-text taint in lineage itself (pure, every dialect): which outputs over
a FREE_TEXT column are masked whole, which are read as themselves, and which
row counts it decides (governance.pii.lineage)."""

from __future__ import annotations

import pytest

from governance.pii.free_text import holds_text, unknown_types, with_free_text
from governance.pii.lineage import FREE_TEXT, classify_outputs, rows_read_pii

SCHEMA = {
    "customers": {"id": None, "name": "name", "city": None},
    "memos": {"id": None, "memo": FREE_TEXT, "note": FREE_TEXT, "n": None},
}
DIALECTS = ("postgres", "mysql", "sqlite")
DOUBT = "name"

# (sql, masked kinds per output); None = read as itself / not personal data.
CASES = [
    ("SELECT memo FROM memos", [None]),
    ("SELECT * FROM memos", [None, None, None, None]),
    ("SELECT m.memo, m.id FROM memos m", [None, None]),
    ("SELECT t.x FROM (SELECT memo AS x FROM memos) t", [None]),
    ("WITH c AS (SELECT memo FROM memos) SELECT memo FROM c", [None]),
    ("SELECT memo FROM memos UNION ALL SELECT note FROM memos", [None]),
    ("SELECT DISTINCT memo FROM memos", [None]),
    ("SELECT memo FROM memos WHERE memo LIKE '%010%' ORDER BY memo", [None]),
    ("SELECT count(memo), count(DISTINCT memo), count(*) FROM memos", [None, None, None]),
    ("SELECT n * 2, n FROM memos", [None, None]),
    ("SELECT upper(memo) FROM memos", [DOUBT]),
    ("SELECT CAST(memo AS CHAR(200)) FROM memos", [DOUBT]),
    ("SELECT memo || '' FROM memos", [DOUBT]),
    ("SELECT substr(memo, 1, 3), substr(memo, 4, 3) FROM memos", [DOUBT, DOUBT]),
    ("SELECT max(memo), min(note) FROM memos", [DOUBT, DOUBT]),
    ("SELECT length(memo) FROM memos", [DOUBT]),
    ("SELECT CASE WHEN memo LIKE '0%' THEN 1 ELSE 0 END FROM memos", [DOUBT]),
    ("SELECT id, memo = 'x' FROM memos", [None, DOUBT]),
    ("SELECT coalesce(memo, note) FROM memos", [DOUBT]),
    ("SELECT t.x FROM (SELECT substr(memo, 2) AS x FROM memos) t", [DOUBT]),
    ("SELECT memo FROM memos UNION ALL SELECT substr(memo, 2) FROM memos", [DOUBT]),
    ("SELECT memo FROM memos UNION ALL SELECT 'x'", [DOUBT]),  # not provably the column itself: masked
    ("SELECT id FROM memos ORDER BY substr(memo, 3, 1)", [DOUBT]),
    ("SELECT id, count(*) FROM memos GROUP BY id, length(memo)", [DOUBT, DOUBT]),
    ("SELECT (SELECT max(memo) FROM memos) AS m", [DOUBT]),
    ("SELECT c.id FROM customers c WHERE EXISTS (SELECT 1 FROM memos m WHERE m.memo LIKE c.city)", [None]),
    ("SELECT name, memo FROM customers, memos", ["name", None]),
    ("SELECT concat(name, memo) FROM customers, memos", ["name"]),
    ("SELECT upper(city) FROM customers", [None]),  # unmarked text: only the detectors' and the rewrite rules
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql, kinds", CASES)
def test_free_text_outputs(dialect, sql, kinds):
    outputs = classify_outputs(sql, dialect, SCHEMA, len(kinds))
    assert [o.pii_kind for o in outputs] == kinds, [(o.pii_kind, o.reason) for o in outputs]


# Recursion peeling one character per step, pieces of one value per row.
PEELING = (
    "WITH RECURSIVE r(x, k) AS (SELECT memo, 1 FROM memos UNION ALL SELECT substr(x, 2), k + 1 FROM r WHERE k < 60) "
    "SELECT x FROM r"
)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_recursive_peeling_of_free_text_is_masked(dialect):
    assert [o.pii_kind for o in classify_outputs(PEELING, dialect, SCHEMA, 1)] == [DOUBT]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "sql, decides",
    [
        ("SELECT memo FROM memos", False),
        ("SELECT id FROM memos WHERE memo LIKE '%x%'", False),
        ("SELECT DISTINCT memo FROM memos", False),
        ("SELECT length(memo) FROM memos GROUP BY length(memo)", True),
        ("SELECT DISTINCT substr(memo, 5, 1) FROM memos", True),
        (
            "WITH RECURSIVE n(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM n WHERE g < 99) "
            "SELECT n.g FROM n, memos m WHERE n.g <= length(m.memo)",
            True,
        ),
    ],
)
def test_a_row_count_free_text_decides(dialect, sql, decides):
    assert bool(rows_read_pii(sql, dialect, SCHEMA)) is decides


@pytest.mark.parametrize(
    "data_type, text",
    [
        ("text", True),
        ("character varying", True),
        ("VARCHAR(40)", True),
        ("longtext", True),
        ("bytea", True),
        ("mediumblob", True),
        ("jsonb", True),
        ("USER-DEFINED", True),
        ("", True),
        (None, True),
        ("ARRAY", True),
        ("integer", False),
        ("numeric(10,2)", False),
        ("timestamp with time zone", False),
        ("date", False),
        ("boolean", False),
        ("enum", False),
        ("uuid", False),
    ],
)
def test_which_types_hold_text(data_type, text):
    assert holds_text(data_type) is text


def test_marking_free_text_keeps_classified_and_structured_columns():
    schema = {"t": {"id": None, "memo": None, "code": None, "phone": "phone", "raw": None}}
    types = {("t", "id"): "integer", ("t", "memo"): "text", ("t", "code"): "text", ("t", "phone"): "text"}
    marked = with_free_text(schema, types, {("t", "code")})
    assert marked == {"t": {"id": None, "memo": FREE_TEXT, "code": None, "phone": "phone", "raw": FREE_TEXT}}
    assert schema["t"]["memo"] is None  # the shared schema is not changed
    assert unknown_types(schema, types) and not unknown_types(schema, {**types, ("t", "raw"): "blob"})


# The executor may bind every function of a PostgreSQL statement to pg_catalog:
# lineage reads the catalog's own functions as the ones it knows.
CATALOG_BOUND = [
    ("SELECT pg_catalog.count(*) FROM customers", [None]),
    ("SELECT pg_catalog.count(DISTINCT name) FROM customers", [None]),
    ("SELECT pg_catalog.count(*) FILTER (WHERE pg_catalog.length(name) > 2) FROM customers", [None]),
    ("SELECT pg_catalog.count(*) OVER () FROM customers", [None]),
    ("SELECT pg_catalog.upper(memo) FROM memos", [DOUBT]),
    ("SELECT pg_catalog.lower(pg_catalog.upper(name)) FROM customers", ["name"]),
    ("SELECT pg_catalog.count(pg_catalog.ascii(name)) FROM customers", ["name"]),
    ("SELECT pg_catalog.string_agg(memo, ',') WITHIN GROUP (ORDER BY memo) FROM memos", [DOUBT]),
    ("SELECT memo OPERATOR(pg_catalog.||) 'x' FROM memos", [DOUBT]),
    ("SELECT public.count(name) FROM customers", ["name"]),  # not the catalog's count: traced
    ("SELECT myschema.count(*) FROM customers", [DOUBT]),  # an unknown function under a dot: in doubt
]


@pytest.mark.parametrize("sql, kinds", CATALOG_BOUND)
def test_catalog_bound_functions(sql, kinds):
    outputs = classify_outputs(sql, "postgres", SCHEMA, len(kinds))
    assert [o.pii_kind for o in outputs] == kinds, [(o.pii_kind, o.reason) for o in outputs]


def test_catalog_bound_literals_are_still_literals():
    outputs = classify_outputs("SELECT pg_catalog.upper('김민준'), myschema.f('x')", "postgres", SCHEMA, 2)
    assert [o.literal for o in outputs] == [True, False]
