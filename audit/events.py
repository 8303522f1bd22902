"""Recording administrative events: views of others' records,
permission and settings changes, analyses started, reveals, exports.

One function, `audit_event_write`, used by the admin, services and views.
Callers that show or hand out data treat its failure as fatal (fail closed).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from audit.models import AuditEvent, EventKind
from audit.services import AuditWriteError


def client_ip(request) -> str | None:
    """The client address as the server saw it. X-Forwarded-For is trusted
    only when the deployment says so (a proxy that sets it); otherwise anyone
    could write any address into the record."""
    from django.conf import settings

    raw = ""
    if getattr(settings, "OWLAI_TRUST_X_FORWARDED_FOR", False):
        raw = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")[0].strip()
    raw = raw or request.META.get("REMOTE_ADDR", "")
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return None


def audit_event_write(
    *,
    kind: str,
    request=None,
    actor=None,
    resource_kind: str = "",
    resource_id: Any = "",
    owner_id: int | None = None,
    owner_username: str = "",
    row_count: int | None = None,
    filters: dict | None = None,
    details: dict | None = None,
) -> AuditEvent:
    if kind not in EventKind.values:
        raise AuditWriteError(f"unknown audit event kind {kind!r}")
    user = actor if actor is not None else getattr(request, "user", None)
    authenticated = bool(user is not None and getattr(user, "is_authenticated", False))
    try:
        return AuditEvent.objects.create(
            kind=kind,
            actor_id=user.pk if authenticated else None,
            actor_username=user.get_username() if authenticated else "",
            ip=client_ip(request) if request is not None else None,
            user_agent=(request.META.get("HTTP_USER_AGENT", "")[:300] if request is not None else ""),
            resource_kind=resource_kind,
            resource_id=str(resource_id or "")[:64],
            owner_id=owner_id,
            owner_username=owner_username[:150],
            row_count=row_count,
            filters=filters or {},
            details=details or {},
        )
    except Exception as exc:
        raise AuditWriteError(f"audit event could not be written: {exc.__class__.__name__}") from exc
