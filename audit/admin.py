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
from django.db.models import Q
from django.http import HttpResponse, StreamingHttpResponse
from django.urls import path
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _lazy

from audit.admin_views import AuditedViewsMixin
from audit.csv_export import stream_csv
from audit.events import audit_event_write
from audit.models import AuditEvent, EventKind, SqlExecution, ToolCallAudit
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


TOOL_CALL_COLUMNS = [
    ("created_at", _lazy("time")),
    ("actor_username", _lazy("user")),
    ("tool", _lazy("tool")),
    ("resource_name", _lazy("resource")),
    ("outcome", _lazy("outcome")),
    ("reason", _lazy("reason")),
    ("row_count", _lazy("rows returned")),
    ("tables", _lazy("tables read")),
    ("sql_text", _lazy("SQL")),
    ("sql_truncated", _lazy("SQL truncated")),
    ("origin", _lazy("origin")),
    ("conversation_id", _lazy("conversation id")),
    ("turn_id", _lazy("turn id")),
    ("duration_ms", _lazy("duration (ms)")),
]


@admin.register(SqlExecution)
class SqlExecutionAdmin(AuditedViewsMixin, CsvExportMixin, ReadOnlyAdmin):
    audit_resource_kind = "sql_execution"
    audit_owner_field = "actor_id"
    audit_owner_name_field = "actor_username"
    csv_columns = TOOL_CALL_COLUMNS
    list_display = ("created_at", "actor_username", "resource_name", "outcome", "row_count", "short_sql")
    list_filter = (PeriodFilter, UserFilter, ConnectionFilter, "outcome")
    search_fields = ("sql_text",)  # see get_search_results: SQL text and table names
    search_help_text = _lazy("Searches the SQL text and the names of the tables read.")
    readonly_fields = [f.name for f in ToolCallAudit._meta.fields]

    def get_queryset(self, request):
        return super().get_queryset(request).filter(tool="run_sql")

    def get_search_results(self, request, queryset, search_term):
        return _search_sql_and_tables(queryset, search_term), False

    @admin.display(description=_lazy("SQL"))
    def short_sql(self, obj: ToolCallAudit) -> str:
        return obj.sql_text[:120]


@admin.register(ToolCallAudit)
class ToolCallAuditAdmin(AuditedViewsMixin, CsvExportMixin, ReadOnlyAdmin):
    audit_resource_kind = "tool_call"
    audit_owner_field = "actor_id"
    audit_owner_name_field = "actor_username"
    csv_columns = TOOL_CALL_COLUMNS
    list_display = ("created_at", "actor_username", "tool", "resource_name", "outcome", "row_count")
    list_filter = (PeriodFilter, UserFilter, "tool", "outcome")
    search_fields = ("sql_text",)
    readonly_fields = [f.name for f in ToolCallAudit._meta.fields]

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
