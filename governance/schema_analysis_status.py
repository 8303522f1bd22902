"""Where a connection's schema analysis stands, for its admin pages: an
analysis runs in a worker after the admin's page answered, and its end is
an audit event (governance.schema_analysis.schema_analysis_run)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from audit.models import AuditEvent, EventKind, ResourceKind
from audit.times import local_iso


def schema_analysis_status(*, connection_id: int) -> str:
    """The last analysis of a connection in words: running since, finished
    (when, how many columns), failed (when, why), or never run."""
    kinds = (EventKind.ANALYSIS_STARTED, EventKind.ANALYSIS_FINISHED, EventKind.ANALYSIS_FAILED)
    last = (
        AuditEvent.objects.filter(
            resource_kind=ResourceKind.DB_CONNECTION, resource_id=str(connection_id), kind__in=kinds
        )
        .order_by("-created_at", "-pk")
        .only("kind", "created_at", "details")
        .first()
    )
    if last is None:
        return _("never run")
    at = local_iso(last.created_at)
    details = last.details if isinstance(last.details, dict) else {}
    if last.kind == EventKind.ANALYSIS_FINISHED:
        count = int(details.get("columns") or 0)
        return ngettext(
            "finished %(time)s: %(count)d column classified",
            "finished %(time)s: %(count)d columns classified",
            count,
        ) % {"time": at, "count": count}
    if last.kind == EventKind.ANALYSIS_FAILED:
        return _("failed %(time)s: %(error)s") % {"time": at, "error": details.get("error", "")}
    return _("running since %(time)s") % {"time": at}
