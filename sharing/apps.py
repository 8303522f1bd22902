from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class SharingConfig(AppConfig):
    name = "sharing"
    verbose_name = _("Shared conversations")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The event types must be known before the first write and before an
        # audit screen names a row of them in words.
        from sharing import event_types  # noqa: F401
