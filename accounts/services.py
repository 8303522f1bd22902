"""Personal API tokens: created and revoked by their user or an admin, each
an audit event in the same transaction; every request a token authenticates
is an audit event too (who, which token, which endpoint), written before the
request is served."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiToken
from audit.events import audit_event_write
from audit.models import EventKind

# A key: this prefix, then 256 random bits. The prefix lets secret scanners
# and people recognise a leaked OwlAI key.
KEY_PREFIX = "owlai_"
_SHOWN_CHARS = len(KEY_PREFIX) + 6


def key_digest(key: str) -> str:
    """SHA-256 of the key. A key has 256 random bits, so a fast hash is
    enough: nobody can search that space, with or without a salt."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _may_manage(*, actor, owner_id: int, permission: str) -> bool:
    return bool(actor is not None and actor.is_authenticated and (actor.pk == owner_id or actor.has_perm(permission)))


def _event_details(token: ApiToken) -> dict:
    return {
        "name": token.name,
        "prefix": token.prefix,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }


def api_token_create(
    *, user, name: str, actor, expires_at: datetime | None = None, request=None
) -> tuple[ApiToken, str]:
    """A new token for `user`; returns it with its key, which is never stored
    and cannot be shown again. `actor` is the user themself or an admin who
    may add tokens."""
    if not _may_manage(actor=actor, owner_id=user.pk, permission="accounts.add_apitoken"):
        raise PermissionDenied(_("You may not create API tokens for this user."))
    name = (name or "").strip()
    if not name:
        raise ValueError(_("A token needs a name."))
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError(_("The expiry must be in the future."))
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name[:100],
            prefix=key[:_SHOWN_CHARS],
            digest=key_digest(key),
            created_by_username=actor.get_username(),
            expires_at=expires_at,
        )
        audit_event_write(
            kind=EventKind.API_TOKEN_CREATED,
            request=request,
            actor=actor,
            resource_kind="api_token",
            resource_id=token.pk,
            owner_id=user.pk,
            owner_username=user.get_username(),
            details=_event_details(token),
        )
    return token, key


def api_token_revoke(*, token: ApiToken, actor, request=None) -> ApiToken:
    """Revoke a token at once (its next request fails). Revoking a revoked
    token changes nothing and records nothing."""
    if not _may_manage(actor=actor, owner_id=token.user_id, permission="accounts.change_apitoken"):
        raise PermissionDenied(_("You may not revoke this API token."))
    with transaction.atomic():
        now = timezone.now()
        if not ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=now, revoked_by_username=actor.get_username()
        ):
            token.refresh_from_db()
            return token
        token.refresh_from_db()
        audit_event_write(
            kind=EventKind.API_TOKEN_REVOKED,
            request=request,
            actor=actor,
            resource_kind="api_token",
            resource_id=token.pk,
            owner_id=token.user_id,
            owner_username=token.user.get_username(),
            details=_event_details(token),
        )
    return token


def api_token_authenticate(*, key: str, request) -> ApiToken | None:
    """The usable token for `key`, or None. A request it authenticates is
    recorded (method and path, never the body or the key) before it is
    served: if the event cannot be written, AuditWriteError propagates and
    the request is refused."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    token = ApiToken.objects.usable().select_related("user").filter(digest=key_digest(key)).first()
    if token is None:
        return None
    with transaction.atomic():
        now = timezone.now()
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        audit_event_write(
            kind=EventKind.API_TOKEN_USED,
            request=request,
            actor=token.user,
            resource_kind="api_token",
            resource_id=token.pk,
            owner_id=token.user_id,
            owner_username=token.user.get_username(),
            details={"name": token.name, "prefix": token.prefix, "method": request.method, "path": request.path[:300]},
        )
    token.last_used_at = now
    return token
