"""Tests for the parser layer of the read-only SQL guard."""

from __future__ import annotations

import inspect
import re

import pytest
import sqlglot.parser
from sqlglot import exp

from governance.sql import guard as sql_guard
from governance.sql.guard import SUPPORTED_DIALECTS, SqlVerdict, analyse_sql
from tests.sql_cases import MUST_ALLOW, MUST_DENY


def _case_id(index: int, dialect: str, sql: str) -> str:
    text = re.sub(r"\s+", " ", sql).strip() or "<empty>"
    return f"{index:03d}-{dialect}-{text[:60]}"


def test_case_tables_are_big_enough_and_cover_all_dialects() -> None:
    assert len(MUST_DENY) >= 45
    assert len(MUST_ALLOW) >= 45
    assert {dialect for dialect, _, _ in MUST_DENY} == set(SUPPORTED_DIALECTS)
    assert {dialect for dialect, _, _ in MUST_ALLOW} == set(SUPPORTED_DIALECTS)


@pytest.mark.parametrize(
    ("dialect", "sql", "reason"),
    MUST_DENY,
    ids=[_case_id(i, d, s) for i, (d, s, _) in enumerate(MUST_DENY)],
)
def test_must_deny(dialect: str, sql: str, reason: str | None) -> None:
    verdict = analyse_sql(sql, dialect)
    assert verdict.allowed is False, verdict
    assert verdict.reason, "a denial must say why"
    if reason is not None:
        assert reason in verdict.reason, verdict


@pytest.mark.parametrize(
    ("dialect", "sql", "tables"),
    MUST_ALLOW,
    ids=[_case_id(i, d, s) for i, (d, s, _) in enumerate(MUST_ALLOW)],
)
def test_must_allow(dialect: str, sql: str, tables: tuple[str, ...]) -> None:
    verdict = analyse_sql(sql, dialect)
    assert verdict == SqlVerdict(allowed=True, reason="", tables=tables)


# Every exact denylisted name, in every dialect, plain / qualified / quoted.
_DENIED_CALLS = [
    (dialect, template.format(name=name), name)
    for name in sorted(sql_guard._DENIED_FUNCTIONS)
    for dialect in SUPPORTED_DIALECTS
    for template in ("SELECT {name}('x')", "SELECT s.{name}('x')", "SELECT 1 WHERE {name}('x') IS NULL")
]


@pytest.mark.parametrize(("dialect", "sql", "name"), _DENIED_CALLS, ids=[f"{d}-{s}" for d, s, _ in _DENIED_CALLS])
def test_every_denied_function_name_is_caught(dialect: str, sql: str, name: str) -> None:
    verdict = analyse_sql(sql, dialect)
    assert verdict.allowed is False
    assert verdict.reason == f"function not allowed: {name}"


@pytest.mark.parametrize("dialect", SUPPORTED_DIALECTS)
@pytest.mark.parametrize(
    "name",
    [
        "lo_unlink",
        "dblink_send_query",
        "pg_ls_waldir",
        "pg_file_write",
        "pg_sleep_until",
        "pg_advisory_unlock_all",
        "pg_replication_origin_create",
        "pg_drop_replication_slot",
        "pg_logical_slot_get_changes",
        "http_post",
    ],
)
def test_denied_function_families(dialect: str, name: str) -> None:
    verdict = analyse_sql(f"SELECT {name}(1)", dialect)
    assert (verdict.allowed, verdict.reason) == (False, f"function not allowed: {name}")


def test_quoted_function_name_in_each_dialect() -> None:
    assert not analyse_sql("SELECT \"pg_read_file\"('x')", "postgres").allowed
    assert not analyse_sql("SELECT `load_file`('x')", "mysql").allowed
    assert not analyse_sql("SELECT \"load_extension\"('x')", "sqlite").allowed
    assert not analyse_sql("SELECT [readfile]('x')", "sqlite").allowed


def test_unknown_dialect_raises() -> None:
    with pytest.raises(ValueError, match="unsupported SQL dialect"):
        analyse_sql("SELECT 1", "oracle")


def test_internal_parser_exception_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(sqlglot.parser.Parser, "parse", boom)
    verdict = analyse_sql("SELECT 1", "postgres")
    assert verdict == SqlVerdict(allowed=False, reason="internal error: RuntimeError", tables=())


def test_internal_walk_exception_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: object, root: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(sql_guard._Walk, "run", boom)
    verdict = analyse_sql("SELECT * FROM customers", "postgres")
    assert verdict.allowed is False
    assert verdict.reason == "internal error: KeyError"


def test_non_string_sql_is_denied() -> None:
    verdict = analyse_sql(None, "postgres")  # type: ignore[arg-type]
    assert verdict.allowed is False


def test_as_dict_shape() -> None:
    allowed = analyse_sql("SELECT * FROM b JOIN a ON true", "postgres").as_dict()
    assert allowed == {"allowed": True, "reason": "", "tables": ["a", "b"]}
    denied = analyse_sql("DELETE FROM orders", "postgres").as_dict()
    assert denied == {"allowed": False, "reason": "write statement: DELETE", "tables": ["orders"]}


def test_tables_are_reported_even_when_denied() -> None:
    verdict = analyse_sql("SELECT * FROM public.customers c JOIN orders o ON true FOR UPDATE", "postgres")
    assert verdict.allowed is False
    assert verdict.tables == ("orders", "public.customers")


def test_parse_failure_reports_no_tables() -> None:
    verdict = analyse_sql("SELECT * FROM customers WHERE", "postgres")
    assert verdict.allowed is False
    assert verdict.reason.startswith("parse error: ")
    assert verdict.tables == ()


def test_multi_statement_reason_counts_statements() -> None:
    assert analyse_sql("SELECT 1; SELECT 2;", "sqlite").reason == "expected exactly one statement, got 2"


def test_deeply_nested_boolean_chain_is_walked_without_recursion_error() -> None:
    sql = "SELECT * FROM orders WHERE " + " OR ".join(f"id = {i}" for i in range(2000))
    assert analyse_sql(sql, "postgres") == SqlVerdict(True, "", ("orders",))
    assert analyse_sql(sql + " OR pg_sleep(1) IS NULL", "postgres").allowed is False


def test_verdict_is_frozen() -> None:
    verdict = analyse_sql("SELECT 1", "postgres")
    with pytest.raises(AttributeError):
        verdict.allowed = False  # type: ignore[misc]


# --------------------------------------------------------------------------
# Tripwires for sqlglot upgrades: they fail when sqlglot renames or adds
# something the guard relies on, instead of the guard silently going wrong.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("query_type", [exp.Select, exp.Union, exp.Subquery, exp.Insert, exp.Delete])
def test_with_clause_arg_name_matches_installed_sqlglot(query_type: type[exp.Expr]) -> None:
    # sqlglot 30 renamed "with" to "with_"; with a stale name every CTE
    # reference would be reported as a table.
    assert sql_guard._WITH_ARG in query_type.arg_types


# Node class names that suggest a statement, write, lock or session change.
_STATEMENT_LIKE_NAME = re.compile(
    r"Lock|Into|Command|Copy|Set|Transaction|Merge|Insert|Update|Delete|Execute|Procedure|Block|Statement"
)

# Reviewed matches the walk does not deny by type: clauses that only occur
# inside a statement that is itself denied, or plain query/expression parts.
_REVIEWED_HARMLESS = {
    "AlterSet",  # ALTER ... SET (Alter is denied)
    "AnalyzeDelete",  # ANALYZE ... DELETE STATISTICS (Analyze is denied)
    "CharacterSet",  # CHARACTER SET in a type / column definition
    "CopyParameter",  # COPY options (Copy is denied)
    "GroupingSets",  # GROUP BY GROUPING SETS (...)
    "MergeTreeTTL",  # ClickHouse TTL clause in CREATE/ALTER
    "MergeTreeTTLAction",
    "SetOperation",  # UNION / INTERSECT / EXCEPT
    "TriggerExecute",  # CREATE TRIGGER ... EXECUTE FUNCTION (Create is denied)
}


def _expression_classes() -> list[tuple[str, type[exp.Expr]]]:
    return [(n, c) for n, c in sorted(vars(exp).items()) if inspect.isclass(c) and issubclass(c, exp.Expr)]


def test_every_dml_and_ddl_node_type_is_denied() -> None:
    allowed = [
        n for n, c in _expression_classes() if issubclass(c, (exp.DML, exp.DDL)) and not sql_guard._classify(c)[0]
    ]
    assert allowed == []


def test_statement_like_node_types_are_denied_or_reviewed() -> None:
    # Properties only occur inside DDL; functions are checked by name.
    unreviewed = [
        name
        for name, cls in _expression_classes()
        if _STATEMENT_LIKE_NAME.search(name)
        and not issubclass(cls, (exp.Property, exp.Func, exp.ColumnConstraintKind))
        and sql_guard._classify(cls)[0] is None
        and name not in _REVIEWED_HARMLESS
    ]
    assert unreviewed == [], "new sqlglot node types: deny them in sql_guard or review them as harmless"
