from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Connector calls that need approval ask the conversation's user
        # (without this the executor refuses them: it cannot ask anyone).
        from chat.approvals import ConnectorApprovalGate
        from chat.executor.policy import set_approval_gate

        set_approval_gate(ConnectorApprovalGate())
        # Registers the run task, which chat.turns.dispatch finds by name.
        from chat import tasks  # noqa: F401
