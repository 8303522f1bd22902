"""Admin view events, by declaration (an admin opening others'
records is itself on the record).

    class MyAdmin(AuditedViewsMixin, admin.ModelAdmin):
        audit_resource_kind = "playbook_run"
        audit_owner_field = "owner_id"          # the owner's user id on each row
        audit_owner_name_field = "owner__username"  # optional, for the detail event

A list view writes one event per request (row count on the page and the
active filters); a detail view writes one event with the record's owner.
Viewing only one's own records writes nothing. If the event cannot be
written, the records are not shown (fail closed).
"""

from __future__ import annotations

import logging

from django.http import HttpResponse
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import EventKind
from audit.services import AuditWriteError

logger = logging.getLogger(__name__)

# Query parameters of the changelist that are navigation, not filtering.
_NAVIGATION_PARAMS = {"p", "o", "_changelist_filters"}


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
            if not changelist.queryset.exclude(**{self.audit_owner_field: viewer}).exists():
                return response  # only one's own records
            audit_event_write(
                kind=EventKind.ADMIN_VIEW,
                request=request,
                resource_kind=self.audit_resource_kind,
                row_count=len(changelist.result_list),
                filters={k: v for k, v in request.GET.items() if k not in _NAVIGATION_PARAMS},
            )
        except AuditWriteError:
            logger.exception("admin list view event could not be written")
            return _refused()
        return response

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
