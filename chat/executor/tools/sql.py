"""run_sql: one read-only query on a company database.

Its parts of the pipeline:

    VISIBILITY  the connection and the user's merged grant (one query)
    CHECKS      one read-only statement (allowlisted functions); only granted
                tables; this conversation's tokens in string literals become
                originals in the parsed tree, the rendering is checked again
                and is what runs; a query whose row count personal data
                decides is refused (masking hides values, not counts)
    RUN         the connection's account may only read (after the attempt
                row: the check queries the customer database; a server
                that cannot be reached fails the call); then the
                query, with pinned session settings, timeout and row cap;
                errors come back value-free (quoted parts elided)
    SHAPING     lineage: every output column derived from personal data is
                masked whole; labels the server derived from re-identified
                text are replaced
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import replace

from django.utils.translation import gettext, gettext_noop

from audit.models import ResourceKind
from chat.executor.pipeline import Call, Lineage, Offer, Output, Target
from chat.executor.policy import ALWAYS_ALLOW
from chat.executor.reasons import Phrase, Reason, Refused, ToolFailed
from chat.executor.steps import summary_fields
from governance.models import ColumnClassification, DbConnection
from governance.pii.free_text import unknown_types, with_free_text
from governance.pii.known_values import EMPTY, KnownValues
from governance.pii.lineage import classify_outputs, rows_read_pii, token_kind
from governance.pii.masking import TOKEN_PATTERN, MaskCounts, Vault, mask_rows, mask_with
from governance.pii.reidentify import Reidentified, ReidentifyError, reidentify_sql
from governance.schema_analysis import REASONS, connection_columns, mask_stats_record
from governance.services import GovernanceError, db_connection_dsn
from governance.sql.dialects import configured_schemas
from governance.sql.execute import (
    QueryError,
    Unreachable,
    account_risks,
    execute_readonly,
    schema_words,
    statement_words,
)
from governance.sql.guard import analyse_sql
from governance.sql.table_access import tables_not_granted
from governance.visibility import DbAccess, db_access
from owlai.tool_names import RUN_SQL

logger = logging.getLogger(__name__)


class RunSql:
    name = RUN_SQL
    resource_kind = ResourceKind.DB_CONNECTION
    target_argument = "connection"
    result_key = "connection"
    # The same words whether the connection does not exist, is not granted,
    # or is hidden from this turn's tier, and without echoing the name: a
    # refusal must not confirm that a hidden resource exists.
    unavailable = Reason(gettext_noop("no connection of that name is available"))
    failed = Reason(gettext_noop("query failed"))
    policy = ALWAYS_ALLOW
    run_state = None  # nothing kept between its calls

    def definition(self, offer: Offer) -> dict | None:
        connections = offer.resources.connections
        if not connections:
            return None
        return {
            "type": "function",
            "function": {
                "name": RUN_SQL,
                "description": (
                    "Run one read-only SQL query on a company database and get the rows back. "
                    "Use the database's own SQL dialect. Prefer aggregating in SQL over fetching rows. "
                    "Results are capped; personal data columns should not be selected without need."
                ),
                "parameters": {
                    "type": "object",
                    "properties": {
                        "connection": {
                            "type": "string",
                            "description": "Name of the database connection.",
                            "enum": [c.name for c in connections],
                        },
                        "sql": {"type": "string", "description": "A single SELECT (or WITH ... SELECT) statement."},
                    },
                    "required": ["connection", "sql"],
                },
            },
        }

    def audit_statement(self, args: dict) -> str:
        # The SQL as the model wrote it: tokens, never the originals.
        sql = args.get("sql")
        return sql if isinstance(sql, str) else ""

    def summary(self, args: dict) -> dict[str, str]:
        return summary_fields(args, resource="connection", inputs=("sql",))

    def resolve(self, ctx, name: str) -> Target | None:
        access = db_access(user_id=ctx.user_id, tier=ctx.tier, connection_name=name)
        if access is None:
            return None
        return Target(name=access.connection.name, pk=access.connection.pk, resource=access)

    def check(self, call: Call) -> None:
        access: DbAccess = call.target.resource
        connection, sql = access.connection, call.statement
        if not sql.strip():
            raise Refused(Reason(gettext_noop("sql is empty")))
        dialect = connection.sql_dialect
        verdict = analyse_sql(sql, dialect)
        call.tables = verdict.tables
        if not verdict.allowed:
            raise Refused(Reason(gettext_noop("not a read-only query: %(reason)s"), reason=Phrase(verdict.reason)))
        missing = tables_not_granted(call.tables, access.scope, dialect)
        if missing:
            raise Refused(Reason(gettext_noop("no permission to read table(s): %(tables)s"), tables=", ".join(missing)))
        executed = _reidentified(sql, dialect, call.vault, call.tables)
        call.state.update(executed=executed, dsn=db_connection_dsn(connection=connection))

    def prepare(self, call: Call) -> None:
        access: DbAccess = call.target.resource
        connection = access.connection
        _require_read_only_account(connection.engine, call.state["dsn"])
        # Free-text columns are taint (any function over them masks); their
        # types come from the classifications, or from the database's catalog
        # (after the attempt row and the account check) where none is stored.
        schema = tainted_schema(connection, access.classification_revision, catalog=True)
        executed: Reidentified = call.state["executed"]
        # Masking hides values, not how many rows came back: a query whose
        # row count personal data decides is refused before it runs.
        if rows_read_pii(executed.sql, connection.sql_dialect, schema, tainted_literals=executed.substituted):
            raise Refused(
                Reason(
                    gettext_noop(
                        "personal data would decide how many rows this query returns; count or aggregate instead"
                    )
                )
            )
        call.state["schema"] = schema

    def run(self, call: Call) -> Output:
        connection: DbConnection = call.target.resource.connection
        executed: Reidentified = call.state["executed"]
        sql, dialect = call.statement, connection.sql_dialect
        try:
            result = execute_readonly(
                engine=connection.engine,
                dsn=call.state["dsn"],
                sql=executed.sql,
                row_cap=connection.row_cap,
                timeout_ms=connection.statement_timeout_ms,
                schemas=connection_schemas(connection),
                # An error may quote back the names of the tables this person
                # may read, never the statement's words nor other tables' names
                # (`column "memo" does not exist` would confirm an ungranted column).
                allowed_words=lambda: schema_words(
                    _granted(call.state["schema"], call.target.resource, dialect), dialect
                ),
            )
        except (QueryError, GovernanceError) as exc:
            raise ToolFailed(str(exc)) from exc
        call.state["columns"] = result.columns
        payload = {"columns": _labels(result.columns, executed, sql, dialect), "rows": result.rows}
        if result.truncated:
            payload["note"] = gettext("only the first %(cap)s rows are shown; aggregate in SQL instead") % {
                "cap": len(result.rows)
            }
        facts = {"row_count": len(result.rows), "truncated": result.truncated}
        if result.cut_cells:
            facts["cells_cut"] = result.cut_cells  # each cut cell ends with a marker saying how much
        return Output(
            payload=payload,
            facts=facts,
            row_count=len(result.rows),
            items="rows",
        )

    def lineage(self, call: Call, output: Output) -> Lineage:
        access: DbAccess = call.target.resource
        executed: Reidentified = call.state["executed"]
        kinds, origins, literal, own, derived = column_kinds(
            access.connection,
            executed.sql,
            call.state["columns"],
            schema=call.state["schema"],
            tainted_literals=executed.substituted,
        )
        return Lineage(
            key="rows",
            kinds=kinds,
            origins=origins,
            record=_stats_recorder(access.connection),
            literal=literal,
            own_columns=own,
            own_values=own_literals(call.statement, access.connection.sql_dialect) if own else frozenset(),
            derived=derived,
        )


def _stats_recorder(connection: DbConnection):
    def record(counts: MaskCounts) -> None:
        try:
            mask_stats_record(connection_id=connection.pk, counts=counts)
        except Exception:
            logger.exception("masking statistics could not be recorded")  # statistics only; masking already done

    return record


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
        raise Refused(Reason("%(error)s", error=Phrase(str(error)))) from error
    if executed.changed:
        again = analyse_sql(executed.sql, dialect)
        if not again.allowed or set(again.tables) != set(tables):
            raise Refused(
                Reason(
                    gettext_noop(
                        "the query with the masked values filled in did not pass the checks; compare with the value "
                        "differently (e.g. without a trailing backslash)"
                    )
                )
            )
    return executed


# Account hygiene is checked once per DSN per process for this long: a DBA
# who grants superuser later is caught within minutes, without a query per call.
_ACCOUNT_CHECK_SECONDS = 300
_ACCOUNT_CHECKS: dict[str, tuple[float, tuple[str, ...]]] = {}


def _granted(schema: dict, access: DbAccess, dialect: str) -> dict:
    """The part of the analysed schema whose tables the person may read."""
    return {
        table: columns for table, columns in schema.items() if not tables_not_granted([table], access.scope, dialect)
    }


def _require_read_only_account(engine: str, dsn: str) -> None:
    key = hashlib.sha256(f"{engine}\x00{dsn}".encode()).hexdigest()
    checked = _ACCOUNT_CHECKS.get(key)
    if checked is None or time.monotonic() - checked[0] > _ACCOUNT_CHECK_SECONDS:
        try:
            risks = tuple(account_risks(engine=engine, dsn=dsn))
        except Unreachable as error:
            # Nothing ran, as for a refusal, but the platform refused
            # nothing: the server could not be reached (a failed call).
            raise ToolFailed(str(error)) from error
        except QueryError as error:
            raise Refused(
                Reason(
                    gettext_noop("the connection's account could not be checked (%(error)s)"),
                    error=error.error_class or "error",
                )
            ) from error
        _ACCOUNT_CHECKS[key] = checked = (time.monotonic(), risks)
    if checked[1]:
        raise Refused(
            Reason(
                gettext_noop(
                    "the connection's database account may do more than read (%(risks)s); "
                    "an admin must give it an account with only SELECT on its schemas"
                ),
                risks=", ".join(checked[1]),
            )
        )


# (connection id, classification revision) -> the schema with its free text
# marked; bounded like governance.schema_analysis's cache (revision tokens
# never come back, so an entry is current or never hit again).
_SCHEMA_CACHE: dict[tuple[int, str], dict[str, dict[str, str | None]]] = {}
_SCHEMA_CACHE_MAX = 256


def tainted_schema(connection: DbConnection, revision: str | None, *, catalog: bool = False) -> dict:
    """The analysed schema (table -> column -> kind, in column order) with
    its free-text columns marked for lineage taint, read in one query and
    cached per classification revision. Types are the stored ones; with
    `catalog`, columns stored without a type get the database catalog's.
    Where no type is known the column counts as free text (when in doubt,
    taint). The returned dicts are shared: callers must not change them."""
    key = (connection.pk, revision) if revision else None
    cached = _SCHEMA_CACHE.get(key) if key else None
    if cached is not None:
        return cached
    schema: dict[str, dict[str, str | None]] = {}
    types: dict[tuple[str, str], str] = {}
    # In introspection order (rows are created in the table's column order),
    # which is the order `SELECT *` returns them in.
    rows = ColumnClassification.objects.filter(connection=connection).order_by("pk")
    structured: set[tuple[str, str]] = set()
    fields = ("table_name", "column_name", "pii_kind", "data_type", "reason")
    for table, column, kind, data_type, reason in rows.values_list(*fields):
        schema.setdefault(table, {})[column] = kind or None
        if data_type:
            types[(table, column)] = data_type
        if reason == REASONS["structured"]:
            structured.add((table, column))
    complete = not unknown_types(schema, types)
    if catalog and not complete:
        try:
            read = {(table, column): data_type for table, column, data_type in connection_columns(connection)}
        except Exception:
            logger.warning("column types could not be read; unknown types count as free text", exc_info=True)
        else:
            types, complete = {**read, **types}, True
    marked = with_free_text(schema, types, structured)
    if key and complete:
        if len(_SCHEMA_CACHE) >= _SCHEMA_CACHE_MAX:
            _SCHEMA_CACHE.clear()
        _SCHEMA_CACHE[key] = marked
    return marked


def connection_schemas(connection: DbConnection) -> tuple[str, ...]:
    """The schemas the connection's unqualified names resolve to (PostgreSQL's
    pinned search_path): exactly those a whole-database grant covers."""
    return configured_schemas(connection.sql_dialect, connection.schemas)


def column_kinds(
    connection: DbConnection,
    sql: str,
    columns: list[str],
    *,
    schema: dict[str, dict[str, str | None]],
    tainted_literals: dict[str, str] | None = None,
) -> tuple[dict[int, str], dict[int, tuple[str, str]], frozenset[int], frozenset[int]]:
    """Which output columns are masked whole, where each came from, which
    are only the model's own literals (returned as written: matching them
    against the vault would confirm the model's guesses), and which mix
    literals with data that is neither personal nor free text (there the
    model's own literals are left as written). Columns
    derived from personal data (lineage taint, including the originals
    substituted into `sql`, the statement that ran) are masked whole.
    Lineage failures mask more, never less."""
    predicted = classify_outputs(
        sql,
        connection.sql_dialect,
        schema,
        n_columns=len(columns),
        tainted_literals=tainted_literals,
    )
    outputs = aligned_outputs(predicted, columns)
    kinds = {o.index: o.pii_kind for o in outputs if o.pii_kind}
    if len(outputs) != len(columns):
        # No usable lineage at all: mask every column when the connection has
        # any personal-data column (when in doubt, mask).
        doubt = token_kind(next((kind for table in schema.values() for kind in table.values() if kind), None))
        if doubt:
            kinds = dict.fromkeys(range(len(columns)), doubt)
    origins = {o.index: o.sources[0] for o in outputs if o.sources}
    # Literal columns only where lineage and the result agree column for column.
    literal = frozenset(o.index for o in outputs if o.literal and o.index not in kinds)
    own = frozenset(
        o.index
        for o in outputs
        if o.index not in kinds
        and o.index not in literal
        and not any(schema.get(table, {}).get(column) for table, column in o.sources)
    )
    if outputs is not predicted or len(outputs) != len(columns):
        literal = own = frozenset()
    # Masked columns that are not a schema column passed on unchanged: their
    # cells were computed, each gets its own token (DbVault.derived_tokens).
    unchanged = {o.index for o in outputs if o.unchanged} if outputs is predicted else set()
    derived = frozenset(index for index in kinds if index not in unchanged)
    return kinds, origins, literal, own, derived


_LITERAL_TOKENS = ("STRING", "NATIONAL_STRING", "RAW_STRING", "HEREDOC_STRING")


def own_literals(sql: str, dialect: str) -> frozenset[str]:
    """The string literals the model wrote in `sql` (its text, before any
    token is re-identified), normalised as known values are matched."""
    from sqlglot.tokens import TokenType

    from governance.pii.known_values import MIN_VALUE_CHARS, normalised
    from governance.sql.dialects import parsed

    types = {getattr(TokenType, name) for name in _LITERAL_TOKENS if hasattr(TokenType, name)}
    try:
        # The tokens the guard read this statement from (one tokenization per text).
        tokens = parsed(dialect, sql).tokens
    except Exception:
        return frozenset()  # nothing is left unmasked
    values = (normalised(t.text) for t in tokens if t.token_type in types and not TOKEN_PATTERN.search(t.text))
    return frozenset(v for v in values if len(v) >= MIN_VALUE_CHARS)


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
    """The rows of one result masked as the shaping stage masks them (for
    callers outside a tool call, e.g. bench/executor.py)."""
    if schema is None:
        schema = tainted_schema(connection, revision)
    kinds, origins, literal, _own, derived = column_kinds(
        connection, sql, columns, schema=schema, tainted_literals=tainted_literals
    )
    counts = MaskCounts()
    if derived:
        from chat.executor.shaping import derived_cells

        rows, kinds, literal = derived_cells(rows, kinds, origins, literal, derived, vault, counts)
    masked = mask_with(
        vault,
        lambda v, c: mask_rows(
            rows, column_kinds=kinds, column_origins=origins, vault=v, counts=c, known=known, literal_columns=literal
        ),
        counts,
    )
    if counts:
        _stats_recorder(connection)(counts)
    return masked


def aligned_outputs(outputs: list, columns: list[str]) -> list:
    """Lineage predicts the output columns; the database says what came back.
    When the two disagree (e.g. a schema that changed since the analysis),
    map by name, and where a name is unknown or ambiguous mask the column if
    the query touched any personal data at all (when in doubt, mask)."""
    if [o.name.lower() for o in outputs] == [c.lower() for c in columns]:
        return outputs
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
