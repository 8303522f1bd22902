"""Personal API tokens: created and revoked by their user or an admin, each
an audit event in the same transaction; every request a token authenticates
is an audit event too (who, which token, which endpoint), written before the
request is served."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from accounts.models import ApiToken, TokenScope
from audit.actors import Actor
from audit.changes import Fields
from audit.events import audit_event_write, user_delete
from audit.governed import GovernedModel, register_governed
from audit.models import AuditEvent, EventKind, ResourceKind

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
        "scopes": list(token.scopes or []),
    }


def api_token_create(
    *, user, name: str, actor, expires_at: datetime | None = None, request=None, scopes=()
) -> tuple[ApiToken, str]:
    """A new token for `user` with `scopes` (TokenScope values); returns it
    with its key, which is never stored and cannot be shown again. `actor`
    is the user themself or an admin who may add tokens."""
    if not _may_manage(actor=actor, owner_id=user.pk, permission="accounts.add_apitoken"):
        raise PermissionDenied(_("You may not create API tokens for this user."))
    name = (name or "").strip()
    if not name:
        raise ValueError(_("A token needs a name."))
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError(_("The expiry must be in the future."))
    unknown = set(scopes) - set(TokenScope.values)
    if unknown:
        raise ValueError(_("Unknown token scope: %(scope)s") % {"scope": ", ".join(sorted(unknown))})
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name[:100],
            prefix=key[:_SHOWN_CHARS],
            digest=key_digest(key),
            created_by_username=actor.get_username(),
            expires_at=expires_at,
            scopes=sorted(set(scopes)),
        )
        audit_event_write(
            kind=EventKind.API_TOKEN_CREATED,
            request=request,
            actor=actor,
            resource_kind=ResourceKind.API_TOKEN,
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
            resource_kind=ResourceKind.API_TOKEN,
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
            resource_kind=ResourceKind.API_TOKEN,
            resource_id=token.pk,
            owner_id=token.user_id,
            owner_username=token.user.get_username(),
            details={"name": token.name, "prefix": token.prefix, "method": request.method, "path": request.path[:300]},
        )
    token.last_used_at = now
    return token


# --- users and groups: privilege changes on the record ---------------------------------
#
# Who made whom an administrator must be on the record: a user's staff and
# superuser flags, active flag, groups and permissions are recorded before
# and after (the password only as "changed"), and so are a group's permissions.

User = get_user_model()

_PRIVILEGES = ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")

USERS = GovernedModel(
    model=User,
    resource_kind=ResourceKind.USER,
    fields=Fields(plain=("username", *_PRIVILEGES), secret=("password",)),
    m2m=("groups", "user_permissions"),
    created=EventKind.USER_CREATED,
    updated=EventKind.USER_UPDATED,
    deleted=EventKind.USER_DELETED,  # user_delete writes it (it counts what went with the account)
    name=lambda user: user.get_username(),
    owner=lambda user: user,
    update_kind=lambda record: (
        EventKind.USER_PRIVILEGE_CHANGED
        if set(record["before"]) & set(_PRIVILEGES) or set(record["after"]) & set(_PRIVILEGES)
        else EventKind.USER_UPDATED
    ),
)


def _group_members(group_id) -> dict:
    # Deleting a group takes its permissions from each member: who, on the record.
    names = (
        User.objects.filter(groups=group_id).order_by(User.USERNAME_FIELD).values_list(User.USERNAME_FIELD, flat=True)
    )
    return {"members": list(names)}


GROUPS = GovernedModel(
    model=Group,
    resource_kind=ResourceKind.GROUP,
    fields=Fields(plain=("name", "permissions", "members")),
    m2m=("permissions",),
    extra=_group_members,
    created=EventKind.GROUP_CREATED,
    updated=EventKind.GROUP_UPDATED,
    deleted=EventKind.GROUP_DELETED,
)


def user_update(
    *, user, actor: Actor, fields: dict | None = None, groups=None, user_permissions=None, related=None
) -> AuditEvent | None:
    """Change a user (e.g. `fields={"is_staff": True}`, `groups=[...]`) on
    the record: one event with the before and after of what changed; none
    when nothing did."""
    allowed = {"username", "email", "first_name", "last_name", *_PRIVILEGES[:3]}
    unknown = set(fields or {}) - allowed
    if unknown:
        raise ValueError(f"not a user field: {sorted(unknown)}")
    for name, value in (fields or {}).items():
        setattr(user, name, value)

    def apply() -> None:
        if groups is not None:
            user.groups.set(groups)
        if user_permissions is not None:
            user.user_permissions.set(user_permissions)
        if related is not None:
            related()

    return USERS.save(instance=user, actor=actor, related=apply)


def user_save(*, instance, actor: Actor, related=None) -> AuditEvent | None:
    """The admin's save of a user (new or changed), with its form's related rows."""
    return USERS.save(instance=instance, actor=actor, related=related)


def user_password_change(*, user_id, actor: Actor, apply):
    """A password set by code that saves the user itself (the admin's
    password form): recorded as changed, never the hash."""
    return USERS.around(pk=user_id, actor=actor, apply=apply)


def user_remove(*, instance, actor: Actor) -> AuditEvent:
    return user_delete(user=instance, actor=actor)


def group_update(*, group, actor: Actor, name: str | None = None, permissions=None, related=None):
    if name is not None:
        group.name = name

    def apply() -> None:
        if permissions is not None:
            group.permissions.set(permissions)
        if related is not None:
            related()

    return GROUPS.save(instance=group, actor=actor, related=apply)


def group_save(*, instance, actor: Actor, related=None):
    return group_update(group=instance, actor=actor, related=related)


def group_delete(*, instance, actor: Actor) -> AuditEvent:
    return GROUPS.delete(instance=instance, actor=actor)


register_governed(User, save=user_save, delete=user_remove)
register_governed(Group, save=group_save, delete=group_delete)
