"""`Authorization: Bearer owlai_…` for non-browser API clients."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission

from accounts.models import ApiToken, TokenScope
from accounts.services import api_token_authenticate
from audit.services import AuditWriteError


class AuditUnavailable(exceptions.APIException):
    status_code = 503
    default_code = "audit_unavailable"


class ApiTokenAuthentication(BaseAuthentication):
    """A personal API token (accounts.services). Each request it authenticates
    is an audit event; when that cannot be written the request is refused."""

    keyword = b"bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None  # not ours: the session may authenticate
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(_("Invalid Authorization header: send 'Bearer <token>'."))
        try:
            key = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked API token."))
        try:
            # The Django request: its META and path; the user is not read from it.
            token = api_token_authenticate(key=key, request=request._request)
        except AuditWriteError:
            raise AuditUnavailable(_("The request could not be recorded in the audit log, so it was refused."))
        if token is None:
            raise exceptions.AuthenticationFailed(_("Invalid, expired or revoked API token."))
        return token.user, token

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) without credentials.
        return 'Bearer realm="api"'


class TokensNeedAgentScope(BasePermission):
    """Sessions pass; a request authenticated by an API token passes only
    when the token carries the `agent` scope. For endpoints that let data
    leave or a run go on (answering a connector call's approval): a
    read-and-manage token leaked from a report script must not approve a
    mail the agent wants to send."""

    message = gettext_lazy("This API token may not answer approvals: create one with the 'agent' scope.")

    def has_permission(self, request, view) -> bool:
        token = getattr(request, "auth", None)
        if token is None:
            return True  # the session (IsAuthenticated still applies)
        return isinstance(token, ApiToken) and token.has_scope(TokenScope.AGENT)
