"""What revoking an API token stops (audit.confirm shows it before the
revocation applies). Here, not in governance.impact: accounts sits below
governance, and the token admin lives here."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import ApiToken
from audit.confirm import Impact, ImpactLine
from audit.models import AuditEvent, EventKind

WINDOW_DAYS = 30


def api_token_revoke_impact(token: ApiToken) -> Impact | None:
    """The token's owner, when it was last used and its requests of the last
    30 days (from the API-request events): what stops working at once.
    None: already revoked."""
    if token.revoked_at is not None:
        return None
    since = timezone.now() - timedelta(days=WINDOW_DAYS)
    uses = AuditEvent.objects.filter(
        kind=EventKind.API_TOKEN_USED, resource_kind="api_token", resource_id=str(token.pk), created_at__gte=since
    ).count()
    owner = token.user.get_username()
    facts = {
        "token": f"{token.name} ({token.prefix}…)",
        "user": owner,
        "last_used_at": token.last_used_at.isoformat() if token.last_used_at else None,
        "requests_last_30_days": uses,
    }
    return Impact(
        change="api_token_revoke",
        resource_kind="api_token",
        resource_id=token.pk,
        event_kinds=(EventKind.API_TOKEN_REVOKED,),
        title=_("API token %(token)s of %(user)s: revoked") % {"token": facts["token"], "user": owner},
        facts=facts,
        lines=[
            ImpactLine("requests_last_30_days", _("Requests made with it in the last 30 days"), uses, warn=True),
            ImpactLine("last_used_at", _("Last used"), token.last_used_at or _("never")),
            ImpactLine("user", _("Owner (scripts using it stop at once)"), owner),
        ],
    )
