"""Who may ask the agent over HTTP: a personal API token (never the browser
session: the page has its websocket) that carries the `agent` scope, of an
active user (accounts.models.ApiToken.objects.usable refuses the others at
authentication). And how often: the websocket's turn-start limit, per user."""

from __future__ import annotations

import threading

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import exceptions
from rest_framework.permissions import BasePermission

from accounts.authentication import ApiTokenAuthentication
from accounts.models import ApiToken, TokenScope
from chat.consumers import TokenBucket


class AgentScope(BasePermission):
    """The request was authenticated by a token with the `agent` scope. Fails
    closed: anything but a scoped token (a session, a token without the
    scope, a missing one) is refused."""

    message = gettext_lazy("This API token may not ask the agent: create one with the 'agent' scope.")

    def has_permission(self, request, view) -> bool:
        token = getattr(request, "auth", None)
        return bool(
            isinstance(token, ApiToken)
            and token.has_scope(TokenScope.AGENT)
            and request.user is not None
            and request.user.is_active
        )


AUTHENTICATION = [ApiTokenAuthentication]
PERMISSIONS = [AgentScope]


# One bucket per user in this process, with the websocket's numbers
# (OWLAI_WS_TURN_STARTS_PER_MINUTE, burst OWLAI_WS_TURN_START_BURST): a
# script gets the pace a page gets. Per user, not per token, so minting
# tokens buys no extra turns; the one-turn-at-a-time rule of a conversation
# (chat.turns.start) holds across processes on top of it.
_buckets: dict[int, TokenBucket] = {}
_lock = threading.Lock()


def turn_start_allowed(user_id: int) -> bool:
    with _lock:
        bucket = _buckets.get(user_id)
        if bucket is None:
            bucket = _buckets[user_id] = TokenBucket(
                settings.OWLAI_WS_TURN_STARTS_PER_MINUTE / 60.0, settings.OWLAI_WS_TURN_START_BURST
            )
        return bucket.take()


def throttle_turn_start(user_id: int) -> None:
    if not turn_start_allowed(user_id):
        wait = 60.0 / settings.OWLAI_WS_TURN_STARTS_PER_MINUTE
        raise exceptions.Throttled(wait=wait, detail=_("Too many turns started; wait a moment before asking again."))
