"""Admin view events, by declaration (an admin opening others'
records is itself on the record).

    class MyAdmin(AuditedViewsMixin, admin.ModelAdmin):
        audit_resource_kind = ResourceKind.CONVERSATION  # audit.models: one vocabulary
        audit_owner_field = "owner_id"          # the owner's user id on each row
        audit_owner_name_field = "owner__username"  # optional, for the detail event

A list view writes one event per request (row count on the page and the
active filters: the query parameters, and the filter titles with the chosen
values as the reader saw them); a detail view writes one event with the
record's owner.
Viewing only one's own records writes nothing. If the event cannot be
written, the records are not shown (fail closed).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.admin import SimpleListFilter
from django.http import HttpResponse
from django.utils import translation
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import EventKind
from audit.search_terms import recordable_filters, search_in_words
from audit.services import AuditWriteError

logger = logging.getLogger(__name__)

# Query parameters of the changelist that are navigation, not filtering.
_NAVIGATION_PARAMS = {"p", "o", "_changelist_filters"}


def _flat(value) -> str:
    values = value if isinstance(value, list | tuple) else [value]
    return ", ".join(str(v) for v in values if v not in (None, ""))


def filter_labels(changelist) -> dict[str, str]:
    """{filter title: chosen value in words} of a changelist's active filters
    (and the search), for the record: ids and codes alone would not tell a
    later reader which user or outcome was chosen."""
    labels: dict[str, str] = {}
    for spec in getattr(changelist, "filter_specs", []):
        used = {k: v for k, v in getattr(spec, "used_parameters", {}).items() if _flat(v)}
        if not used:
            continue
        if hasattr(spec, "display_value"):
            shown = spec.display_value()
        elif isinstance(spec, SimpleListFilter):
            shown = str(dict(spec.lookup_choices).get(spec.value(), spec.value()))
        else:
            choices = dict(getattr(getattr(spec, "field", None), "flatchoices", None) or [])
            shown = ", ".join(str(choices.get(v, v)) for value in used.values() for v in _values(value))
        labels[str(spec.title)] = shown
    if getattr(changelist, "query", ""):
        labels[_("search")] = search_in_words(changelist.query)
    return labels


def filter_labels_by_language(changelist) -> dict[str, dict[str, str]]:
    """filter_labels in every shipped language ({"ko": {...}, "en": {...}}):
    the record is read later by people of either language, and a title
    kept only in the recorder's ("outcome: Denied") is a foreign word to
    the other reader."""
    by_language = {}
    for code, _name in settings.LANGUAGES:
        with translation.override(code):
            by_language[code] = filter_labels(changelist)
    return by_language


def labels_details(changelist) -> dict:
    """The `details` of a list view or export event: the chosen filters in
    words, in the request's language and in every shipped one."""
    labels = filter_labels(changelist)
    if not labels:
        return {}
    return {"filter_labels": labels, "filter_labels_by_language": filter_labels_by_language(changelist)}


def recorded_filters(details, raw_filters) -> dict:
    """The filters of a recorded list view or export, as the reader should
    read them: in the reader's language when recorded so, else as recorded."""
    details = details if isinstance(details, dict) else {}
    by_language = details.get("filter_labels_by_language")
    if isinstance(by_language, dict):
        shown = by_language.get(translation.get_language() or "") or by_language.get(
            (translation.get_language() or "").split("-")[0]
        )
        if isinstance(shown, dict) and shown:
            return shown
    labels = details.get("filter_labels")
    if isinstance(labels, dict) and labels:
        return labels
    return raw_filters if isinstance(raw_filters, dict) else {}


def _values(value) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def _refused() -> HttpResponse:
    return HttpResponse(_("This view could not be recorded in the audit log, so it is not shown."), status=503)


class AuditedViewsMixin:
    audit_resource_kind: str = ""
    audit_owner_field: str = ""
    audit_owner_name_field: str = ""

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        changelist = getattr(response, "context_data", {}).get("cl") if response.status_code == 200 else None
        if changelist is None or request.method != "GET":
            return response
        viewer = request.user.pk
        try:
            if not self._shows_others(changelist, viewer):
                return response  # only one's own records
            audit_event_write(
                kind=EventKind.ADMIN_VIEW,
                request=request,
                resource_kind=self.audit_resource_kind,
                row_count=len(changelist.result_list),
                filters=recordable_filters(request.GET, navigation=_NAVIGATION_PARAMS),
                details=labels_details(changelist) or None,
            )
        except AuditWriteError:
            logger.exception("admin list view event could not be written")
            return _refused()
        return response

    def _shows_others(self, changelist, viewer) -> bool:
        """Whether the filtered list holds records of people other than the
        viewer. The page's rows answer most lists; an empty result needs no
        query at all (on a 10-million-row table, `exists()` over a filter
        that matches nothing scanned the whole table: 10 s)."""
        field = self.audit_owner_field
        if any(getattr(row, field) != viewer for row in changelist.result_list):
            return True
        if changelist.result_count == 0:
            return False
        return changelist.queryset.exclude(**{field: viewer}).exists()

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if request.method == "GET":
            obj = self.get_object(request, object_id)
            if obj is not None:
                owner_id = self._owner_of(obj)
                if owner_id != request.user.pk:
                    try:
                        audit_event_write(
                            kind=EventKind.ADMIN_VIEW,
                            request=request,
                            resource_kind=self.audit_resource_kind,
                            resource_id=object_id,
                            owner_id=owner_id,
                            owner_username=self._owner_name_of(obj),
                        )
                    except AuditWriteError:
                        logger.exception("admin detail view event could not be written")
                        return _refused()
        return super().change_view(request, object_id, form_url, extra_context)

    def _owner_of(self, obj) -> int | None:
        value = obj
        for part in self.audit_owner_field.split("__"):
            value = getattr(value, part, None)
        return value if isinstance(value, int) else getattr(value, "pk", None)

    def _owner_name_of(self, obj) -> str:
        if not self.audit_owner_name_field:
            return ""
        value = obj
        for part in self.audit_owner_name_field.split("__"):
            value = getattr(value, part, None)
        return str(value or "")
