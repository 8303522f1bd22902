"""ASGI entry point: HTTP through Django, websockets through Channels.

Websockets are session-authenticated and origin-checked against ALLOWED_HOSTS.
Every refusal is a documented close code on an accepted socket (README,
"Websocket protocol"): a browser reports an HTTP 403 at the handshake only as
1006, which a page cannot tell from a network failure.
"""

import os
from urllib.parse import urlparse

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "owlai.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import OriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from audit.db_roles import enforce_runtime_db_role  # noqa: E402
from chat.consumers import CLOSE_FORBIDDEN, ClosingConsumer  # noqa: E402
from chat.routing import websocket_urlpatterns as chat_websockets  # noqa: E402
from governance.exposure import log_startup_warnings  # noqa: E402
from owlai.startup import freeze_startup_objects  # noqa: E402
from playbooks.routing import websocket_urlpatterns as playbook_websockets  # noqa: E402

# The surfaces' sockets first: chat's routes end with the catch-all that
# closes any other path with 4404.
websocket_urlpatterns = [*playbook_websockets, *chat_websockets]

# Refuse to serve when this process's database role could rewrite the audit
# trail (production; see OWLAI_DB_ROLE_CHECK and `manage.py audit_db_setup`).
enforce_runtime_db_role()
log_startup_warnings()


class ClosingOriginValidator(OriginValidator):
    """Channels' origin check (outermost: nothing else runs for a foreign
    origin, not even the session lookup), but a refused origin is accepted
    and closed with 4403 instead of HTTP 403 at the handshake."""

    def __init__(self, application, allowed_origins):
        super().__init__(application, allowed_origins)
        self._forbidden = ClosingConsumer.as_asgi(code=CLOSE_FORBIDDEN)

    async def __call__(self, scope, receive, send):
        origin = None
        for name, value in scope.get("headers", []):
            if name == b"origin":
                try:
                    origin = urlparse(value.decode("latin1"))
                except (UnicodeDecodeError, ValueError):
                    origin = None
        if self.valid_origin(origin):
            return await self.application(scope, receive, send)
        return await self._forbidden(scope, receive, send)


def allowed_hosts_origin_check(app):
    """As channels' AllowedHostsOriginValidator: origins must be ALLOWED_HOSTS."""
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return ClosingOriginValidator(app, allowed)


application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": allowed_hosts_origin_check(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# Last: everything built above lives as long as the process (owlai.startup).
freeze_startup_objects()
