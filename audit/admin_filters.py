"""List filters of the audit screens (and of other admin lists that pick
users or connections the same way).

* PickerFilter: an autocomplete picker over live objects (users,
  connections) that filters by id, on indexed id columns. The picker asks
  the admin's own autocomplete view (Django's select2) for matches, so no
  DISTINCT scan over millions of audit rows builds a list of choices.
* TimeRangeFilter: a date-time range (django-admin-rangefilter), read in the
  installation's time zone, which its title names.
* PeriodFilter: quick "last N days" links.
"""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

from django import forms
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.autocomplete import AutocompleteJsonView
from django.contrib.admin.widgets import AutocompleteMixin, get_select2_language
from django.http import Http404
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy
from rangefilter.filters import DateTimeRangeFilter

from audit.event_types import event_type_choices
from audit.models import ResourceKind
from audit.registry import resource_model
from owlai.times import local_iso, zone_label


class PeriodFilter(admin.SimpleListFilter):
    title = gettext_lazy("period")
    parameter_name = "period"
    DAYS = {"1d": 1, "7d": 7, "30d": 30, "90d": 90, "365d": 365}

    def lookups(self, request, model_admin):
        return [
            ("1d", gettext_lazy("Last 24 hours")),
            ("7d", gettext_lazy("Last 7 days")),
            ("30d", gettext_lazy("Last 30 days")),
            ("90d", gettext_lazy("Last 90 days")),
            ("365d", gettext_lazy("Last year")),
        ]

    def queryset(self, request, queryset):
        days = self.DAYS.get(self.value() or "")
        if days is None:
            return queryset
        return queryset.filter(created_at__gte=timezone.now() - timedelta(days=days))


class TimeRangeFilter(DateTimeRangeFilter):
    """From / to date and time, in the installation's time zone (named in the
    title, like every time on these screens)."""

    def _get_default_title(self, request, model_admin, field_path):
        # Lazy: the record keeps the title in every language (audit.admin_views).
        return format_lazy("{} ({})", self.field.verbose_name, zone_label())

    def display_value(self) -> str:
        """The range as the record shows it: `start – end`, ISO 8601 with offsets."""
        if not self.form.is_valid():
            return ""
        zone = self.get_timezone(self.request)

        def shown(value):
            return local_iso(self.make_dt_aware(value, zone)) if value else "…"

        data = self.form.cleaned_data
        return f"{shown(data.get(self.lookup_kwarg_gte))} – {shown(data.get(self.lookup_kwarg_lte))}"


class PickerFilter(admin.SimpleListFilter):
    """Filter by one picked object: `?<parameter_name>=<id>`.

    Subclasses set `resource_kind` (whose model the owning app registered in
    audit.registry; it must have an admin with search_fields), `field` (the
    id column to filter on) and optionally `extra` (more conditions, e.g.
    the resource kind column next to a resource id)."""

    template = "admin/audit/picker_filter.html"
    resource_kind = ""
    field = ""
    extra: dict = {}

    def __init__(self, request, params, model, model_admin):
        self.model_admin = model_admin
        super().__init__(request, params, model, model_admin)

    def lookups(self, request, model_admin):
        return [("", "")]  # the filter must have a choice to be shown

    def picked_id(self) -> int | None:
        raw = (self.value() or "").strip()
        if not raw:
            return None
        try:
            return int(raw)
        except ValueError:
            # Shown by the changelist as its "invalid filter" page, not ignored:
            # an ignored filter would list records the reader did not ask for.
            raise IncorrectLookupParameters(f"{self.parameter_name} must be an id") from None

    def picked_label(self) -> str:
        picked = self.picked_id()
        if picked is None:
            return ""
        model = resource_model(self.resource_kind)
        obj = model._default_manager.filter(pk=picked).first() if model is not None else None
        # A deleted user or connection keeps its records: show its id.
        return str(obj) if obj is not None else f"#{picked}"

    def display_value(self) -> str:
        return self.picked_label()

    def choices(self, changelist):
        items = []
        for key, values in changelist.params.items():
            if key in (self.parameter_name, "p"):
                continue
            for value in values if isinstance(values, list) else [values]:
                items.append((key, value))
        yield {
            "selected": self.value() is not None,
            "value": str(self.picked_id() or ""),
            "label": self.picked_label(),
            "query_string_items": items,
            "parameter_name": self.parameter_name,
            "url": picker_url(self.model_admin, self.resource_kind),
            "clear_url": changelist.get_query_string(remove=[self.parameter_name]),
        }

    def queryset(self, request, queryset):
        picked = self.picked_id()
        if picked is None:
            return queryset
        return queryset.filter(**{self.field: picked, **self.extra})


def picker_url(model_admin, kind: str) -> str:
    opts = model_admin.model._meta
    try:
        return reverse(f"{model_admin.admin_site.name}:{opts.app_label}_{opts.model_name}_pick", args=[kind])
    except NoReverseMatch:
        return ""


class ActorFilter(PickerFilter):
    title = gettext_lazy("user")
    parameter_name = "user_id"
    resource_kind = ResourceKind.USER
    field = "actor_id"


class ConnectionFilter(PickerFilter):
    """Tool calls on one DB connection (resource id and kind: one index)."""

    title = gettext_lazy("DB connection")
    parameter_name = "connection_id"
    resource_kind = ResourceKind.DB_CONNECTION
    field = "resource_id"
    extra = {"resource_kind": ResourceKind.DB_CONNECTION}


class ResourceKindFilter(admin.SimpleListFilter):
    """Resource kinds in words; the choices are the vocabulary, not a scan."""

    title = gettext_lazy("resource kind")
    parameter_name = "resource_kind"

    def lookups(self, request, model_admin):
        return ResourceKind.choices

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(resource_kind=value) if value else queryset


class EventTypeFilter(admin.SimpleListFilter):
    """Event types in words, from the registry (the column has no choices).
    The parameter keeps the name Django's choices filter gave it, so saved
    links still filter."""

    title = gettext_lazy("event")
    parameter_name = "kind__exact"

    def lookups(self, request, model_admin):
        return event_type_choices()

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(kind=value) if value else queryset


class ResourcePickerView(AutocompleteJsonView):
    """Django's autocomplete JSON view, for a resource kind instead of a
    foreign key: the matches are the kind's admin search results (its search
    fields and queryset). The permission checked is the screen's the picker
    serves: a compliance officer who may read the audit list may pick the
    user or connection to filter it by, without any right on the users' or
    connections' own screens (only names and ids are answered)."""

    source_admin = None

    def process_request(self, request):
        model = resource_model(self.kwargs["kind"])
        model_admin = self.admin_site._registry.get(model) if model is not None else None
        if model_admin is None or not model_admin.get_search_fields(request):
            raise Http404("no picker for this kind")
        return request.GET.get("term", ""), model_admin, None, model._meta.pk.attname

    def get_queryset(self):
        queryset = self.model_admin.get_queryset(self.request)
        queryset, distinct = self.model_admin.get_search_results(self.request, queryset, self.term)
        return queryset.distinct() if distinct else queryset

    def has_perm(self, request, obj=None):
        return self.source_admin.has_view_permission(request)


class PickerFiltersMixin:
    """A ModelAdmin with picker filters: the `pick/<kind>/` endpoint they ask,
    and select2's assets (Django's own, as its autocomplete widget loads them)."""

    def get_urls(self):
        info = self.model._meta.app_label, self.model._meta.model_name
        view = ResourcePickerView.as_view(admin_site=self.admin_site, source_admin=self)
        pick = path("pick/<str:kind>/", self.admin_site.admin_view(view), name="{}_{}_pick".format(*info))
        return [pick, *super().get_urls()]

    @property
    def media(self):
        select2 = AutocompleteMixin.media.fget(SimpleNamespace(i18n_name=get_select2_language()))
        # Listed after jquery.init.js: a script listed alone has no place in
        # the merged order and landed before `django.jQuery` existed, so
        # picking did nothing.
        return super().media + select2 + forms.Media(js=["admin/js/jquery.init.js", "audit/picker_filter.js"])
