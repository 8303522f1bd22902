"""Schema analysis: which columns of a customer database hold personal data.

Classification is by rule, never by a model: the column name
(Korean and English hints) and a bounded sample of values run through the
format detectors. A re-scan never overrides an admin's manual classification.
The analysis reads through the read-only execution layer and, being no one's
question, writes no tool-call audit rows; starting it is an admin event.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from governance.models import (
    ClassificationSource,
    ClassificationState,
    ColumnClassification,
    DbConnection,
    MaskStat,
    PiiKindChoice,
)
from governance.pii import kinds
from governance.pii.detectors import detect
from governance.services import GovernanceError, db_connection_account_check, db_connection_dsn
from governance.sql.database_code import database_code
from governance.sql.dialects import configured_schemas
from governance.sql.execute import execute_readonly
from owlai.korean import localized_particles

logger = logging.getLogger(__name__)

SAMPLE_SIZE = 50
# A column is personal data when at least this share of sampled values is
# (wholly) one detected kind. Free-text columns with the odd phone number stay
# unclassified: the detectors catch those values at query time anyway.
SAMPLE_SHARE = 0.3

# Column-name hints (governance.pii.kinds: each kind's record), matched
# against the name's parts (split on _ - . and camelCase) or, for Korean, as
# substrings; names are tried last (``email_address`` is an e-mail).
NAME_HINTS = kinds.NAME_HINTS
# `product_name`, `city_name`, `file_name` are not people's names.
NOT_PERSON_NAME = {
    "product",
    "item",
    "city",
    "file",
    "table",
    "column",
    "company",
    "brand",
    "category",
    "store",
    "shop",
    "branch",
    "dept",
    "department",
    "team",
    "bank",
    "country",
    "region",
    "model",
    "host",
}
# Parts that turn e.g. `email_count` or `phone_verified` into non-personal data.
NOT_VALUE = {"count", "cnt", "verified", "type", "yn", "flag", "at", "date", "id", "seq", "no_consent"}


@dataclass(frozen=True)
class ColumnVerdict:
    pii_kind: str  # "" = not personal data
    confidence: float
    reason: str


def _name_parts(column: str) -> list[str]:
    spaced = re.sub(r"([a-z])([A-Z])", r"\1_\2", column)
    return [p for p in re.split(r"[_\-.\s]+", spaced.lower()) if p]


def kind_from_name(column: str) -> str | None:
    parts = _name_parts(column)
    joined = "".join(parts)
    for kind, english, korean in NAME_HINTS:
        if any(k in column for k in korean):
            return kind
        if not (any(p in english for p in parts) or joined in english):
            continue
        if NOT_VALUE & set(parts[1:]) or parts[-1] in NOT_VALUE:
            return None
        if kind == "name" and NOT_PERSON_NAME & set(parts):
            continue
        if kind == "account" and {"id", "type", "status"} & set(parts):
            continue
        return kind
    return None


def kind_from_samples(values: list[str]) -> tuple[str | None, float]:
    """The kind most sampled values wholly are, with its share."""
    non_empty = [v.strip() for v in values if v and v.strip()]
    if not non_empty:
        return None, 0.0
    kinds: Counter[str] = Counter()
    for value in non_empty:
        found = detect(value)
        if len(found) == 1 and found[0].start == 0 and found[0].end == len(value):
            kinds[found[0].kind.value] += 1
    if not kinds:
        return None, 0.0
    kind, hits = kinds.most_common(1)[0]
    return kind, hits / len(non_empty)


# Why a column got its classification. Stored in English (the record does
# not change with the reader's language) and shown translated (reason_text).
REASONS = {
    "mixed": gettext_noop("values look like %(found)s; name suggests %(named)s"),
    "values": gettext_noop("%(share)s of sampled values are %(kind)s"),
    "name": gettext_noop("column name suggests %(kind)s"),
    "none": gettext_noop("no personal data found in name or sampled values"),
    # Not free text (governance.pii.free_text): functions over it stay readable.
    "structured": gettext_noop("no personal data found; sampled values are single short words (codes, dates)"),
    "set": gettext_noop("set by an admin"),
    "confirmed": gettext_noop("confirmed by an admin"),
}


def reason_text(reason: str) -> str:
    """A stored reason in the reader's language, kinds in words; a reason
    of another form as it is."""
    from governance.models import PiiKindChoice

    labels = dict(PiiKindChoice.choices)
    for template in REASONS.values():
        pattern = re.sub(r"%\\?\(([a-z]+)\\?\)s", r"(?P<\1>.+?)", re.escape(template))
        match = re.fullmatch(pattern, reason)
        if match:
            params = {key: str(labels.get(value, value)) for key, value in match.groupdict().items()}
            # The catalogue writes both particle forms after a value ("을(를)"):
            # the value decides which one reads right (이름을, 주소를).
            return localized_particles(_(template) % params if params else _(template))
    return reason


def classify_column(column: str, samples: list[str]) -> ColumnVerdict:
    by_name = kind_from_name(column)
    by_values, share = kind_from_samples(samples)
    if by_values and share >= SAMPLE_SHARE:
        if by_name and by_name != by_values:
            reason = REASONS["mixed"] % {"found": by_values, "named": by_name}
            return ColumnVerdict(by_values, round(share, 2), reason)
        confidence = min(1.0, share + (0.2 if by_name == by_values else 0.0))
        reason = REASONS["values"] % {"share": f"{share:.0%}", "kind": by_values}
        return ColumnVerdict(by_values, round(confidence, 2), reason)
    if by_name:
        return ColumnVerdict(by_name, 0.6, REASONS["name"] % {"kind": by_name})
    structured = _structured(samples)
    return ColumnVerdict("", round(1.0 - share, 2), REASONS["structured" if structured else "none"])


# Longest sampled value of a column that is not free text.
STRUCTURED_MAX_CHARS = 32


# A date, a time or both: digits and their separators only.
_DATE_TIME = re.compile(r"[\d :./+\-TZ]+")


def _structured(samples: list[str]) -> bool:
    """Do the sampled values look like codes, dates or single words (short,
    no whitespace unless a date and time, no detector hit inside)?
    Otherwise the column is free text: lineage masks anything computed from
    it."""
    values = [v for v in samples if v]
    return bool(values) and all(
        len(v) <= STRUCTURED_MAX_CHARS
        and (not any(c.isspace() for c in v) or _DATE_TIME.fullmatch(v))
        and not detect(v)
        for v in values
    )


# --- introspection ------------------------------------------------------------------

_COLUMNS_SQL = {
    "sqlite": (
        "SELECT m.name, p.name, p.type FROM sqlite_master m JOIN pragma_table_info(m.name) p "
        "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.cid"
    ),
    # The configured schemas only (the pinned search_path): what a whole-database grant covers.
    "postgresql": (
        "SELECT CASE WHEN table_schema = 'public' THEN table_name ELSE table_schema || '.' || table_name END, "
        "column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = ANY(current_schemas(false)) ORDER BY 1, ordinal_position"
    ),
    "mysql": (
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position"
    ),
}


def _quote_identifier(name: str, engine: str) -> str:
    quote = "`" if engine == "mysql" else '"'
    return ".".join(quote + part.replace(quote, quote * 2) + quote for part in name.split("."))


def _read_columns(connection: DbConnection, dsn: str) -> list[tuple]:
    return execute_readonly(
        engine=connection.engine,
        dsn=dsn,
        sql=_COLUMNS_SQL[connection.engine],
        row_cap=20_000,
        timeout_ms=connection.statement_timeout_ms,
        schemas=configured_schemas(connection.sql_dialect, connection.schemas),
    ).rows


def connection_columns(connection: DbConnection) -> list[tuple[str, str, str]]:
    """(table, column, data type) of every column the analysis would look at,
    names lower-cased as the analysis stores them; metadata only, no values.
    Refuses (GovernanceError) a DSN whose account may do more than read;
    QueryError when the database cannot be reached."""
    dsn = db_connection_dsn(connection=connection)
    db_connection_account_check(engine=connection.engine, dsn=dsn)
    return [(str(t).lower(), str(c).lower(), str(d or "")) for t, c, d in _read_columns(connection, dsn)]


def analyse_connection(connection: DbConnection) -> dict[tuple[str, str], tuple[str, ColumnVerdict, int]]:
    """(table, column) -> (data type, verdict, sample size), read-only.
    Refuses (GovernanceError) a DSN whose account may do more than read."""
    dsn = db_connection_dsn(connection=connection)
    db_connection_account_check(engine=connection.engine, dsn=dsn)
    timeout = connection.statement_timeout_ms
    schemas = configured_schemas(connection.sql_dialect, connection.schemas)
    columns = _read_columns(connection, dsn)
    results = {}
    for table, column, data_type in columns:
        sql = (
            f"SELECT {_quote_identifier(column, connection.engine)} FROM {_quote_identifier(table, connection.engine)}"
            f" WHERE {_quote_identifier(column, connection.engine)} IS NOT NULL LIMIT {SAMPLE_SIZE}"
        )
        try:
            sample = execute_readonly(
                engine=connection.engine, dsn=dsn, sql=sql, row_cap=SAMPLE_SIZE, timeout_ms=timeout, schemas=schemas
            ).rows
        except Exception:
            logger.warning("could not sample %s.%s; classifying by name only", table, column, exc_info=True)
            sample = []
        values = [str(row[0]) for row in sample if not isinstance(row[0], (bytes, bytearray, memoryview))]
        results[(str(table).lower(), str(column).lower())] = (
            str(data_type or ""),
            classify_column(str(column), values),
            len(values),
        )
    return results


@transaction.atomic
def schema_analysis_apply(*, connection: DbConnection, results: dict) -> int:
    """Store the verdicts; an admin's classifications (manual, or confirmed
    suggestions) are never overwritten."""
    existing = {(c.table_name, c.column_name): c for c in ColumnClassification.objects.filter(connection=connection)}
    changed = 0
    for (table, column), (data_type, verdict, sample_size) in results.items():
        current = existing.get((table, column))
        # An admin's decision (set by hand, or a suggestion confirmed) stands.
        if current is not None and (
            current.source == ClassificationSource.MANUAL or current.state == ClassificationState.CONFIRMED
        ):
            continue
        values = {
            "data_type": data_type[:100],
            "pii_kind": verdict.pii_kind,
            "source": ClassificationSource.AUTO,
            "state": ClassificationState.SUGGESTED,
            "confidence": verdict.confidence,
            "sample_size": sample_size,
            "reason": verdict.reason[:300],
            "classified_by_id": None,
            "classified_by_username": "",
        }
        ColumnClassification.objects.update_or_create(
            connection=connection, table_name=table, column_name=column, defaults=values
        )
        changed += 1
    return changed


def schema_analysis_run(*, connection_id: int) -> int:
    """Analyse and store; its end (finished with the count, or failed with
    why) is an audit event, which the connection's admin page reads: an
    analysis runs in a worker, after the admin's page has answered."""
    connection = DbConnection.objects.get(pk=connection_id)
    try:
        changed = schema_analysis_apply(connection=connection, results=analyse_connection(connection))
        database_code_record(connection=connection)
    except Exception as error:
        _analysis_end(connection, failed=True, details={"error": f"{type(error).__name__}: {error}"[:300]})
        raise
    _analysis_end(connection, failed=False, details={"columns": changed})
    return changed


def _analysis_end(connection: DbConnection, *, failed: bool, details: dict) -> None:
    from audit.events import audit_event_write
    from audit.models import EventKind, ResourceKind

    with transaction.atomic():
        audit_event_write(
            kind=EventKind.ANALYSIS_FAILED if failed else EventKind.ANALYSIS_FINISHED,
            resource_kind=ResourceKind.DB_CONNECTION,
            resource_id=connection.pk,
            details={"connection": connection.name, **details},
        )


def database_code_record(*, connection: DbConnection) -> list[dict] | None:
    """List the database's own functions, operators and casts in the
    connection's schemas onto the connection (governance.sql.database_code),
    for the admin. A catalog that cannot be read leaves the last listing."""
    dsn = db_connection_dsn(connection=connection)
    try:
        entries = database_code(
            engine=connection.engine,
            dsn=dsn,
            schemas=configured_schemas(connection.sql_dialect, connection.schemas),
            timeout_ms=connection.statement_timeout_ms,
        )
    except Exception:
        logger.warning("could not list the database's own code for connection %s", connection.pk, exc_info=True)
        return None
    DbConnection.objects.filter(pk=connection.pk).update(database_code=entries)
    connection.database_code = entries
    return entries


# (connection id, revision token) -> schema. Tokens never come back (see
# ClassificationRevision), so an entry is either current or never hit again;
# the bound only keeps dead entries from piling up.
_SCHEMA_CACHE: dict[tuple[int, str], dict[str, dict[str, str | None]]] = {}
_SCHEMA_CACHE_MAX = 256


def classification_schema(*, connection: DbConnection, revision: str | None = None) -> dict[str, dict[str, str | None]]:
    """The analysed schema for lineage: table -> column -> PII kind (or None).

    `revision`: the ClassificationRevision token read together with the
    connection (governance.visibility.db_access). With it, the schema is
    cached per (connection, token) and the next edit, which changes the
    token, takes effect on the next query. The returned dicts are shared:
    callers must not change them."""
    if not revision:
        return _load_classification_schema(connection)
    key = (connection.pk, revision)
    schema = _SCHEMA_CACHE.get(key)
    if schema is None:
        schema = _load_classification_schema(connection)
        if len(_SCHEMA_CACHE) >= _SCHEMA_CACHE_MAX:
            _SCHEMA_CACHE.clear()
        _SCHEMA_CACHE[key] = schema
    return schema


def _load_classification_schema(connection: DbConnection) -> dict[str, dict[str, str | None]]:
    schema: dict[str, dict[str, str | None]] = {}
    # In introspection order (rows are created in the table's column order),
    # which is the order `SELECT *` returns them in.
    rows = ColumnClassification.objects.filter(connection=connection).order_by("pk")
    for table, column, kind in rows.values_list("table_name", "column_name", "pii_kind"):
        schema.setdefault(table, {})[column] = kind or None
    return schema


def mask_stats_record(*, connection_id: int | None, counts) -> None:
    """Add today's masked-value counts per (table, column, kind): one upsert
    statement for all of them (this runs after every result with personal
    data; a read-modify-write per key cost a round trip each)."""
    from django.db import connection as db
    from django.db.models import F

    today = timezone.localdate()
    if connection_id is not None and counts:
        # ON CONFLICT needs a non-NULL connection id: NULLs never conflict.
        table = MaskStat._meta.db_table
        day = db.ops.adapt_datefield_value(today)
        rows = [(connection_id, t, c, k, day, n) for (t, c, k), n in counts.items()]
        placeholders = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(rows))
        with db.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (connection_id_value, table_name, column_name, pii_kind, day, count)"
                f" VALUES {placeholders}"
                " ON CONFLICT (connection_id_value, table_name, column_name, pii_kind, day)"
                f" DO UPDATE SET count = {table}.count + excluded.count",
                [value for row in rows for value in row],
            )
        return
    for (table, column, kind), count in counts.items():
        updated = MaskStat.objects.filter(
            connection_id_value=connection_id, table_name=table, column_name=column, pii_kind=kind, day=today
        ).update(count=F("count") + count)
        if not updated:
            try:
                with transaction.atomic():
                    MaskStat.objects.create(
                        connection_id_value=connection_id,
                        table_name=table,
                        column_name=column,
                        pii_kind=kind,
                        day=today,
                        count=count,
                    )
            except Exception:  # lost a race with another worker: add to its row
                MaskStat.objects.filter(
                    connection_id_value=connection_id, table_name=table, column_name=column, pii_kind=kind, day=today
                ).update(count=F("count") + count)


def schema_analysis_start(*, connection: DbConnection, request=None) -> None:
    """Record who started an analysis of which connection, then run it in a
    worker (in-process in the embedded profile)."""
    from audit.events import audit_event_write
    from audit.models import EventKind, ResourceKind
    from governance.tasks import analyse_schema

    with transaction.atomic():
        audit_event_write(
            kind=EventKind.ANALYSIS_STARTED,
            request=request,
            resource_kind=ResourceKind.DB_CONNECTION,
            resource_id=connection.pk,
            details={"connection": connection.name},
        )
        transaction.on_commit(lambda: analyse_schema.delay(connection.pk))


def column_classification_set(*, classification: ColumnClassification, pii_kind: str, request=None):
    """An admin's classification of one column (the change form)."""
    column_classification_set_kind(classifications=[classification], pii_kind=pii_kind, request=request)
    classification.refresh_from_db()
    return classification


@transaction.atomic
def column_classification_set_kind(
    *, classifications: Iterable[ColumnClassification], pii_kind: str, request=None
) -> int:
    """Set the kind of each column (`""`: not personal data) as an admin's
    decision: manual and confirmed, so re-scans keep it. Each changed column
    is one classification_set event, written in this transaction (not recorded,
    not changed). Takes effect on the next query. Returns the columns changed.

    This is also how a classification is withdrawn: set to none, on the
    record, never deleted (a deleted row would unmask the column silently)."""
    if pii_kind not in ("", *PiiKindChoice.values):
        raise GovernanceError(_("Unknown personal data kind: %(kind)s") % {"kind": pii_kind})
    return _decide(classifications, request=request, kind=lambda _current: pii_kind)


@transaction.atomic
def column_classification_confirm(*, classifications: Iterable[ColumnClassification], request=None) -> int:
    """Confirm the analysis' suggestions as they are (kind unchanged): the
    admin's decision from now on, kept by re-scans; one classification_set event
    per column confirmed. Columns already confirmed are left alone."""
    suggested = [c for c in classifications if c.state == ClassificationState.SUGGESTED]
    return _decide(suggested, request=request, kind=lambda current: current.pii_kind)


def _decide(classifications, *, request, kind) -> int:
    from audit.events import audit_event_write
    from audit.models import EventKind, ResourceKind

    user = getattr(request, "user", None)
    signed = user is not None and user.is_authenticated
    ids = [c.pk for c in classifications]
    changed = 0
    # Locked and re-read: the decision and its record describe the row as it
    # was when the admin's change landed, not as the admin's page showed it.
    rows = ColumnClassification.objects.select_for_update().select_related("connection").filter(pk__in=ids)
    for row in rows.order_by("pk"):
        after = kind(row)
        before_kind, before_state = row.pii_kind, row.state
        if (before_kind, before_state, row.source) == (
            after,
            ClassificationState.CONFIRMED,
            ClassificationSource.MANUAL,
        ):
            continue
        row.pii_kind = after
        row.source = ClassificationSource.MANUAL
        row.state = ClassificationState.CONFIRMED
        if after != before_kind:
            row.reason = REASONS["set"]
        elif row.reason != REASONS["structured"]:  # kept: it says the column is not free text
            row.reason = REASONS["confirmed"]
        row.classified_by_id = user.pk if signed else None
        row.classified_by_username = user.get_username() if signed else ""
        row.save()
        audit_event_write(
            kind=EventKind.CLASSIFICATION_SET,
            request=request,
            resource_kind=ResourceKind.COLUMN_CLASSIFICATION,
            resource_id=row.pk,
            details={
                "setting": f"classification of {row.connection.name}.{row.table_name}.{row.column_name}",
                "before": before_kind or None,
                "after": after or None,
                "state_before": before_state,
                "state_after": row.state,
            },
        )
        changed += 1
    return changed


def analysed_tables(*, connection_ids: Iterable[int] | None = None) -> dict[int, list[str]]:
    """connection id -> the tables its schema analysis found (sorted): what a
    table grant can name, as the role admin offers it."""
    rows = ColumnClassification.objects.all()
    if connection_ids is not None:
        rows = rows.filter(connection_id__in=list(connection_ids))
    tables: dict[int, list[str]] = {}
    for connection_id, table in rows.values_list("connection_id", "table_name").distinct().order_by("table_name"):
        tables.setdefault(connection_id, []).append(table)
    return tables
