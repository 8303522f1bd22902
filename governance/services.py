"""Governance actions: sync the install config, models, defaults, connections.

Each action is keyword-only and atomic (HackSoft style); the admin calls these.
"""

from __future__ import annotations

import os

from django.db import transaction
from django.utils.translation import gettext as _

from governance.field_crypto import decrypt_text, encrypt_text
from governance.models import DbConnection, Feature, FeatureDefault, LlmModel, Provider
from owlai.install_config import InstallConfig


class GovernanceError(Exception):
    """A governance action was refused; the message is shown to the admin."""


@transaction.atomic
def install_config_sync(*, config: InstallConfig) -> None:
    """Mirror providers and models from the install config into the database.

    Tier, kind and URL always come from the file. Models keep their admin-set
    `enabled` flag across syncs; entries that left the file are marked, not
    deleted, so history that refers to them still reads.
    """
    seen_providers: list[int] = []
    for spec in config.providers:
        provider, _created = Provider.objects.update_or_create(
            name=spec.name,
            defaults={
                "kind": spec.kind,
                "tier": spec.tier,
                "base_url": spec.base_url,
                "api_key_env": spec.api_key_env,
                "in_config": True,
            },
        )
        seen_providers.append(provider.pk)
        seen_models: list[int] = []
        for model_spec in spec.models:
            model, _created = LlmModel.objects.update_or_create(
                provider=provider, name=model_spec.name, defaults={"label": model_spec.label, "in_config": True}
            )
            seen_models.append(model.pk)
        LlmModel.objects.filter(provider=provider).exclude(pk__in=seen_models).update(in_config=False)
    Provider.objects.exclude(pk__in=seen_providers).update(in_config=False)
    LlmModel.objects.exclude(provider_id__in=seen_providers).update(in_config=False)
    for feature in Feature.values:
        FeatureDefault.objects.get_or_create(feature=feature)


@transaction.atomic
def model_set_enabled(*, model: LlmModel, enabled: bool) -> LlmModel:
    model.enabled = enabled
    model.save(update_fields=["enabled"])
    if not enabled:
        # A disabled model cannot stay a feature default.
        FeatureDefault.objects.filter(model=model).update(model=None)
    return model


@transaction.atomic
def feature_default_set(*, feature: str, model: LlmModel | None) -> FeatureDefault:
    if feature not in Feature.values:
        raise GovernanceError(_("Unknown feature: %(feature)s") % {"feature": feature})
    if model is not None and not model.usable:
        raise GovernanceError(_("Only an enabled model can be a feature default."))
    default, _created = FeatureDefault.objects.get_or_create(feature=feature)
    default.model = model
    default.save(update_fields=["model"])
    return default


def db_connection_set_stored_dsn(*, connection: DbConnection, dsn: str) -> None:
    """Store a DSN encrypted; it can be replaced but never read back in the admin."""
    connection.dsn_encrypted = encrypt_text(dsn.strip()) if dsn.strip() else ""
    connection.save(update_fields=["dsn_encrypted"])


def db_connection_dsn(*, connection: DbConnection) -> str:
    """The DSN to connect with. Raises GovernanceError when it is not available."""
    if connection.dsn_env:
        value = os.environ.get(connection.dsn_env, "")
        if not value:
            raise GovernanceError(
                _("Environment variable %(name)s holding the connection URL is not set.") % {"name": connection.dsn_env}
            )
        return value
    if connection.dsn_encrypted:
        return decrypt_text(connection.dsn_encrypted)
    raise GovernanceError(_("The connection has no DSN configured."))
