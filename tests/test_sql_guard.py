"""Tests for the parser layer of the read-only SQL guard."""

from __future__ import annotations

import re

import pytest
import sqlglot.parser
from sqlglot import exp

from governance.sql import guard as sql_guard
from governance.sql.functions import allowed_functions
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


# Names that used to be on the denylist, and members of the families it denied
# by prefix: the allowlist must still refuse every one of them, in every
# dialect, in a select list, a predicate and FROM.
_FORMERLY_DENIED = (
    "pg_stat_file pg_logdir_ls set_config pg_terminate_backend pg_cancel_backend pg_reload_conf "
    "pg_rotate_logfile pg_switch_wal pg_create_restore_point pg_promote pg_backup_start pg_notify "
    "pg_logical_emit_message pg_stat_statements_reset pg_nextoid brin_summarize_new_values "
    "gin_clean_pending_list schedule unschedule nextval setval txid_current pg_current_xact_id "
    "query_to_xml table_to_xml cursor_to_xml schema_to_xml database_to_xml ts_stat loread lowrite http "
    "load_file sleep benchmark get_lock release_lock sys_exec sys_eval master_pos_wait "
    "load_extension writefile readfile edit fts3_tokenizer fsdir zipfile "
    "lo_unlink lo_import dblink dblink_send_query pg_read_file pg_read_binary_file pg_ls_waldir pg_file_write "
    "pg_sleep pg_sleep_until pg_advisory_lock pg_advisory_unlock_all pg_try_advisory_lock "
    "pg_replication_origin_create pg_drop_replication_slot pg_logical_slot_get_changes pg_stat_reset "
    "pg_background_launch http_post binary_upgrade_set_next_pg_type_oid"
).split()

_DENIED_CALLS = [
    (dialect, template.format(name=name), name)
    for name in _FORMERLY_DENIED
    for dialect in SUPPORTED_DIALECTS
    for template in ("SELECT {name}('x')", "SELECT 1 WHERE {name}('x') IS NULL", "SELECT * FROM {name}('x') AS f")
]


@pytest.mark.parametrize(("dialect", "sql", "name"), _DENIED_CALLS, ids=[f"{d}-{s}" for d, s, _ in _DENIED_CALLS])
def test_formerly_denylisted_functions_are_not_allowed(dialect: str, sql: str, name: str) -> None:
    verdict = analyse_sql(sql, dialect)
    assert verdict.allowed is False
    assert verdict.reason == f"function not allowed: {name}"


@pytest.mark.parametrize("dialect", SUPPORTED_DIALECTS)
def test_no_allowlist_entry_is_a_known_dangerous_name(dialect: str) -> None:
    assert allowed_functions(dialect).isdisjoint(_FORMERLY_DENIED)


# Allowlist entries that need their own syntax, as whole queries.
_SYNTAX_CALLS = {
    "cast": "SELECT CAST(a AS int) FROM t",
    "extract": "SELECT EXTRACT(year FROM a) FROM t",
    "trim": "SELECT TRIM(BOTH ' ' FROM a) FROM t",
    "position": "SELECT POSITION('a' IN b) FROM t",
    "convert": "SELECT CONVERT(a, char) FROM t",
    "overlay": "SELECT OVERLAY(a PLACING 'x' FROM 1 FOR 2) FROM t",
    "decode": "SELECT decode(a, 'base64') FROM t",
    "date_add": "SELECT DATE_ADD(a, INTERVAL 1 DAY) FROM t",
    "date_sub": "SELECT DATE_SUB(a, INTERVAL 1 DAY) FROM t",
    "json_table": "SELECT j.x FROM t, JSON_TABLE(t.a, '$[*]' COLUMNS (x INT PATH '$.x')) AS j",
    "current_setting": "SELECT current_setting('TimeZone')",  # only listed settings, as a literal
    "xmlelement": "SELECT xmlelement(name p, a) FROM t",
    "overlaps": "SELECT (a, b) OVERLAPS (c, d) FROM t",
}


@pytest.mark.parametrize("dialect", SUPPORTED_DIALECTS)
def test_every_allowlisted_function_is_allowed_when_called(dialect: str) -> None:
    # The guard must honour its own list: each name, called the way a query
    # would, passes. Arguments vary because some builders need a few.
    refused = []
    for name in sorted(allowed_functions(dialect)):
        if name in _SYNTAX_CALLS:
            queries = [_SYNTAX_CALLS[name]]
        else:
            queries = [f"SELECT {name}({args}) FROM t" for args in ("a", "a, b", "a, 'x', 'y'", "", "a, 2")]
        verdicts = [analyse_sql(sql, dialect) for sql in queries]
        if not any(v.allowed for v in verdicts):
            refused.append((name, verdicts[0].reason))
    assert refused == []


@pytest.mark.parametrize("dialect", SUPPORTED_DIALECTS)
def test_called_functions_are_reported(dialect: str) -> None:
    verdict = analyse_sql("SELECT lower(name), count(*) FROM customers GROUP BY 1", dialect)
    assert verdict.allowed
    assert verdict.functions == ("count", "lower")


def test_the_written_name_is_checked_not_sqlglots_class() -> None:
    # sqlglot reads LEN(...) as exp.Length, like LENGTH(...); PostgreSQL would
    # call a function named len, which is not on its list.
    assert analyse_sql("SELECT length(name) FROM customers", "postgres").allowed
    assert analyse_sql("SELECT len(name) FROM customers", "postgres").reason == "function not allowed: len"
    assert analyse_sql("SELECT char_length(name) FROM customers", "postgres").allowed
    # MySQL's IFNULL becomes exp.Coalesce; NVL would too, but MySQL has no NVL
    assert analyse_sql("SELECT ifnull(a, 1) FROM t", "mysql").allowed
    assert analyse_sql("SELECT nvl(a, 1) FROM t", "mysql").reason == "function not allowed: nvl"


def test_every_word_before_a_parenthesis_is_checked_even_without_the_tree() -> None:
    # The token-level net: a call the tree does not explain (as if sqlglot
    # had parsed it into something unrecognisable) is still checked by name.
    tokens = sql_guard._DIALECTS["postgres"].tokenize("SELECT lower(x), CAST(y AS numeric(10, 2)) IN (1) FROM t")
    walk = sql_guard._Walk("postgres", tokens)
    walk.check_unexplained_calls()
    assert walk.denial is None  # allowed names, syntax words, type parameters
    tokens = sql_guard._DIALECTS["postgres"].tokenize("SELECT lower(x), pg_read_file('y'), \"IN\"(1)")
    walk = sql_guard._Walk("postgres", tokens)
    walk.check_unexplained_calls()
    assert walk.denial == "function not allowed: pg_read_file"
    assert analyse_sql('SELECT "in"(1)', "postgres").reason == "function not allowed: in"


def test_postgres_quoted_function_names_are_exact() -> None:
    assert analyse_sql('SELECT "lower"(name) FROM customers', "postgres").allowed
    assert analyse_sql('SELECT "LOWER"(name) FROM customers', "postgres").reason == "function not allowed: LOWER"
    # MySQL and SQLite function names are case-insensitive, quoted or not
    assert analyse_sql("SELECT `LOWER`(name) FROM customers", "mysql").allowed


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT public.lower(name) FROM customers", "function not allowed: public.lower"),
        ('SELECT "public"."lower"(name) FROM customers', "function not allowed: public.lower"),
        ("SELECT mydb.pg_catalog.lower(name) FROM customers", "function not allowed"),
        ('SELECT "PG_CATALOG".lower(name) FROM customers', "function not allowed"),
        ("SELECT * FROM public.generate_series(1, 2)", "function not allowed: public.generate_series"),
        ("SELECT pg_catalog.set_config('a', 'b', false)", "function not allowed: set_config"),
    ],
)
def test_qualified_calls_other_than_pg_catalog_are_denied(sql: str, reason: str) -> None:
    verdict = analyse_sql(sql, "postgres")
    assert verdict.allowed is False
    assert reason in verdict.reason


def test_pg_catalog_qualified_builtin_is_allowed() -> None:
    assert analyse_sql("SELECT pg_catalog.lower(name) FROM customers", "postgres").allowed
    assert analyse_sql("SELECT * FROM pg_catalog.generate_series(1, 3) AS g(n)", "postgres").allowed


@pytest.mark.parametrize("dialect", ["mysql", "sqlite"])
def test_qualified_calls_are_denied_outside_postgres(dialect: str) -> None:
    verdict = analyse_sql("SELECT shop.lower(name) FROM customers", dialect)
    assert (verdict.allowed, verdict.reason) == (False, "function not allowed: shop.lower")


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

# Reviewed matches that ARE on the node-type allowlist: plain query parts.
_REVIEWED_HARMLESS = {
    "GroupingSets",  # GROUP BY GROUPING SETS (...)
}


def _all_expression_classes() -> set[type[exp.Expr]]:
    """Every Expr subclass sqlglot defines, found by walking subclasses (not
    only the names exported from sqlglot.expressions)."""
    seen: set[type[exp.Expr]] = set()
    pending = [exp.Expr]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                pending.append(sub)
    return seen


def test_every_dml_and_ddl_node_type_is_denied() -> None:
    allowed = [c.__name__ for c in _all_expression_classes() if issubclass(c, (exp.DML, exp.DDL)) and not _denied(c)]
    assert allowed == []


def _denied(node_type: type[exp.Expr]) -> bool:
    return sql_guard._classify(node_type)[0] is not None


def test_every_sqlglot_class_off_the_allowlist_is_denied() -> None:
    # The node-type check is an allowlist: whatever sqlglot adds later is
    # denied until someone reviews it and adds it to _ALLOWED_NODE_TYPES.
    classes = _all_expression_classes()
    assert len(classes) > 500  # the walk really found sqlglot's classes
    slipped = sorted(c.__name__ for c in classes if c not in sql_guard._ALLOWED_NODE_TYPES and not _denied(c))
    assert slipped == []


def test_a_new_sqlglot_class_is_denied_even_under_an_allowed_base() -> None:
    # Exact classes, not issubclass: a future subclass of an allowed node
    # (a new operator, a new cast-like function) is not allowed by inheritance.
    new_types = [type(f"Future{base.__name__}", (base,), {}) for base in (exp.Cast, exp.EQ, exp.Column, exp.Func)]
    assert [_denied(t) for t in new_types] == [True, True, True, True]


def test_allowlisted_node_types_are_reviewed_query_parts() -> None:
    allowed = sql_guard._ALLOWED_NODE_TYPES
    assert all(sql_guard._denied_type_reason(c) is None for c in allowed)
    assert not [c for c in allowed if issubclass(c, (exp.DML, exp.DDL, exp.Command, exp.Property))]
    statement_like = sorted(
        c.__name__ for c in allowed if _STATEMENT_LIKE_NAME.search(c.__name__) and c.__name__ not in _REVIEWED_HARMLESS
    )
    assert statement_like == []
    # Unknown function names are never allowed by type: they are checked by name.
    assert exp.Anonymous not in allowed and exp.AnonymousAggFunc not in allowed


def test_unknown_function_class_reason_names_the_function() -> None:
    assert sql_guard._classify(exp.CurrentUser)[0] == "function not allowed: current_user"
    verdict = analyse_sql("SELECT current_user", "postgres")
    assert (verdict.allowed, verdict.reason) == (False, "function not allowed: current_user")
