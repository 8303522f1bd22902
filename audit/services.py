"""Writing audit records. Callers treat any exception here as fatal for the
result it describes: no record, no result (fail closed)."""

from __future__ import annotations

import uuid
from functools import cache

from django.db import connection, transaction

from audit.models import Origin, Outcome, ToolCallAudit
from owlai import prepared


class AuditWriteError(Exception):
    """An audit row could not be written; the caller must withhold the result."""


def truncate_sql(sql: str, limit: int = ToolCallAudit.SQL_MAX_CHARS) -> tuple[str, bool]:
    if len(sql) <= limit:
        return sql, False
    return sql[:limit], True


def tool_call_audit_write(
    *,
    actor_id: int | None,
    actor_username: str,
    tool: str,
    outcome: str,
    reason: str = "",
    resource_kind: str = "db_connection",
    resource_id: int | None = None,
    resource_name: str = "",
    row_count: int | None = None,
    sql_text: str = "",
    tables: list[str] | tuple[str, ...] = (),
    origin: str = Origin.CHAT,
    origin_ref: str = "",
    conversation_id: uuid.UUID | None = None,
    turn_id: int | None = None,
    duration_ms: float | None = None,
) -> ToolCallAudit:
    if outcome not in Outcome.values:
        raise AuditWriteError(f"unknown outcome {outcome!r}")
    sql_text, truncated = truncate_sql(sql_text)
    try:
        row = ToolCallAudit(
            actor_id=actor_id,
            actor_username=actor_username,
            tool=tool,
            resource_kind=resource_kind,
            resource_id=resource_id,
            resource_name=resource_name,
            outcome=outcome,
            reason=reason[:2000],
            # Row counts describe successful reads only.
            row_count=row_count if outcome == Outcome.SUCCESS else None,
            sql_text=sql_text,
            sql_truncated=truncated,
            tables=list(tables),
            origin=origin,
            origin_ref=origin_ref,
            conversation_id=conversation_id,
            turn_id=turn_id,
            duration_ms=duration_ms,
        )
        _insert(row)
        return row
    except Exception as exc:  # any failure to record means the caller must not proceed
        raise AuditWriteError(f"audit record could not be written: {exc.__class__.__name__}") from exc


@cache
def _insert_fields() -> tuple:
    return tuple(f for f in ToolCallAudit._meta.concrete_fields if not f.primary_key)


@cache
def _insert_sql() -> str:
    fields = _insert_fields()
    return (
        f"INSERT INTO {ToolCallAudit._meta.db_table} ({', '.join(f.column for f in fields)})"
        f" VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {ToolCallAudit._meta.pk.column}"
    )


def _insert(row: ToolCallAudit) -> None:
    """INSERT one tool-call row (autocommit: durable when this returns).

    On PostgreSQL a prepared statement: this runs on every tool call, and the
    ORM's save path cost about as much as the database's own work. The values
    still come from the model's fields (pre_save sets created_at,
    get_db_prep_save adapts JSON, UUIDs and times), so the model stays the
    one definition of the row."""
    if connection.in_atomic_block:
        # Inside a caller's transaction a refused INSERT would poison it (the
        # caller could not even record that the call failed): a savepoint
        # keeps the failure to this row. In autocommit, the usual case, no
        # savepoint is needed and the INSERT commits in its own round trip.
        with transaction.atomic():
            _insert_now(row)
    else:
        _insert_now(row)


def _insert_now(row: ToolCallAudit) -> None:
    if not prepared.enabled():
        row.save(force_insert=True)
        return
    values = [f.get_db_prep_save(f.pre_save(row, True), connection) for f in _insert_fields()]
    (row.pk,) = prepared.fetchall(_insert_sql(), values)[0]
    row._state.adding = False
    row._state.db = connection.alias
