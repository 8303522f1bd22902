"""`manage.py sync_install_config`: mirror providers and models from the
install config (OWLAI_CONFIG) into the database. Run it after `migrate` on
every deploy; the config was already validated when settings loaded."""

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils.translation import gettext as _

from governance.models import LlmModel, Provider
from governance.services import install_config_sync


class Command(BaseCommand):
    help = "Sync model providers and models from the install config into the database."

    def handle(self, *args, **options) -> None:
        install_config_sync(config=settings.OWLAI_INSTALL)
        self.stdout.write(
            _("Synced %(providers)d provider(s) and %(models)d model(s) from %(path)s.")
            % {
                "providers": Provider.objects.filter(in_config=True).count(),
                "models": LlmModel.objects.filter(in_config=True).count(),
                "path": settings.OWLAI_CONFIG_PATH,
            }
        )
