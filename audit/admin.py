"""Read-only audit screens: no add, change or delete anywhere.

Built for big tables: no exact COUNT(*) (`show_full_result_count = False`),
filters that are text inputs instead of DISTINCT scans, indexes behind every
filter (see the migrations), and CSV export of the current filter capped at
OWLAI_AUDIT_EXPORT_MAX_ROWS rows.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import path
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _lazy

from audit.admin_views import AuditedViewsMixin
from audit.csv_export import stream_csv
from audit.events import audit_event_write
from audit.models import (
    FINAL_OUTCOMES,
    NO_OUTCOME,
    NO_OUTCOME_LABEL,
    AuditEvent,
    EventKind,
    Outcome,
    SqlExecution,
    ToolCallAudit,
)
from audit.services import AuditWriteError


class PeriodFilter(admin.SimpleListFilter):
    title = _lazy("period")
    parameter_name = "period"
    DAYS = {"1d": 1, "7d": 7, "30d": 30, "90d": 90, "365d": 365}

    def lookups(self, request, model_admin):
        return [
            ("1d", _lazy("Last 24 hours")),
            ("7d", _lazy("Last 7 days")),
            ("30d", _lazy("Last 30 days")),
            ("90d", _lazy("Last 90 days")),
            ("365d", _lazy("Last year")),
        ]

    def queryset(self, request, queryset):
        days = self.DAYS.get(self.value() or "")
        if days is None:
            return queryset
        return queryset.filter(created_at__gte=timezone.now() - timedelta(days=days))


class InputFilter(admin.SimpleListFilter):
    """A free-text filter: no DISTINCT query over millions of rows to build a
    list of choices."""

    template = "admin/audit/input_filter.html"
    field = ""

    def lookups(self, request, model_admin):
        return [("", "")]  # the filter must have a choice to be shown

    def choices(self, changelist):
        # The other active filters travel along as hidden fields.
        items = []
        for key, values in changelist.params.items():
            if key in (self.parameter_name, "p"):
                continue
            for value in values if isinstance(values, list) else [values]:
                items.append((key, value))
        yield {"value": self.value() or "", "query_string_items": items, "parameter_name": self.parameter_name}

    def queryset(self, request, queryset):
        value = (self.value() or "").strip()
        return queryset.filter(**{self.field: value}) if value else queryset


class UserFilter(InputFilter):
    title = _lazy("user")
    parameter_name = "user"
    field = "actor_username"


class ConnectionFilter(InputFilter):
    title = _lazy("DB connection")
    parameter_name = "connection"
    field = "resource_name"


class CappedCountPaginator(Paginator):
    """`show_full_result_count = False` only drops the unfiltered count; the
    changelist still counts the filtered result exactly, which on millions of
    rows costs more than the page itself (bench/audit_admin.py). Count at most
    COUNT_CAP + 1 rows: pages past that are reached by narrowing the filter."""

    COUNT_CAP = 10_000

    @cached_property
    def count(self) -> int:
        return self.object_list[: self.COUNT_CAP + 1].count()


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False
    list_per_page = 50
    paginator = CappedCountPaginator

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class CsvExportMixin:
    """`export/` next to the changelist: the current filter as CSV."""

    change_list_template = "admin/audit/change_list_with_export.html"
    csv_columns: list[tuple[str, str]] = []  # (field, header)

    def get_urls(self):
        info = self.model._meta.app_label, self.model._meta.model_name
        export = path("export/", self.admin_site.admin_view(self.export_csv), name="{}_{}_export".format(*info))
        return [export, *super().get_urls()]

    def export_csv(self, request):
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        changelist = self.get_changelist_instance(request)
        queryset = changelist.queryset  # filtered, searched and in the listed order
        cap = settings.OWLAI_AUDIT_EXPORT_MAX_ROWS
        available = queryset[: cap + 1].count()
        filters = {k: v for k, v in request.GET.items() if k not in ("p", "o")}
        try:
            # Recorded before the file exists: an export that cannot be
            # recorded does not happen.
            audit_event_write(
                kind=EventKind.CSV_EXPORT,
                request=request,
                resource_kind=self.audit_resource_kind,
                row_count=min(available, cap),
                filters=filters,
                details={"cut": available > cap},
            )
        except AuditWriteError:
            return HttpResponse(_("The export could not be recorded in the audit log."), status=503)
        fields = [field for field, _header in self.csv_columns]
        rows = queryset.values_list(*fields)[: cap + 1].iterator(chunk_size=1000)
        stream = stream_csv([str(header) for _field, header in self.csv_columns], rows, max_rows=cap)
        response = StreamingHttpResponse(_in_batches(stream), content_type="text/csv; charset=utf-8")
        stamp = timezone.localtime().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="{self.model._meta.model_name}-{stamp}.csv"'
        return response


def _in_batches(stream, size: int = 200):
    """Hand the server a few hundred rows per chunk instead of one row each."""
    batch: list[str] = []
    try:
        for chunk in stream:
            batch.append(chunk)
            if len(batch) >= size:
                yield "".join(batch)
                batch = []
        if batch:
            yield "".join(batch)
    finally:
        stream.close()


def _search_sql_and_tables(queryset, search_term: str):
    term = search_term.strip()
    if not term:
        return queryset
    # Table names: exact element of the JSON list (GIN index on PostgreSQL).
    if connection.vendor == "postgresql":
        tables = Q(tables__contains=[term.lower()])
    else:
        tables = Q(tables__icontains=f'"{term.lower()}"')
    return queryset.filter(Q(sql_text__icontains=term) | tables)


def with_call_outcome(queryset):
    """One line per call. A call that reached a customer database has an
    attempt row (outcome `started`, written before it ran) and an outcome
    record (ToolCallOutcome, one per attempt, unique): joined here (LEFT JOIN
    on the unique attempt id), the line shows the outcome record's outcome,
    reason, row count and duration; an attempt whose outcome never arrived
    shows "no outcome recorded". A call refused before running is one row."""
    no_outcome = Value(str(NO_OUTCOME_LABEL))
    return queryset.annotate(
        line_outcome=Coalesce(
            F("final__outcome"),
            Case(When(outcome=Outcome.STARTED, then=no_outcome), default=F("outcome")),
        ),
        line_reason=Coalesce(F("final__reason"), F("reason")),
        line_row_count=Coalesce(F("final__row_count"), F("row_count")),
        line_duration_ms=Coalesce(F("final__duration_ms"), F("duration_ms")),
    )


class CallOutcomeFilter(admin.SimpleListFilter):
    """The call's outcome (see with_call_outcome), not its attempt row's."""

    title = _lazy("outcome")
    parameter_name = "outcome__exact"  # the URL of the former field filter keeps working

    def lookups(self, request, model_admin):
        return [*((o.value, o.label) for o in FINAL_OUTCOMES), (NO_OUTCOME, NO_OUTCOME_LABEL)]

    def queryset(self, request, queryset):
        value = self.value()
        if value == NO_OUTCOME:
            return queryset.filter(outcome=Outcome.STARTED, final__isnull=True)
        if value in FINAL_OUTCOMES:
            return queryset.filter(Q(outcome=value) | Q(outcome=Outcome.STARTED, final__outcome=value))
        return queryset


def _line(obj: ToolCallAudit, annotation: str, compute):
    """The annotated value (changelist, detail) or, on a bare row, computed."""
    return obj.__dict__[annotation] if annotation in obj.__dict__ else compute(obj)


class CallOutcomeMixin:
    """Tool-call screens: one line per call, its outcome record joined in."""

    def get_queryset(self, request):
        return with_call_outcome(super().get_queryset(request))

    @admin.display(description=_lazy("outcome"), ordering="line_outcome")
    def outcome_of_call(self, obj: ToolCallAudit) -> str:
        value = _line(obj, "line_outcome", lambda o: o.call_outcome)
        return str(dict(Outcome.choices).get(value, NO_OUTCOME_LABEL if value == NO_OUTCOME else value))

    @admin.display(description=_lazy("rows returned"), ordering="line_row_count")
    def rows_of_call(self, obj: ToolCallAudit):
        return _line(obj, "line_row_count", lambda o: o.call_row_count)

    @admin.display(description=_lazy("reason"))
    def reason_of_call(self, obj: ToolCallAudit) -> str:
        return _line(obj, "line_reason", lambda o: o.call_reason)

    @admin.display(description=_lazy("duration (ms)"))
    def duration_of_call(self, obj: ToolCallAudit):
        return _line(
            obj, "line_duration_ms", lambda o: o.outcome_record.duration_ms if o.outcome_record else o.duration_ms
        )

    @admin.display(description=_lazy("outcome recorded at"))
    def outcome_time(self, obj: ToolCallAudit):
        record = obj.outcome_record
        return record.created_at if record else "-"


# The attempt row's own fields, then the call's outcome (its outcome record's
# when it has one) in place of the attempt's outcome, reason, rows and duration.
CALL_READONLY_FIELDS = [
    *(f.name for f in ToolCallAudit._meta.fields if f.name not in ("outcome", "reason", "row_count", "duration_ms")),
    "outcome_of_call",
    "reason_of_call",
    "rows_of_call",
    "duration_of_call",
    "outcome_time",
]

TOOL_CALL_COLUMNS = [
    ("created_at", _lazy("time")),
    ("actor_username", _lazy("user")),
    ("tool", _lazy("tool")),
    ("resource_name", _lazy("resource")),
    ("line_outcome", _lazy("outcome")),
    ("line_reason", _lazy("reason")),
    ("line_row_count", _lazy("rows returned")),
    ("tables", _lazy("tables read")),
    ("sql_text", _lazy("SQL")),
    ("sql_truncated", _lazy("SQL truncated")),
    ("origin", _lazy("origin")),
    ("conversation_id", _lazy("conversation id")),
    ("turn_id", _lazy("turn id")),
    ("line_duration_ms", _lazy("duration (ms)")),
]


@admin.register(SqlExecution)
class SqlExecutionAdmin(CallOutcomeMixin, AuditedViewsMixin, CsvExportMixin, ReadOnlyAdmin):
    audit_resource_kind = "sql_execution"
    audit_owner_field = "actor_id"
    audit_owner_name_field = "actor_username"
    csv_columns = TOOL_CALL_COLUMNS
    list_display = ("created_at", "actor_username", "resource_name", "outcome_of_call", "rows_of_call", "short_sql")
    list_filter = (PeriodFilter, UserFilter, ConnectionFilter, CallOutcomeFilter)
    search_fields = ("sql_text",)  # see get_search_results: SQL text and table names
    search_help_text = _lazy("Searches the SQL text and the names of the tables read.")
    readonly_fields = CALL_READONLY_FIELDS

    def get_queryset(self, request):
        return super().get_queryset(request).filter(tool="run_sql")

    def get_search_results(self, request, queryset, search_term):
        return _search_sql_and_tables(queryset, search_term), False

    @admin.display(description=_lazy("SQL"))
    def short_sql(self, obj: ToolCallAudit) -> str:
        return obj.sql_text[:120]


@admin.register(ToolCallAudit)
class ToolCallAuditAdmin(CallOutcomeMixin, AuditedViewsMixin, CsvExportMixin, ReadOnlyAdmin):
    audit_resource_kind = "tool_call"
    audit_owner_field = "actor_id"
    audit_owner_name_field = "actor_username"
    csv_columns = TOOL_CALL_COLUMNS
    list_display = ("created_at", "actor_username", "tool", "resource_name", "outcome_of_call", "rows_of_call")
    list_filter = (PeriodFilter, UserFilter, "tool", CallOutcomeFilter)
    search_fields = ("sql_text",)
    readonly_fields = CALL_READONLY_FIELDS

    def get_search_results(self, request, queryset, search_term):
        return _search_sql_and_tables(queryset, search_term), False


class EventUserFilter(InputFilter):
    title = _lazy("user")
    parameter_name = "user"
    field = "actor_username"


@admin.register(AuditEvent)
class AuditEventAdmin(CsvExportMixin, ReadOnlyAdmin):
    audit_resource_kind = "admin_event"
    csv_columns = [
        ("created_at", _lazy("time")),
        ("kind", _lazy("event")),
        ("actor_username", _lazy("user")),
        ("ip", _lazy("IP address")),
        ("user_agent", _lazy("browser")),
        ("resource_kind", _lazy("resource kind")),
        ("resource_id", _lazy("resource id")),
        ("owner_username", _lazy("owner")),
        ("row_count", _lazy("rows")),
        ("filters", _lazy("filters")),
        ("details", _lazy("details")),
    ]
    list_display = ("created_at", "kind", "actor_username", "ip", "resource_kind", "owner_username", "row_count")
    list_filter = (PeriodFilter, EventUserFilter, "kind")
    search_fields = ("resource_kind", "resource_id")
    readonly_fields = [f.name for f in AuditEvent._meta.fields]


# The user list shows who works here and what they may do: opening it (or a
# user other than oneself) is an admin view event too.
User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class AuditedUserAdmin(AuditedViewsMixin, DjangoUserAdmin):
    audit_resource_kind = "user"
    audit_owner_field = "pk"
    audit_owner_name_field = "username"
