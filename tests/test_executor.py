"""The executor: checks before execution, one audit row per call, fail closed."""

from __future__ import annotations

import json
import uuid

import pytest

from audit.models import ToolCallAudit
from chat.context import TurnContext
from chat.executor import execute_tool_call, sanitise_value

# The model-facing refusals read here are the English ones.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]


def ctx_for(user, turn_id=7) -> TurnContext:
    return TurnContext(
        user_id=user.pk,
        username=user.username,
        tier="private",
        model_name="m",
        provider_name="p",
        conversation_id=uuid.uuid4(),
        turn_id=turn_id,
    )


def run_sql(ctx, connection, sql):
    return execute_tool_call(ctx, name="run_sql", arguments=json.dumps({"connection": connection, "sql": sql}))


def test_allowed_query_returns_rows_and_writes_one_success_row(personas):
    ctx = ctx_for(personas.staff)
    result = run_sql(ctx, "sales", "SELECT name, city FROM customers ORDER BY id")
    payload = json.loads(result.content)
    assert result.outcome == "success"
    assert payload["rows"][0] == ["김민준", "서울"]
    assert payload["row_count"] == 3
    row = ToolCallAudit.objects.get()  # the attempt, written before the query ran
    assert row.outcome == "started" and row.final.outcome == "success"  # the outcome: a second, append-only record
    assert (row.call_outcome, row.call_row_count, row.resource_name, row.tables) == (
        "success",
        3,
        "sales",
        ["customers"],
    )
    assert row.actor_id == personas.staff.pk and row.turn_id == 7 and row.conversation_id == ctx.conversation_id
    assert row.sql_text == "SELECT name, city FROM customers ORDER BY id"
    assert row.duration_ms is not None
    # No result values in the audit record.
    assert "김민준" not in json.dumps([str(v) for v in row.__dict__.values()], ensure_ascii=False)


@pytest.mark.parametrize(
    ("who", "connection", "sql", "reason_part"),
    [
        ("outsider", "sales", "SELECT * FROM customers", "no connection of that name"),
        ("staff", "hr_secret", "SELECT * FROM salaries", "no connection of that name"),
        ("staff", "no_such_db", "SELECT 1", "no connection of that name"),
        ("staff", "partial", "SELECT * FROM orders", "no permission to read table(s): orders"),
        ("staff", "partial", "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id", "orders"),
        ("staff", "sales", "DELETE FROM customers", "not a read-only query"),
        ("staff", "sales", "WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d", "not a read-only query"),
    ],
)
def test_denied_calls_are_refused_before_execution_and_audited(
    personas, who, connection, sql, reason_part, monkeypatch
):
    executed = []
    monkeypatch.setattr("chat.executor.tools.sql.execute_readonly", lambda **kw: executed.append(kw))
    result = run_sql(ctx_for(getattr(personas, who)), connection, sql)
    assert result.outcome == "denied"
    assert json.loads(result.content)["error"].startswith("refused:")
    assert executed == []
    row = ToolCallAudit.objects.get()
    assert row.outcome == "denied" and reason_part in row.reason
    assert row.row_count is None


def test_refusal_for_hidden_and_missing_connection_reads_the_same(personas):
    ctx = ctx_for(personas.staff)
    hidden = json.loads(run_sql(ctx, "hr_secret", "SELECT 1").content)["error"]
    missing = json.loads(run_sql(ctx, "zz_missing", "SELECT 1").content)["error"]
    assert hidden == missing and "hr_secret" not in hidden


def test_partial_grant_allows_granted_table_and_cte_names_are_not_tables(personas):
    result = run_sql(
        ctx_for(personas.staff), "partial", "WITH orders AS (SELECT id FROM customers) SELECT * FROM orders"
    )
    assert result.outcome == "success"
    assert ToolCallAudit.objects.get().tables == ["customers"]


def test_database_error_is_audited_as_failed(personas):
    result = run_sql(ctx_for(personas.staff), "sales", "SELECT no_such_column FROM customers")
    assert result.outcome == "failed"
    row = ToolCallAudit.objects.get()
    # A name the connection's schema does not have is a word of the statement,
    # which may be a guessed value: the error keeps only schema identifiers.
    assert row.call_outcome == "failed" and "no such column" in row.call_reason
    assert "no_such_column" not in row.call_reason


def test_exception_inside_a_check_refuses(personas, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr("chat.executor.tools.sql.tables_not_granted", boom)
    result = run_sql(ctx_for(personas.staff), "sales", "SELECT * FROM customers")
    assert result.outcome == "denied"
    assert ToolCallAudit.objects.get().outcome == "denied"


def test_audit_write_failure_withholds_result(personas, monkeypatch):
    from audit.services import AuditWriteError

    def fail(*args, **kwargs):
        raise RuntimeError("db down")

    monkeypatch.setattr("audit.services._insert", fail)
    with pytest.raises(AuditWriteError):
        run_sql(ctx_for(personas.staff), "sales", "SELECT * FROM customers")


def test_audit_insert_refused_by_the_database_withholds_result(personas, audit_inserts_refused):
    """The same through the real write path: the database refuses the INSERT."""
    from audit.services import AuditWriteError

    with pytest.raises(AuditWriteError):
        run_sql(ctx_for(personas.staff), "sales", "SELECT * FROM customers")


def test_long_sql_is_truncated_with_flag(personas):
    sql = "SELECT id FROM customers WHERE name <> '" + "x" * 12_000 + "'"
    run_sql(ctx_for(personas.staff), "sales", sql)
    row = ToolCallAudit.objects.get()
    assert row.sql_truncated is True and len(row.sql_text) == ToolCallAudit.SQL_MAX_CHARS


def test_row_cap_truncates_result(personas):
    personas.sales.row_cap = 2
    personas.sales.save()
    payload = json.loads(run_sql(ctx_for(personas.staff), "sales", "SELECT id FROM customers").content)
    assert payload["row_count"] == 2 and payload["truncated"] is True


def test_unknown_tool_is_refused_and_audited(personas):
    result = execute_tool_call(ctx_for(personas.staff), name="drop_everything", arguments="{}")
    assert result.outcome == "denied"
    assert ToolCallAudit.objects.get().tool == "drop_everything"


def test_malformed_arguments_are_refused(personas):
    result = execute_tool_call(ctx_for(personas.staff), name="run_sql", arguments="{not json")
    assert result.outcome == "denied"
    assert ToolCallAudit.objects.get().outcome == "denied"


def test_sanitise_binary_becomes_size_marker():
    assert sanitise_value(b"\x00\x01\x02") == "<binary 3 bytes>"


def test_executor_reads_the_tier_from_the_turn_context_only(personas):
    """A nested run gets the parent's context; the executor never looks the
    tier up itself, so a public context cannot reach internal-only data."""
    from dataclasses import replace

    from governance.models import DbConnection, DbGrant
    from governance.services import db_connection_set_stored_dsn

    internal = DbConnection.objects.create(name="internal", engine="sqlite", exposure="internal_only")
    db_connection_set_stored_dsn(connection=internal, dsn=sample_dsn(personas))
    DbGrant.objects.create(role=personas.role, connection=internal, whole_database=True)
    public = replace(ctx_for(personas.staff), tier="public")
    assert run_sql(public, "internal", "SELECT 1").outcome == "denied"
    assert run_sql(ctx_for(personas.staff), "internal", "SELECT 1").outcome == "success"


def sample_dsn(personas) -> str:
    from governance.services import db_connection_dsn

    return db_connection_dsn(connection=personas.sales)
