"""Who made a change: built once at the edge (a request, a task) and handed
to every service, so each record names the same user, address and browser.

    actor = actor_from_request(request)     # the admin, a view
    role_update(role=role, ..., actor=SYSTEM)  # a scheduled job, a command
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from django.conf import settings

USER_AGENT_MAX = 300  # AuditEvent.user_agent


@dataclass(frozen=True)
class Actor:
    user: Any = None  # an authenticated user, or None (the system)
    ip: str | None = None
    user_agent: str = ""

    @property
    def user_id(self) -> int | None:
        return self.user.pk if self.is_user else None

    @property
    def username(self) -> str:
        return self.user.get_username() if self.is_user else ""

    @property
    def is_user(self) -> bool:
        return bool(self.user is not None and getattr(self.user, "is_authenticated", False))


# Tasks, management commands, start-up: no user, no address.
SYSTEM = Actor()


def client_ip(request) -> str | None:
    """The client address as the server saw it. X-Forwarded-For is trusted
    only when the deployment says so (a proxy that sets it); otherwise anyone
    could write any address into the record."""
    raw = ""
    if getattr(settings, "OWLAI_TRUST_X_FORWARDED_FOR", False):
        raw = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")[0].strip()
    raw = raw or request.META.get("REMOTE_ADDR", "")
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        return None


def actor_from_request(request, *, user=None) -> Actor:
    """The actor of a request: its user (or `user`), address and browser."""
    return Actor(
        user=user if user is not None else getattr(request, "user", None),
        ip=client_ip(request),
        user_agent=request.META.get("HTTP_USER_AGENT", "")[:USER_AGENT_MAX],
    )


def as_actor(*, actor=None, request=None) -> Actor:
    """An Actor from what older callers pass: an Actor, a user and/or a request."""
    if isinstance(actor, Actor):
        return actor
    if request is not None:
        return actor_from_request(request, user=actor)
    return Actor(user=actor)
