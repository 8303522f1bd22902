"""Writing audit records. Callers treat any exception here as fatal for the
result it describes: no record, no result (fail closed)."""

from __future__ import annotations

import uuid

from audit.models import Origin, Outcome, ToolCallAudit


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
        return ToolCallAudit.objects.create(
            actor_id=actor_id,
            actor_username=actor_username,
            tool=tool,
            resource_kind=resource_kind,
            resource_id=resource_id,
            resource_name=resource_name,
            outcome=outcome,
            reason=reason[:2000],
            # Row counts describe successful reads only (seed 003).
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
    except Exception as exc:  # any failure to record means the caller must not proceed
        raise AuditWriteError(f"audit record could not be written: {exc.__class__.__name__}") from exc
