"""Read-only audit screens: no add, change or delete anywhere, no History.

Built for big tables: no exact COUNT(*) (`show_full_result_count = False`,
CappedCountPaginator), filters that never scan for their choices (pickers ask
the users' and connections' own admin; outcomes and kinds are vocabularies),
indexes behind every filter (see the migrations), and CSV export of the
current filter capped at OWLAI_AUDIT_EXPORT_MAX_ROWS rows.

Every time is shown and exported as ISO 8601 in the installation's time zone
with its offset (owlai.times).
"""

from __future__ import annotations

import datetime as dt
import json

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Case, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, gettext_noop

from audit.admin_filters import (
    ActorFilter,
    ConnectionFilter,
    EventTypeFilter,
    PeriodFilter,
    PickerFiltersMixin,
    ResourceKindFilter,
    TimeRangeFilter,
)
from audit.admin_views import AuditedViewsMixin, labels_details, recorded_filters
from audit.csv_export import stream_csv
from audit.event_types import event_type_choices
from audit.events import audit_event_write
from audit.models import (
    FINAL_OUTCOMES,
    NO_OUTCOME,
    NO_OUTCOME_LABEL,
    AuditEvent,
    EventKind,
    Origin,
    Outcome,
    ResourceKind,
    SqlExecution,
    ToolCallAudit,
    resource_kind_label,
)
from audit.registry import resource_model
from audit.search_terms import SEARCH_PARAM, recordable_filters, search_fingerprint
from audit.services import AuditWriteError
from owlai.times import local_iso, zone_label
from owlai.tool_names import ToolName


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
    """Append-only records: nothing to add, change or delete, so no History
    either (admin/audit/change_form.html drops the button; the URL is gone)."""

    show_full_result_count = False
    # Facet counts are one COUNT per filter choice over the whole table.
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    paginator = CappedCountPaginator

    class Media:
        css = {"all": ["audit/audit_admin.css"]}

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def history_view(self, request, object_id, extra_context=None):
        raise Http404("append-only records have no change history")

    @admin.display(description=gettext_lazy("time"), ordering="created_at")
    def time(self, obj) -> str:
        return local_iso(obj.created_at)

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "owlai_time_zone": zone_label()}
        return super().changelist_view(request, extra_context)


def _csv_value(value, words: dict[str, str]):
    if isinstance(value, dt.datetime):
        return local_iso(value)
    return words.get(value, value) if isinstance(value, str) else value


class CsvExportMixin:
    """`export/` next to the changelist: the current filter as CSV. Times are
    ISO 8601 with their offset, and the time column's header names the zone;
    coded columns (outcomes, kinds) are written in words."""

    change_list_template = "admin/audit/change_list_with_export.html"
    csv_columns: list[tuple[str, str]] = []  # (field, header)
    csv_labels: dict = {}  # field -> choices (code -> label) giving a stored code in words

    def get_urls(self):
        info = self.model._meta.app_label, self.model._meta.model_name
        export = path("export/", self.admin_site.admin_view(self.export_csv), name="{}_{}_export".format(*info))
        return [export, *super().get_urls()]

    def csv_header(self) -> list[str]:
        return [
            f"{header} ({zone_label()})" if field == "created_at" else str(header) for field, header in self.csv_columns
        ]

    def export_csv(self, request):
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        changelist = self.get_changelist_instance(request)
        queryset = changelist.queryset  # filtered, searched and in the listed order
        cap = settings.OWLAI_AUDIT_EXPORT_MAX_ROWS
        available = queryset[: cap + 1].count()
        filters = recordable_filters(request.GET, navigation=("p", "o"))
        details = {"cut": available > cap, **labels_details(changelist)}
        try:
            # Recorded before the file exists: an export that cannot be
            # recorded does not happen.
            record = audit_event_write(
                kind=EventKind.CSV_EXPORT,
                request=request,
                resource_kind=self.audit_resource_kind,
                row_count=min(available, cap),
                filters=filters,
                details=details,
            )
        except AuditWriteError:
            return HttpResponse(_("The export could not be recorded in the audit log."), status=503)
        if isinstance(record, queryset.model):
            # The events list: the file holds what was counted, not the
            # export's own record written just now (one row more than its count).
            queryset = queryset.exclude(pk=record.pk)
        fields = [field for field, _header in self.csv_columns]
        source = queryset.values_list(*fields)[: cap + 1].iterator(chunk_size=1000)
        # Words in the language of this request, resolved now: the rows are
        # written later, while the response streams, outside the request.
        words = {field: {code: str(label) for code, label in choices()} for field, choices in self.csv_labels.items()}
        stream = stream_csv(self.csv_header(), self._csv_rows(source, fields, words), max_rows=cap)
        response = StreamingHttpResponse(_in_batches(stream), content_type="text/csv; charset=utf-8")
        stamp = timezone.localtime().strftime("%Y%m%d-%H%M%S%z")
        response["Content-Disposition"] = f'attachment; filename="{self.model._meta.model_name}-{stamp}.csv"'
        return response

    def _csv_rows(self, source, fields, words: dict[str, dict[str, str]]):
        labels = [words.get(field, {}) for field in fields]
        try:
            for row in source:
                yield [_csv_value(value, label_of) for value, label_of in zip(row, labels, strict=True)]
        finally:
            source.close()  # releases the server-side cursor when the client goes away


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

    title = gettext_lazy("outcome")
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

    @admin.display(description=gettext_lazy("outcome"), ordering="line_outcome")
    def outcome_of_call(self, obj: ToolCallAudit) -> str:
        return outcome_label(_line(obj, "line_outcome", lambda o: o.call_outcome))

    @admin.display(description=gettext_lazy("rows returned"), ordering="line_row_count")
    def rows_of_call(self, obj: ToolCallAudit):
        value = _line(obj, "line_row_count", lambda o: o.call_row_count)
        return "-" if value is None else value

    @admin.display(description=gettext_lazy("reason"))
    def reason_of_call(self, obj: ToolCallAudit) -> str:
        return _line(obj, "line_reason", lambda o: o.call_reason) or "-"

    @admin.display(description=gettext_lazy("duration (ms)"))
    def duration_of_call(self, obj: ToolCallAudit):
        value = _line(
            obj, "line_duration_ms", lambda o: o.outcome_record.duration_ms if o.outcome_record else o.duration_ms
        )
        return "-" if value is None else value

    @admin.display(description=gettext_lazy("outcome recorded at"))
    def outcome_time(self, obj: ToolCallAudit):
        record = obj.outcome_record
        return local_iso(record.created_at) if record else "-"


def outcome_label(value) -> str:
    return str(dict(Outcome.choices).get(value, NO_OUTCOME_LABEL if value == NO_OUTCOME else value))


def _admin_link(kind: str, object_id, text: str) -> str:
    """A link to the live object's admin page when its app registered the kind
    and the object still exists; the plain text otherwise (records outlive
    what they name)."""
    model = resource_model(kind)
    if model is None or object_id in (None, ""):
        return text
    opts = model._meta
    try:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[object_id])
        exists = model._default_manager.filter(pk=object_id).exists()
    except (NoReverseMatch, ValueError, ValidationError):  # a malformed id names nothing
        return text
    return format_html('<a href="{}">{}</a>', url, text) if exists else text


# The detail page of a call, in reading order: who, what, where, then the
# call's outcome (its outcome record's when it has one, in place of the
# attempt row's own outcome, reason, rows and duration), then the SQL. Times
# as ISO 8601 with offset, kinds in words, the conversation as a link to its
# metadata page.
CALL_DETAIL_FIELDS = [
    "time",
    "actor_username",
    "actor_id",
    "tool",
    "resource_kind_shown",
    "resource_id",
    "resource_name",
    "origin",
    "origin_ref",
    "origin_run",
    "conversation",
    "turn_id",
    "outcome_of_call",
    "reason_of_call",
    "rows_of_call",
    "duration_of_call",
    "outcome_time",
    "sql_text",
    "sql_truncated",
    "tables_read",
]

TOOL_CALL_COLUMNS = [
    ("created_at", gettext_lazy("time")),
    ("actor_username", gettext_lazy("user")),
    ("tool", gettext_lazy("tool")),
    ("resource_name", gettext_lazy("resource")),
    ("line_outcome", gettext_lazy("outcome")),
    ("line_reason", gettext_lazy("reason")),
    ("line_row_count", gettext_lazy("rows returned")),
    ("tables", gettext_lazy("tables read")),
    ("sql_text", gettext_lazy("SQL")),
    ("sql_truncated", gettext_lazy("SQL truncated")),
    ("origin", gettext_lazy("origin")),
    ("conversation_id", gettext_lazy("conversation id")),
    ("turn_id", gettext_lazy("turn id")),
    ("line_duration_ms", gettext_lazy("duration (ms)")),
]


class ToolCallScreen(CallOutcomeMixin, AuditedViewsMixin, PickerFiltersMixin, CsvExportMixin, ReadOnlyAdmin):
    audit_owner_field = "actor_id"
    audit_owner_name_field = "actor_username"
    csv_columns = TOOL_CALL_COLUMNS
    csv_labels = {"line_outcome": lambda: Outcome.choices, "origin": lambda: Origin.choices}
    search_fields = ("sql_text",)  # see get_search_results: SQL text and table names
    fields = CALL_DETAIL_FIELDS
    readonly_fields = CALL_DETAIL_FIELDS

    def get_search_results(self, request, queryset, search_term):
        return _search_sql_and_tables(queryset, search_term), False

    @admin.display(description=gettext_lazy("resource kind"))
    def resource_kind_shown(self, obj: ToolCallAudit) -> str:
        return resource_kind_label(obj.resource_kind) or "-"

    @admin.display(description=gettext_lazy("tables read"))
    def tables_read(self, obj: ToolCallAudit) -> str:
        return ", ".join(str(t) for t in obj.tables or []) or "-"

    @admin.display(description=gettext_lazy("the run it came from"))
    def origin_run(self, obj: ToolCallAudit) -> str:
        """A reference `<resource kind>:<id>` (e.g. a playbook run) as a link
        to that run's page, where its app registered the kind."""
        kind, _sep, object_id = (obj.origin_ref or "").partition(":")
        if not object_id or kind not in ResourceKind.values:
            return obj.origin_ref or "-"
        return _admin_link(kind, object_id, obj.origin_ref)

    @admin.display(description=gettext_lazy("conversation"))
    def conversation(self, obj: ToolCallAudit) -> str:
        if obj.conversation_id is None:
            return "-"
        return _admin_link(ResourceKind.CONVERSATION, obj.conversation_id, str(obj.conversation_id))


@admin.register(SqlExecution)
class SqlExecutionAdmin(ToolCallScreen):
    audit_resource_kind = ResourceKind.SQL_EXECUTION
    list_display = ("time", "actor_username", "resource_name", "outcome_of_call", "rows_of_call", "short_sql")
    list_filter = (
        ("created_at", TimeRangeFilter),
        PeriodFilter,
        ActorFilter,
        ConnectionFilter,
        EventTypeFilter,
        CallOutcomeFilter,
        "origin",
    )
    search_help_text = gettext_lazy("Searches the SQL text and the names of the tables read.")

    def get_queryset(self, request):
        return super().get_queryset(request).filter(tool=ToolName.RUN_SQL)

    @admin.display(description=gettext_lazy("SQL"))
    def short_sql(self, obj: ToolCallAudit) -> str:
        return obj.sql_text[:120]


@admin.register(ToolCallAudit)
class ToolCallAuditAdmin(ToolCallScreen):
    audit_resource_kind = ResourceKind.TOOL_CALL
    list_display = ("time", "actor_username", "tool", "resource_name", "outcome_of_call", "rows_of_call")
    list_filter = (
        ("created_at", TimeRangeFilter),
        PeriodFilter,
        ActorFilter,
        ConnectionFilter,
        EventTypeFilter,
        "tool",
        CallOutcomeFilter,
        "origin",
    )


def _filters_text(event: AuditEvent) -> str:
    """The filters a list view or export had, as the reader saw them: the
    filter titles and chosen values recorded with the event, else the raw
    query parameters."""
    pairs = recorded_filters(event.details, event.filters)
    return "; ".join(f"{key}: {value}" for key, value in pairs.items())


# Names a resource by, where the event's details hold one.
_NAME_KEYS = ("role", "connection", "name", "setting")

# The forms in which services record a setting's name (in English, so the
# record does not change with the writer's language), shown in the reader's.
# A name of another form is shown as recorded.
_SETTING_NAMES = (
    gettext_noop("classification of %(name)s"),
    gettext_noop("model %(name)s enabled"),
    gettext_noop("default model for %(name)s"),
    gettext_noop("DSN of %(name)s"),
    gettext_noop("policy of connector tool %(name)s"),
    gettext_noop("exposure of %(name)s"),
)


def setting_in_words(recorded: str) -> str:
    for template in _SETTING_NAMES:
        head, tail = template.split("%(name)s")
        if recorded.startswith(head) and recorded.endswith(tail) and len(recorded) > len(head) + len(tail):
            return _(template) % {"name": recorded[len(head) : len(recorded) - len(tail)]}
    return recorded


@admin.register(AuditEvent)
class AuditEventAdmin(PickerFiltersMixin, CsvExportMixin, ReadOnlyAdmin):
    audit_resource_kind = ResourceKind.ADMIN_EVENT
    csv_columns = [
        ("created_at", gettext_lazy("time")),
        ("kind", gettext_lazy("event")),
        ("actor_username", gettext_lazy("user")),
        ("ip", gettext_lazy("IP address")),
        ("user_agent", gettext_lazy("browser")),
        ("resource_kind", gettext_lazy("resource kind")),
        ("resource_id", gettext_lazy("resource id")),
        ("owner_username", gettext_lazy("owner")),
        ("row_count", gettext_lazy("rows")),
        ("filters", gettext_lazy("filters")),
        ("details", gettext_lazy("details")),
    ]
    csv_labels = {"kind": event_type_choices, "resource_kind": lambda: ResourceKind.choices}
    list_display = (
        "time",
        "kind_shown",
        "actor_username",
        "ip",
        "target",
        "owner_username",
        "row_count",
        "filters_shown",
    )
    list_filter = (("created_at", TimeRangeFilter), PeriodFilter, ActorFilter, EventTypeFilter, ResourceKindFilter)
    search_fields = ("resource_id", "owner_username")
    search_help_text = gettext_lazy(
        "Searches the resource id and the owner's user name, and finds the list views and exports "
        "whose search was this term (the record keeps only its fingerprint)."
    )

    def get_search_results(self, request, queryset, search_term):
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        if not search_term.strip():
            return found, may_have_duplicates
        searched = queryset.filter(**{f"filters__{SEARCH_PARAM}": search_fingerprint(search_term)})
        return found | searched, may_have_duplicates

    fields = readonly_fields = [
        "time",
        "kind_shown",
        "actor_username",
        "actor_id",
        "ip",
        "user_agent",
        "target",
        "owner_username",
        "owner_id",
        "row_count",
        "filters_shown",
        "details_shown",
    ]

    @admin.display(description=gettext_lazy("event"), ordering="kind")
    def kind_shown(self, obj: AuditEvent) -> str:
        return obj.kind_label

    @admin.display(description=gettext_lazy("target"), ordering="resource_kind")
    def target(self, obj: AuditEvent) -> str:
        label = resource_kind_label(obj.resource_kind)
        details = obj.details if isinstance(obj.details, dict) else {}
        key = next((key for key in _NAME_KEYS if details.get(key)), None)
        name = "" if key is None else str(details[key])
        if key == "setting":
            name = setting_in_words(name)
        parts = [label, f"#{obj.resource_id}" if obj.resource_id else "", name]
        return " ".join(part for part in parts if part) or "-"

    @admin.display(description=gettext_lazy("filters"))
    def filters_shown(self, obj: AuditEvent) -> str:
        return _filters_text(obj) or "-"

    @admin.display(description=gettext_lazy("details"))
    def details_shown(self, obj: AuditEvent) -> str:
        if not obj.details:
            return "-"
        text = json.dumps(_in_words(obj.details), ensure_ascii=False, indent=2, sort_keys=True, default=str)
        return format_html("<pre>{}</pre>", text)


def _recorded_words() -> dict[str, str]:
    # Codes services record as values (a connection's DSN source) and their words.
    return {"stored": _("stored encrypted")}


def _in_words(value, words: dict | None = None):
    """The details with the recorded codes among their values in words; the
    structure and every other value as recorded."""
    words = _recorded_words() if words is None else words
    if isinstance(value, dict):
        return {key: _in_words(item, words) for key, item in value.items()}
    if isinstance(value, list):
        return [_in_words(item, words) for item in value]
    return words.get(value, value) if isinstance(value, str) else value
