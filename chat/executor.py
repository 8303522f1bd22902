"""The executor: the one place every tool call passes.

    visibility re-check -> tool checks (read-only SQL, tables)
    -> attempt row, committed (cannot write? nothing runs) -> execute
    -> outcome row (cannot write? withhold the result) -> sanitise -> result

A call refused by the checks is one row (outcome denied): nothing ran.

Every decision fails closed: an exception while deciding refuses the call.
The model only ever receives what `execute_tool_call` returns.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from audit.models import Outcome, ToolCallAudit
from audit.services import tool_call_audit_write, tool_call_outcome_write
from chat.context import TurnContext
from chat.document_search import search_collection
from chat.tools import RUN_SQL, SEARCH_DOCUMENTS
from chat.vault import DbVault
from governance.models import DbConnection, DocumentCollection
from governance.pii.known_values import EMPTY, KnownValues
from governance.pii.lineage import classify_outputs, rows_read_pii
from governance.pii.masking import InMemoryVault, MaskCounts, Vault, mask_any, mask_rows, mask_string, mask_with
from governance.pii.reidentify import Reidentified, ReidentifyError, reidentify_sql
from governance.schema_analysis import classification_schema, mask_stats_record
from governance.services import GovernanceError, db_connection_dsn
from governance.sql.dialects import configured_schemas
from governance.sql.execute import QueryError, account_risks, execute_readonly, statement_words
from governance.sql.guard import analyse_sql
from governance.sql.table_access import tables_not_granted
from governance.visibility import DbAccess, collection_access, db_access

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolResult:
    """What goes back to the model (`content`) and to the UI (outcome, rows)."""

    content: str
    outcome: str
    row_count: int | None = None


MAX_SEARCH_QUERY_CHARS = 500


class _Refused(Exception):
    """A check refused the call; the message is what the model is told."""


def execute_tool_call(ctx: TurnContext, *, name: str, arguments: str) -> ToolResult:
    """Run one tool call for a turn. Raises AuditWriteError when the call cannot
    be recorded: the caller must then stop the turn without the result."""
    # Oversize arguments are refused before anything reads them (the model
    # client stops reading such an argument after the cap + 1 characters).
    limit = settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS
    if len(arguments or "") > limit:
        reason = f"arguments longer than {limit} characters"
        _audit(ctx, tool=name or "?", outcome=Outcome.DENIED, reason=reason)
        return _refusal(f"{reason}; send a shorter call")
    if name == RUN_SQL:
        return _run_sql(ctx, arguments)
    if name == SEARCH_DOCUMENTS:
        return _search_documents(ctx, arguments)
    _audit(ctx, tool=name or "?", outcome=Outcome.DENIED, reason="unknown tool")
    return _refusal(f"unknown tool: {name}")


def _run_sql(ctx: TurnContext, raw_arguments: str) -> ToolResult:
    started = time.perf_counter()
    connection: DbConnection | None = None
    sql = ""
    tables: tuple[str, ...] = ()
    vault = vault_for(ctx)
    known = EMPTY
    try:
        args = _parse_arguments(raw_arguments)
        sql = args.get("sql") if isinstance(args.get("sql"), str) else ""
        connection, scope, revision = _visible_connection(ctx, args.get("connection"))
        if not sql.strip():
            raise _Refused("sql is empty")
        dialect = connection.sql_dialect
        verdict = analyse_sql(sql, dialect)
        tables = verdict.tables
        if not verdict.allowed:
            raise _Refused(f"not a read-only query: {verdict.reason}")
        missing = tables_not_granted(tables, scope, dialect)
        if missing:
            raise _Refused(f"no permission to read table(s): {', '.join(missing)}")
        known = vault.known_values(ctx.turn_id)
        executed = _reidentified(sql, dialect, vault, tables)
        # Masking hides values, not how many rows came back: a query whose
        # row count personal data decides is refused before it runs.
        schema = classification_schema(connection=connection, revision=revision)
        if rows_read_pii(executed.sql, dialect, schema, tainted_literals=executed.substituted):
            raise _Refused("personal data would decide how many rows this query returns; count or aggregate instead")
        dsn = db_connection_dsn(connection=connection)
    except _Refused as refused:
        # A reason may quote the statement, whose literals may be values.
        reason = mask_string(str(refused), vault, known=known)
        _audit_sql(
            ctx,
            connection,
            sql,
            tables,
            Outcome.DENIED,
            reason,
            started,
            raw_name=_name_of(raw_arguments, "connection"),
        )
        return _refusal(reason)
    except Exception:
        # A crash inside a decision is a refusal, never a pass.
        logger.exception("tool check failed; refusing")
        _audit_sql(
            ctx,
            connection,
            sql,
            tables,
            Outcome.DENIED,
            "internal error during checks",
            started,
            raw_name=_name_of(raw_arguments, "connection"),
        )
        return _refusal("the call could not be checked and was refused")

    # Nothing reaches the customer database (not even the account check)
    # before the attempt is recorded and committed; if this raises, nothing
    # ran and the turn stops (fail closed).
    attempt = _audit_sql(ctx, connection, sql, tables, Outcome.STARTED, "", started)
    try:
        _require_read_only_account(connection.engine, dsn)
    except _Refused as refused:
        reason = mask_string(str(refused), vault, known=known)
        _audit_outcome(attempt, Outcome.DENIED, reason, started)
        return _refusal(reason)
    except Exception:
        logger.exception("account check failed; refusing")
        _audit_outcome(attempt, Outcome.DENIED, "internal error during checks", started)
        return _refusal("the call could not be checked and was refused")

    try:
        result = execute_readonly(
            engine=connection.engine,
            dsn=dsn,
            sql=executed.sql,
            row_cap=connection.row_cap,
            timeout_ms=connection.statement_timeout_ms,
            schemas=connection_schemas(connection),
            # An error may quote back the statement's identifiers, never its literals.
            allowed_words=lambda: statement_words(sql, dialect),
        )
    except (QueryError, GovernanceError) as exc:
        # The message is already value-free (quoted parts elided); what is
        # left still goes through the known values and the detectors.
        message = mask_string(str(exc), vault, known=known)
        _audit_outcome(attempt, Outcome.FAILED, message, started)
        return ToolResult(
            content=json.dumps({"error": f"query failed: {message}"}, ensure_ascii=False), outcome=Outcome.FAILED
        )
    except Exception as exc:
        logger.exception("query execution crashed")
        _audit_outcome(attempt, Outcome.FAILED, f"execution error: {exc.__class__.__name__}", started)
        return ToolResult(content=json.dumps({"error": "query failed"}), outcome=Outcome.FAILED)

    # The outcome is written before the result exists for the model; if this
    # raises, the result is dropped with the exception (fail closed).
    _audit_outcome(attempt, Outcome.SUCCESS, "", started, row_count=len(result.rows))
    # Then, in this order: binary -> size marker, credentialed URLs -> short
    # references, known values and personal data -> tokens, big results -> spill file.
    rows = [[shorten_credentialed_urls(sanitise_value(v)) for v in row] for row in result.rows]
    rows = mask_sql_rows(
        ctx,
        connection,
        executed.sql,
        result.columns,
        rows,
        vault,
        revision=revision,
        known=known,
        tainted_literals=executed.substituted,
        schema=schema,
    )
    payload = {
        "connection": connection.name,
        "columns": mask_any(_labels(result.columns, executed, sql, dialect), vault, known=known),
        "rows": rows,
        "row_count": len(result.rows),
        "truncated": result.truncated,
    }
    if result.truncated:
        payload["note"] = f"only the first {connection.row_cap} rows are shown; aggregate in SQL instead"
    return ToolResult(content=spill_if_large(ctx, payload), outcome=Outcome.SUCCESS, row_count=len(result.rows))


def _labels(columns: list[str], executed: Reidentified, sql: str, dialect: str) -> list[str]:
    """The result's column labels for the model. A server labels an unaliased
    expression with its text (MySQL, SQLite), cut at some length: after
    re-identification that text holds originals, possibly cut where known
    values cannot recognise them. Then only labels the model wrote itself
    are kept; the others become column1, column2, ..."""
    if not executed.changed:
        return columns
    words = statement_words(sql, dialect)
    return [label if label.casefold() in words else f"column{index}" for index, label in enumerate(columns, 1)]


def _reidentified(sql: str, dialect: str, vault: Vault, tables: tuple[str, ...]) -> Reidentified:
    """This conversation's tokens in string literals become originals in the
    parsed tree; the rendering is checked again and is what runs."""
    try:
        executed = reidentify_sql(sql, dialect, vault.original_for)
    except ReidentifyError as error:
        raise _Refused(str(error)) from error
    if executed.changed:
        again = analyse_sql(executed.sql, dialect)
        if not again.allowed or set(again.tables) != set(tables):
            raise _Refused(
                "the query with the masked values filled in did not pass the checks; compare with the value "
                "differently (e.g. without a trailing backslash)"
            )
    return executed


# Account hygiene is checked once per DSN per process for this long: a DBA
# who grants superuser later is caught within minutes, without a query per call.
_ACCOUNT_CHECK_SECONDS = 300
_ACCOUNT_CHECKS: dict[str, tuple[float, tuple[str, ...]]] = {}


def _require_read_only_account(engine: str, dsn: str) -> None:
    key = hashlib.sha256(f"{engine}\x00{dsn}".encode()).hexdigest()
    checked = _ACCOUNT_CHECKS.get(key)
    if checked is None or time.monotonic() - checked[0] > _ACCOUNT_CHECK_SECONDS:
        try:
            risks = tuple(account_risks(engine=engine, dsn=dsn))
        except QueryError as error:
            raise _Refused(f"the connection's account could not be checked ({error.error_class or 'error'})") from error
        _ACCOUNT_CHECKS[key] = checked = (time.monotonic(), risks)
    if checked[1]:
        raise _Refused(
            "the connection's database account may do more than read ("
            + ", ".join(checked[1])
            + "); an admin must give it an account with only SELECT on its schemas"
        )


def connection_schemas(connection: DbConnection) -> tuple[str, ...]:
    """The schemas the connection's unqualified names resolve to (PostgreSQL's
    pinned search_path): exactly those a whole-database grant covers."""
    return configured_schemas(connection.sql_dialect, connection.schemas)


def vault_for(ctx: TurnContext) -> Vault:
    return DbVault(ctx.conversation_id) if ctx.conversation_id else InMemoryVault()


def mask_sql_rows(
    ctx,
    connection: DbConnection,
    sql: str,
    columns: list[str],
    rows: list,
    vault: Vault,
    *,
    revision: str | None = None,
    known: KnownValues = EMPTY,
    tainted_literals: dict[str, str] | None = None,
    schema: dict[str, dict[str, str | None]] | None = None,
) -> list:
    """Columns derived from personal data (lineage taint, including the
    originals substituted into `sql`) are masked whole; known values and the
    detectors run over every other string. Lineage failures mask more, never
    less. `sql` is the statement that ran. `revision`: the classification
    revision read with the grant (the schema cache key); `schema`: the
    analysed schema when the caller has read it already."""
    if schema is None:
        schema = classification_schema(connection=connection, revision=revision)
    outputs = aligned_outputs(
        classify_outputs(
            sql,
            connection.sql_dialect,
            schema,
            n_columns=len(columns),
            tainted_literals=tainted_literals,
        ),
        columns,
    )
    column_kinds = {o.index: o.pii_kind for o in outputs if o.pii_kind}
    if len(outputs) != len(columns):
        # No usable lineage at all: mask every column when the connection has
        # any personal-data column (when in doubt, mask).
        doubt = next((kind for table in schema.values() for kind in table.values() if kind), None)
        if doubt:
            column_kinds = dict.fromkeys(range(len(columns)), doubt)
    origins = {o.index: o.sources[0] for o in outputs if o.sources}
    counts = MaskCounts()
    masked = mask_with(
        vault,
        lambda v, c: mask_rows(rows, column_kinds=column_kinds, column_origins=origins, vault=v, counts=c, known=known),
        counts,
    )
    if counts:
        try:
            mask_stats_record(connection_id=connection.pk, counts=counts)
        except Exception:
            logger.exception("masking statistics could not be recorded")  # statistics only; masking already done
    return masked


def aligned_outputs(outputs: list, columns: list[str]) -> list:
    """Lineage predicts the output columns; the database says what came back.
    When the two disagree (e.g. a schema that changed since the analysis),
    map by name, and where a name is unknown or ambiguous mask the column if
    the query touched any personal data at all (when in doubt, mask)."""
    if [o.name.lower() for o in outputs] == [c.lower() for c in columns]:
        return outputs
    from dataclasses import replace

    doubt_kind = next((o.pii_kind for o in outputs if o.pii_kind), None)
    by_name: dict[str, list] = {}
    for output in outputs:
        by_name.setdefault(output.name.lower(), []).append(output)
    aligned = []
    for index, column in enumerate(columns):
        candidates = by_name.get(column.lower(), [])
        kinds = {c.pii_kind for c in candidates}
        if len(candidates) >= 1 and len(kinds) == 1:
            aligned.append(replace(candidates[0], index=index))
        else:
            aligned.append(
                replace(
                    outputs[0],
                    index=index,
                    name=column,
                    pii_kind=doubt_kind,
                    sources=(),
                    reason="output not matched to lineage; masked when in doubt",
                )
                if outputs
                else None
            )
    return [a for a in aligned if a is not None]


def spill_if_large(ctx: TurnContext, payload: dict) -> str:
    """A result too big for the model's context goes to a per-conversation file
    (already masked) and the model gets a preview and the file's name."""
    content = json.dumps(payload, ensure_ascii=False)
    if len(content) <= settings.OWLAI_SPILL_CHARS or not payload.get("rows"):
        return content
    path = spill_path(ctx)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    preview = dict(payload, rows=payload["rows"][: settings.OWLAI_SPILL_PREVIEW_ROWS])
    preview["spilled"] = {"file": path.name, "rows": len(payload["rows"]), "note": "full (masked) result saved"}
    return json.dumps(preview, ensure_ascii=False)


def spill_folder(conversation_id) -> Path:
    """Where a conversation's spill files live (purged with it: chat.retention)."""
    return Path(settings.VAR_DIR) / "spill" / str(conversation_id or "no-conversation")


def spill_path(ctx: TurnContext) -> Path:
    return spill_folder(ctx.conversation_id) / f"turn{ctx.turn_id or 0}-{uuid.uuid4().hex[:8]}.json"


_CREDENTIAL_URL = re.compile(
    r"\b[a-z][a-z0-9+.-]*://(?:[^\s/@]+@[^\s]+|[^\s]*[?&](?:token|access_token|key|api_key|apikey|sig|signature|"
    r"x-amz-signature|x-amz-credential|secret|password|auth)=[^\s]*)",
    re.IGNORECASE,
)


def shorten_credentialed_urls(value: Any) -> Any:
    """URLs with credentials or signed tokens become short references: the
    model needs to know a link exists, never the secret in it."""
    if not isinstance(value, str) or "://" not in value:
        return value
    return _CREDENTIAL_URL.sub(lambda m: f"[URL-{hashlib.sha256(m.group(0).encode()).hexdigest()[:8]}]", value)


def _parse_arguments(raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise _Refused("arguments are not valid JSON") from exc
    if not isinstance(args, dict):
        raise _Refused("arguments must be a JSON object")
    return args


def _name_of(raw_arguments: str, key: str) -> str:
    try:
        name = json.loads(raw_arguments).get(key)
    except Exception:
        return ""
    return name[:200] if isinstance(name, str) else ""


def _unavailable(kind: str) -> str:
    # The same words whether the resource does not exist, is not granted, or
    # is hidden from this turn's tier, and without echoing the name: a
    # refusal must not confirm that a hidden resource exists.
    return f"no {kind} of that name is available"


def _visible_connection(ctx: TurnContext, name: Any) -> DbAccess:
    if not isinstance(name, str) or not name:
        raise _Refused("connection is required")
    access = db_access(user_id=ctx.user_id, tier=ctx.tier, connection_name=name)
    if access is None:
        raise _Refused(_unavailable("connection"))
    return access


def _search_documents(ctx: TurnContext, raw_arguments: str) -> ToolResult:
    started = time.perf_counter()
    collection: DocumentCollection | None = None
    try:
        args = _parse_arguments(raw_arguments)
        name = args.get("collection")
        query = args.get("query")
        if not isinstance(name, str) or not name:
            raise _Refused("collection is required")
        collection = collection_access(user_id=ctx.user_id, tier=ctx.tier, collection_name=name)
        if collection is None:
            raise _Refused(_unavailable("collection"))
        if not isinstance(query, str) or not query.strip():
            raise _Refused("query is empty")
        if len(query) > MAX_SEARCH_QUERY_CHARS:
            raise _Refused(f"query is longer than {MAX_SEARCH_QUERY_CHARS} characters")
    except _Refused as refused:
        _audit_search(
            ctx, collection, Outcome.DENIED, str(refused), started, raw_name=_name_of(raw_arguments, "collection")
        )
        return _refusal(str(refused))
    except Exception:
        logger.exception("search check failed; refusing")
        _audit_search(ctx, collection, Outcome.DENIED, "internal error during checks", started)
        return _refusal("the call could not be checked and was refused")

    try:
        hits = search_collection(collection=collection, query=query)
    except Exception as exc:
        logger.exception("document search failed")
        _audit_search(ctx, collection, Outcome.FAILED, f"search error: {exc.__class__.__name__}", started)
        return ToolResult(content=json.dumps({"error": "search failed"}), outcome=Outcome.FAILED)
    # Audited with the hit count only: neither the query nor the text found.
    _audit_search(ctx, collection, Outcome.SUCCESS, "", started, row_count=len(hits))
    hits_payload = [{"title": h.title, "text": shorten_credentialed_urls(h.text)} for h in hits]
    counts = MaskCounts()
    vault = vault_for(ctx)
    known = vault.known_values(ctx.turn_id)
    payload = {
        "collection": collection.name,
        "hits": mask_with(vault, lambda v, c: mask_any(hits_payload, v, c, known=known), counts),
    }
    return ToolResult(content=spill_if_large(ctx, payload), outcome=Outcome.SUCCESS, row_count=len(hits))


def _audit_search(
    ctx: TurnContext,
    collection: DocumentCollection | None,
    outcome: str,
    reason: str,
    started: float,
    *,
    row_count: int | None = None,
    raw_name: str = "",
) -> None:
    _audit_call(
        ctx,
        tool=SEARCH_DOCUMENTS,
        resource_kind="document_collection",
        resource=collection,
        outcome=outcome,
        reason=reason,
        started=started,
        row_count=row_count,
        raw_name=raw_name,
    )


def _refusal(message: str) -> ToolResult:
    return ToolResult(content=json.dumps({"error": f"refused: {message}"}, ensure_ascii=False), outcome=Outcome.DENIED)


def _audit_sql(
    ctx: TurnContext,
    connection: DbConnection | None,
    sql: str,
    tables: tuple[str, ...],
    outcome: str,
    reason: str,
    started: float,
    *,
    row_count: int | None = None,
    raw_name: str = "",
) -> ToolCallAudit:
    return _audit_call(
        ctx,
        tool=RUN_SQL,
        resource_kind="db_connection",
        resource=connection,
        outcome=outcome,
        reason=reason,
        started=started,
        row_count=row_count,
        raw_name=raw_name,
        sql=sql,
        tables=tables,
    )


def _audit(ctx: TurnContext, *, tool: str, outcome: str, reason: str) -> None:
    _audit_call(ctx, tool=tool[:100], resource_kind="", resource=None, outcome=outcome, reason=reason, started=None)


def _audit_call(
    ctx: TurnContext,
    *,
    tool: str,
    resource_kind: str,
    resource: DbConnection | DocumentCollection | None,
    outcome: str,
    reason: str,
    started: float | None,
    row_count: int | None = None,
    raw_name: str = "",
    sql: str = "",
    tables: tuple[str, ...] = (),
) -> ToolCallAudit:
    """The audit row of a tool call (its attempt, with outcome `started`).
    Raises AuditWriteError when it cannot be written; the caller's result is
    then never returned, and a started call never runs (fail closed)."""
    return tool_call_audit_write(
        actor_id=ctx.user_id,
        actor_username=ctx.username,
        tool=tool,
        outcome=outcome,
        reason=reason,
        resource_kind=resource_kind,
        resource_id=resource.pk if resource else None,
        # For a refused unknown name we record what the model asked for.
        resource_name=resource.name if resource else raw_name,
        row_count=row_count,
        sql_text=sql,
        tables=list(tables),
        origin=ctx.origin,
        origin_ref=ctx.origin_ref,
        conversation_id=ctx.conversation_id,
        turn_id=ctx.turn_id,
        duration_ms=round((time.perf_counter() - started) * 1000, 3) if started is not None else None,
    )


def _audit_outcome(
    attempt: ToolCallAudit, outcome: str, reason: str, started: float, *, row_count: int | None = None
) -> None:
    """The outcome record of a started call. Raises AuditWriteError when it
    cannot be written: the result is then withheld (fail closed)."""
    tool_call_outcome_write(
        attempt=attempt,
        outcome=outcome,
        reason=reason,
        row_count=row_count,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )


def sanitise_value(value: Any) -> Any:
    """Make one cell JSON-safe for the model; binary becomes a size marker."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<binary {len(bytes(value))} bytes>"
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [sanitise_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): sanitise_value(v) for k, v in value.items()}
    return str(value)
