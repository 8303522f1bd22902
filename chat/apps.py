from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the run task, which chat.turns.dispatch finds by name.
        # (Connector approvals are no longer a process-wide gate: the runner
        # gives each run's tool session its gate, chat.turns.runner.)
        from chat import tasks  # noqa: F401
