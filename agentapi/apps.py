from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentApiConfig(AppConfig):
    """Asking the governed agent from scripts: turns over HTTP (events as
    Server-Sent Events or by polling) and an OpenAI-compatible facade. A
    surface above chat: it starts and follows runs through chat.turns and
    copies none of the run core."""

    name = "agentapi"
    verbose_name = _("Agent API")
    default_auto_field = "django.db.models.BigAutoField"
