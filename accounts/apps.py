from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AccountsConfig(AppConfig):
    """Per-user settings and credentials: the language a user chose and the
    personal API tokens of non-browser clients. Below governance and chat
    (both read them), above audit (token changes are audit events)."""

    name = "accounts"
    verbose_name = _("Accounts")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the token scheme with drf-spectacular.
        from accounts import schema  # noqa: F401
