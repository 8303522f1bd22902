"""Writing audit records. Callers treat any exception here as fatal for the
result it describes: no record, no result (fail closed).

Every write:

* sanitises its text first (NUL bytes and lone surrogates, which PostgreSQL
  text and UTF-8 cannot hold, become U+FFFD; text is cut to its column's
  length), so a record is never unwritable because of what the model wrote.
  The digest chain hashes the stored row, i.e. the sanitised text;
* on PostgreSQL runs with a short `lock_timeout` and `statement_timeout`
  (OWLAI_AUDIT_LOCK_TIMEOUT_MS / OWLAI_AUDIT_STATEMENT_TIMEOUT_MS), set
  LOCAL to the write's own transaction: a locked or stalled audit table
  fails the write (AuditWriteError) in seconds instead of stalling the turn;
* is durable when it returns (autocommit: one round trip holding
  `SET LOCAL ...; SET LOCAL ...; INSERT`, an implicit transaction that commits
  as a unit). Inside a caller's transaction it runs in a savepoint and
  commits with that transaction.
"""

from __future__ import annotations

import re
import uuid

from django.conf import settings
from django.db import models, transaction

from audit.models import FINAL_OUTCOMES, Origin, Outcome, ToolCallAudit, ToolCallOutcome
from owlai import prepared
from owlai.prepared import insert_fields, insert_sql


class AuditWriteError(Exception):
    """An audit row could not be written; the caller must withhold the result."""


def truncate_sql(sql: str, limit: int = ToolCallAudit.SQL_MAX_CHARS) -> tuple[str, bool]:
    if len(sql) <= limit:
        return sql, False
    return sql[:limit], True


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def sanitise_text(value: str) -> str:
    """`value` with NUL bytes and lone surrogates replaced by U+FFFD (same
    length): what PostgreSQL text (no NUL) and UTF-8 (no surrogates) can hold."""
    if value.isascii():
        return value.replace("\x00", REPLACEMENT) if "\x00" in value else value
    return _UNSTORABLE.sub(REPLACEMENT, value)


def _text(value: object, limit: int | None = None) -> str:
    text = sanitise_text(value if isinstance(value, str) else str(value))
    return text[:limit] if limit is not None else text


def _limit(field_name: str, model: type[models.Model] = ToolCallAudit) -> int:
    return model._meta.get_field(field_name).max_length


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
    """One tool-call row: the whole record of a call refused before it ran
    (or one that touches no customer database), or, with outcome `started`,
    the attempt of a call about to run (its outcome: tool_call_outcome_write)."""
    if outcome not in Outcome.values:
        raise AuditWriteError(f"unknown outcome {outcome!r}")
    try:
        sql_text, truncated = truncate_sql(_text(sql_text))
        row = ToolCallAudit(
            actor_id=actor_id,
            actor_username=_text(actor_username, _limit("actor_username")),
            tool=_text(tool, _limit("tool")),
            resource_kind=_text(resource_kind, _limit("resource_kind")),
            resource_id=resource_id,
            resource_name=_text(resource_name, _limit("resource_name")),
            outcome=outcome,
            reason=_text(reason, 2000),
            # Row counts describe successful reads only.
            row_count=row_count if outcome == Outcome.SUCCESS else None,
            sql_text=sql_text,
            sql_truncated=truncated,
            tables=[_text(t) for t in tables],
            origin=_text(origin, _limit("origin")),
            origin_ref=_text(origin_ref, _limit("origin_ref")),
            conversation_id=conversation_id,
            turn_id=turn_id,
            duration_ms=duration_ms,
        )
        _insert(row)
        return row
    except Exception as exc:  # any failure to record means the caller must not proceed
        raise AuditWriteError(f"audit record could not be written: {exc.__class__.__name__}") from exc


def tool_call_outcome_write(
    *,
    attempt: ToolCallAudit,
    outcome: str,
    reason: str = "",
    row_count: int | None = None,
    duration_ms: float | None = None,
) -> ToolCallOutcome:
    """The outcome of a started call (append-only: a second record, never an
    UPDATE of the attempt). Raises AuditWriteError: the result is then withheld."""
    if outcome not in FINAL_OUTCOMES:
        raise AuditWriteError(f"not a final outcome {outcome!r}")
    if attempt.pk is None or attempt.outcome != Outcome.STARTED:
        raise AuditWriteError("an outcome needs a recorded started attempt")
    try:
        record = ToolCallOutcome(
            attempt_id=attempt.pk,
            outcome=outcome,
            reason=_text(reason, 2000),
            row_count=row_count if outcome == Outcome.SUCCESS else None,
            duration_ms=duration_ms,
        )
        _insert(record)
        return record
    except Exception as exc:
        raise AuditWriteError(f"audit record could not be written: {exc.__class__.__name__}") from exc


def _timeouts_sql() -> str:
    lock_ms = int(getattr(settings, "OWLAI_AUDIT_LOCK_TIMEOUT_MS", 2000))
    statement_ms = int(getattr(settings, "OWLAI_AUDIT_STATEMENT_TIMEOUT_MS", 5000))
    # Integers from settings, never user input; 0 would mean "no timeout".
    return f"SET LOCAL lock_timeout = {max(lock_ms, 1)}; SET LOCAL statement_timeout = {max(statement_ms, 1)}; "


def _insert(row: models.Model) -> None:
    """INSERT one audit row; durable when this returns (see the module docstring).

    The values come from the model's fields (pre_save sets created_at,
    get_db_prep_save adapts JSON, UUIDs and times), so the model stays the
    one definition of the row; the ORM's save path is skipped (it cost about
    as much as the database's own work on every tool call)."""
    connection = prepared.current()  # once: the proxy looks it up at every attribute
    if connection.vendor != "postgresql":
        if connection.in_atomic_block:
            # Inside a caller's transaction a refused INSERT would poison it
            # (the caller could not even record that the call failed): a
            # savepoint keeps the failure to this row.
            with transaction.atomic():
                row.save(force_insert=True)
        else:
            row.save(force_insert=True)
        return
    model = type(row)
    values = [f.get_db_prep_save(f.pre_save(row, True), connection) for f in insert_fields(model)]
    if connection.in_atomic_block:
        with transaction.atomic(), connection.cursor() as cursor:
            # SET LOCAL would outlive the savepoint (until the caller's
            # commit): the previous values are read first and put back.
            cursor.execute(
                "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'); "
                + _timeouts_sql()
                + insert_sql(model),
                values,
            )
            previous = cursor.fetchone()
            while cursor.nextset():
                pass
            (row.pk,) = cursor.fetchone()
            cursor.execute(
                "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)", previous
            )
    else:
        with connection.cursor() as cursor:
            # One round trip: several statements in one query string run as
            # one implicit transaction, committed when the last one succeeds.
            cursor.execute(_timeouts_sql() + insert_sql(model), values)
            while cursor.nextset():
                pass
            (row.pk,) = cursor.fetchone()
    row._state.adding = False
    row._state.db = connection.alias
