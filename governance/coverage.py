"""How well a connection's columns are classified, for the admin's coverage page.

Three gaps, each a reason a column's personal data may reach a result
unmasked or be masked for the wrong reason:

* columns the analysis never looked at (in the database now, no
  classification row): only the format detectors guard them;
* suggestions nobody confirmed: the analysis' guess, which a re-scan may
  change;
* columns classified "not personal data" whose values the detectors keep
  masking (the masking statistics): likely misclassified.

Reads metadata only: the database's column list, never a value.

The masking statistics name a column only when the query's lineage was
traced (it read a personal-data column); detector hits in other results are
counted without a column. The page lists the first kind and counts the
second, so a reader knows what the list cannot show.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Sum
from django.utils import timezone

from governance.models import ClassificationState, ColumnClassification, DbConnection, MaskStat

MASK_STATS_DAYS = 30
TOP_MASKED = 50


@dataclass(frozen=True)
class MaskedColumn:
    table: str
    column: str
    total: int
    kinds: dict[str, int]  # detector kind -> masked values
    classified: bool  # a classification row says "none"; False: never analysed


@dataclass
class Coverage:
    connection: DbConnection
    columns_read: bool  # False: the live column list could not be read (see error)
    error: str = ""
    live_columns: int = 0
    classified_columns: int = 0
    never_analysed: list[tuple[str, str, str]] = field(default_factory=list)  # (table, column, type)
    unconfirmed: list[ColumnClassification] = field(default_factory=list)
    masked_while_none: list[MaskedColumn] = field(default_factory=list)
    masked_without_column: int = 0  # detector hits not traced to a column
    days: int = MASK_STATS_DAYS


def classification_coverage(*, connection: DbConnection, live_columns=None, error: str = "") -> Coverage:
    """The coverage of `connection`. `live_columns`: (table, column, type) of
    the database now (schema_analysis.connection_columns), or None when they
    could not be read (`error` says why): the other two gaps still show."""
    classified = {
        (c.table_name, c.column_name): c
        for c in ColumnClassification.objects.filter(connection=connection).order_by("table_name", "column_name")
    }
    coverage = Coverage(connection=connection, columns_read=live_columns is not None, error=error)
    coverage.classified_columns = len(classified)
    if live_columns is not None:
        coverage.live_columns = len(live_columns)
        coverage.never_analysed = sorted(
            (table, column, data_type) for table, column, data_type in live_columns if (table, column) not in classified
        )
    coverage.unconfirmed = [c for c in classified.values() if c.state == ClassificationState.SUGGESTED]
    since = timezone.localdate() - timedelta(days=MASK_STATS_DAYS)
    recent = MaskStat.objects.filter(connection_id_value=connection.pk, day__gte=since)
    untraced = recent.filter(table_name="", column_name="").aggregate(total=Sum("count"))["total"]
    coverage.masked_without_column = untraced or 0
    stats = (
        recent.exclude(table_name="")
        .exclude(column_name="")
        .values_list("table_name", "column_name", "pii_kind")
        .annotate(total=Sum("count"))
    )
    kinds: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for table, column, kind, total in stats:
        kinds[(table, column)][kind] = total
    masked = []
    for (table, column), by_kind in kinds.items():
        row = classified.get((table, column))
        if row is not None and row.pii_kind:
            continue  # classified with a kind: masked whole, as it should be
        masked.append(MaskedColumn(table, column, sum(by_kind.values()), dict(by_kind), row is not None))
    masked.sort(key=lambda m: (-m.total, m.table, m.column))
    coverage.masked_while_none = masked[:TOP_MASKED]
    return coverage
