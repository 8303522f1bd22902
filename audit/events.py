"""Recording administrative events: views of others' records,
permission and settings changes, analyses started, reveals, exports.

One function, `audit_event_write`, used by the admin, services and views.
Callers that show or hand out data treat its failure as fatal (fail closed).
"""

from __future__ import annotations

from typing import Any

from audit.actors import as_actor
from audit.confirm import confirmation_details
from audit.event_types import is_event_type
from audit.models import AuditEvent, EventKind, ResourceKind
from audit.services import AuditWriteError


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
    if not is_event_type(kind):
        raise AuditWriteError(f"unknown audit event kind {kind!r}")
    # `actor`: an audit.actors.Actor, or (older callers) a user; the address
    # and browser then come from `request`.
    who = as_actor(actor=actor, request=request)
    # A confirmed change (audit.confirm): what its page showed goes with its event.
    details = confirmation_details(
        kind=kind, resource_kind=resource_kind, resource_id=resource_id, details=details or {}
    )
    try:
        return AuditEvent.objects.create(
            kind=kind,
            actor_id=who.user_id,
            actor_username=who.username,
            ip=who.ip,
            user_agent=who.user_agent,
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


def user_delete(*, user, request=None, actor=None) -> AuditEvent:
    """Delete a user account on the record. Deleting an account deletes what
    hangs on it (role memberships, and conversations with their messages, of
    whatever app): the event counts each, by model, never their content, and
    is written in the same transaction (not recorded, not deleted)."""
    from django.db import router, transaction
    from django.db.models.deletion import Collector

    using = router.db_for_write(type(user))
    with transaction.atomic(using=using):
        collector = Collector(using=using)
        collector.collect([user])
        removed: dict[str, int] = {}
        for model, instances in collector.data.items():
            removed[model._meta.label_lower] = removed.get(model._meta.label_lower, 0) + len(instances)
        for queryset in collector.fast_deletes:
            count = queryset.count()
            if count:
                label = queryset.model._meta.label_lower
                removed[label] = removed.get(label, 0) + count
        user_id, username = user.pk, user.get_username()
        event = audit_event_write(
            kind=EventKind.USER_DELETED,
            request=request,
            actor=actor,
            resource_kind=ResourceKind.USER,
            resource_id=user_id,
            owner_id=user_id,
            owner_username=username,
            details={"user": username, "deleted": True, "deleted_with": dict(sorted(removed.items()))},
        )
        user.delete()
    return event
