"""A connection's state in words for its admin pages: where its schema
analysis stands (an analysis runs in a worker after the admin's page
answered; its end is an audit event, governance.schema_analysis) and where
its DSN comes from."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from audit.models import AuditEvent, EventKind, ResourceKind
from owlai.times import local_iso


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


def dsn_source_label(source: str) -> str:
    """`DbConnection.dsn_source` ("stored", "env:NAME", "-": codes the audit
    record keeps as they are) in the reader's words."""
    if source == "stored":
        return _("stored encrypted")
    if source.startswith("env:"):
        return _("environment variable %(name)s") % {"name": source[len("env:") :]}
    return source
