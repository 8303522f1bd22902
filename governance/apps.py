from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class GovernanceConfig(AppConfig):
    name = "governance"
    verbose_name = _("Governance")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        post_migrate.connect(_reinstall_sqlite_triggers, sender=self, dispatch_uid="owlai_sqlite_triggers")


def _reinstall_sqlite_triggers(sender, using="default", **kwargs) -> None:
    # A table rebuilt by a SQLite migration has lost its triggers (see
    # governance.sqlite_triggers): put them back after every migrate.
    from django.db import connections

    from governance.sqlite_triggers import ensure_sqlite_triggers

    ensure_sqlite_triggers(connections[using])
