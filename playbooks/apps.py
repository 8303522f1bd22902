from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PlaybooksConfig(AppConfig):
    name = "playbooks"
    verbose_name = _("Playbooks")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Event types, the origin's standing approvals and the hook that
        # moves a run to its next node when a node's run ends.
        from playbooks import events, hooks  # noqa: F401

        hooks.connect()
