"""ASGI entry point: HTTP through Django, websockets through Channels.

Websockets are session-authenticated and origin-checked against ALLOWED_HOSTS.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "owlai.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402  (needs Django set up first)
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from audit.db_roles import enforce_runtime_db_role  # noqa: E402
from chat.routing import websocket_urlpatterns  # noqa: E402
from governance.exposure import log_startup_warnings  # noqa: E402

# Refuse to serve when this process's database role could rewrite the audit
# trail (production; see OWLAI_DB_ROLE_CHECK and `manage.py audit_db_setup`).
enforce_runtime_db_role()
log_startup_warnings()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
