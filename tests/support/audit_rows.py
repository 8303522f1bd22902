"""A placeholder audit row with an explicit `created_at`, for raw INSERTs:
auto_now_add would overwrite the time, and the database guards refuse the
UPDATE that could set it afterwards."""

from __future__ import annotations

import itertools
from datetime import timedelta

from django.db import connection, models
from django.utils import timezone

from audit.models import AuditDigest, AuditEvent, ToolCallAudit, ToolCallOutcome

MODEL_BY_TABLE = {m._meta.db_table: m for m in (ToolCallAudit, ToolCallOutcome, AuditEvent, AuditDigest)}
# A link to another audit row (an outcome's attempt id) is unique per row.
_links = itertools.count(10**12)


def placeholder_row(table: str, *, days_old: float = 0) -> tuple[list[str], list]:
    """(column names, database-ready values) of a row `days_old` days old."""
    model = MODEL_BY_TABLE[table]
    columns, values = [], []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        if field.name == "created_at":
            value = timezone.now() - timedelta(days=days_old)
        elif field.is_relation:
            value = next(_links)
        elif field.has_default():
            value = field.get_default()
        elif field.null:
            value = None
        elif isinstance(field, models.IntegerField | models.FloatField):
            value = 1
        else:
            value = "test"
        columns.append(field.column)
        values.append(field.get_db_prep_save(value, connection))
    return columns, values
