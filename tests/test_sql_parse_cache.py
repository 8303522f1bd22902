"""The one parse per statement text (governance.sql.dialects.parsed): the
guard and lineage's read-only passes read the process's shared tree, every
other reader gets a copy. A reader that changed the shared tree would change
what the guard decides for the next call with the same text, so: the copy is
the tree, and no reader leaves the shared tree different from a fresh parse.
Pure: no database."""

from __future__ import annotations

import pytest
from sqlglot import exp

from governance.pii.lineage import classify_outputs, rows_read_pii
from governance.pii.reidentify import reidentify_sql
from governance.sql import dialects
from governance.sql.binding import bind_postgres
from governance.sql.dialects import copy_tree, parse_sql, parse_tokens, parsed, sql_dialect
from governance.sql.guard import analyse_sql
from tests.sql_cases import MUST_ALLOW, MUST_DENY
from tests.test_sql_lineage import CASES, SCHEMA

# Statements the lineage walk rewrites (qualify), with catalog-qualified
# calls (the binder's form, unqualified by lineage), comments and tokens.
EXTRA = [
    ("postgres", "SELECT pg_catalog.count(*), pg_catalog.lower(c.name) FROM customers c WHERE c.city = '서울'"),
    ("postgres", "SELECT pg_catalog.count(DISTINCT phone) FILTER (WHERE city = 'x') FROM customers"),
    ("postgres", "SELECT name /* who */, phone -- and how\nFROM customers WHERE name = '[이름-1]'"),
    ("postgres", "WITH r AS (SELECT name, phone FROM customers) SELECT upper(name), count(*) FROM r GROUP BY 1"),
    ("postgres", "SELECT j -> 'a', coalesce(j ->> 'b', '') FROM (SELECT '{}'::json AS j) s"),
    ("mysql", "SELECT CONCAT(name, phone) AS x FROM customers ORDER BY x LIMIT 3"),
    ("sqlite", "SELECT name FROM customers UNION SELECT email FROM customers"),
]
CORPUS = sorted(
    {(d, s) for d, s, _ in MUST_ALLOW}
    | {(d, s) for d, s, _ in MUST_DENY}
    | {(d, s) for d, s, _, _ in CASES}
    | set(EXTRA)
)


def _fresh(dialect: str, sql: str) -> list:
    """A parse of `sql` that shares nothing with the cache."""
    return parse_tokens(dialect, sql_dialect(dialect).tokenize(sql), sql)


def _nodes(tree: exp.Expr) -> list[tuple]:
    """Every node as (type, meta, comments), in walk order."""
    return [(type(n), n._meta or None, n.comments or None) for n in tree.walk()]


def _same(shared: tuple, fresh: list, dialect: str) -> bool:
    if len(shared) != len(fresh):
        return False
    for a, b in zip(shared, fresh, strict=True):
        if (a is None) != (b is None):
            return False
        if a is not None and (a != b or a.sql(dialect=dialect) != b.sql(dialect=dialect) or _nodes(a) != _nodes(b)):
            return False
    return True


def _readable(dialect: str, sql: str) -> bool:
    try:
        parsed(dialect, sql)
    except Exception:
        return False
    return True


READABLE = [case for case in CORPUS if _readable(*case)]


def test_the_corpus_is_large_and_varied() -> None:
    assert len(READABLE) > 300
    assert {d for d, _ in READABLE} == set(dialects.SUPPORTED_DIALECTS)


@pytest.mark.parametrize(("dialect", "sql"), READABLE)
def test_a_copy_is_the_tree_and_shares_no_node(dialect: str, sql: str) -> None:
    for statement in parsed(dialect, sql).statements:
        if statement is None:
            continue
        copy = copy_tree(statement)
        assert copy == statement and copy.sql(dialect=dialect) == statement.sql(dialect=dialect)
        assert _nodes(copy) == _nodes(statement)
        assert not {id(n) for n in copy.walk()} & {id(n) for n in statement.walk()}
        pairs = zip(copy.walk(), statement.walk(), strict=True)
        assert all(a._meta is not b._meta for a, b in pairs if a._meta is not None)
        # The parents point into the copy.
        assert all(child.parent is not None for child in copy.walk() if child is not copy)
        assert all(id(child.parent) in {id(n) for n in copy.walk()} for child in copy.walk() if child is not copy)


def test_a_changed_copy_leaves_the_shared_tree_alone() -> None:
    sql = "SELECT name, count(*) FROM customers c WHERE c.city = '서울' GROUP BY name"
    (shared,) = parsed("postgres", sql).statements
    (copy,) = parse_sql("postgres", sql)
    copy.find(exp.Literal).set("this", "부산")
    copy.find(exp.Column).meta["start"] = -1
    copy.set("where", None)
    assert _same(parsed("postgres", sql).statements, _fresh("postgres", sql), "postgres")
    assert parsed("postgres", sql).statements[0] is shared


@pytest.mark.parametrize(("dialect", "sql"), READABLE)
def test_no_reader_changes_the_shared_parse(dialect: str, sql: str) -> None:
    """The guard, lineage (outputs, literals, row count), re-identification
    and the binder, each on the same text: the shared tree stays as parsed."""
    analyse_sql(sql, dialect)
    classify_outputs(sql, dialect, SCHEMA, n_columns=3, tainted_literals={"서울": "name"})
    classify_outputs(sql, dialect, SCHEMA)
    rows_read_pii(sql, dialect, SCHEMA)
    rows_read_pii(sql, dialect, SCHEMA, tainted_literals={"서울": "name"})
    try:
        reidentify_sql(sql, dialect, lambda kind, number: "김민준")
    except Exception:
        pass  # refused; what matters is the tree
    if dialect == "postgres":
        try:
            bind_postgres(sql)
        except Exception:
            pass
    assert _same(parsed(dialect, sql).statements, _fresh(dialect, sql), dialect)
