"""Resource exposure: `all_models` or `internal_only`.

Opening a resource to all models is one-way: while it was open its data may
have reached external models, so calling it internal-only again would make
the flag lie. Three layers hold that: the services here, the admin form, and a
database trigger (so not even direct SQL can close an opened resource).
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from governance.models import Connector, DbConnection, DocumentCollection, Exposure, Provider, Tier

logger = logging.getLogger(__name__)

Resource = DbConnection | DocumentCollection | Connector


class ExposureError(Exception):
    """The requested exposure change is not allowed; the message explains why."""


# Lazy: read in the admin's language when shown, not in whichever language
# was active when this module was imported.
CLOSE_REFUSED = gettext_lazy(
    "A resource opened to all models cannot be made internal-only again: its data may already have "
    "reached external models. Create a new connection or collection for data that must stay internal."
)


def default_exposure_for_install() -> str:
    try:
        has_private = Provider.objects.filter(in_config=True, tier=Tier.PRIVATE).exists()
    except Exception:
        # Cannot tell (e.g. tables not migrated yet): the closed default.
        logger.exception("could not determine default exposure; using internal_only")
        return Exposure.INTERNAL_ONLY
    return Exposure.INTERNAL_ONLY if has_private else Exposure.ALL_MODELS


def exposure_change_allowed(*, old: str, new: str) -> bool:
    return not (old == Exposure.ALL_MODELS and new != Exposure.ALL_MODELS)


@transaction.atomic
def resource_open_to_all_models(*, resource: Resource, request=None) -> Resource:
    """Open a resource to external models. Irreversible; recorded in the same
    transaction (not recorded, not opened)."""
    locked = type(resource).objects.select_for_update().get(pk=resource.pk)
    if locked.exposure == Exposure.ALL_MODELS:
        return locked
    before = locked.exposure
    locked.exposure = Exposure.ALL_MODELS
    locked.save(update_fields=["exposure"])
    record_exposure_opened(resource=locked, before=before, request=request)
    return locked


def resource_set_exposure(*, resource: Resource, exposure: str, request=None) -> Resource:
    if exposure not in Exposure.values:
        raise ExposureError(_("Unknown exposure: %(value)s") % {"value": exposure})
    current = type(resource).objects.filter(pk=resource.pk).values_list("exposure", flat=True).first()
    if current is not None and not exposure_change_allowed(old=current, new=exposure):
        raise ExposureError(str(CLOSE_REFUSED))
    if exposure == Exposure.ALL_MODELS:
        return resource_open_to_all_models(resource=resource, request=request)
    return resource


def record_exposure_opened(*, resource: Resource, before: str | None, request=None) -> None:
    """Opening a resource (or creating it open) is a settings change on the record."""
    from audit.events import audit_event_write
    from audit.models import EventKind, ResourceKind

    if isinstance(resource, DbConnection):
        kind = ResourceKind.DB_CONNECTION
    elif isinstance(resource, DocumentCollection):
        kind = ResourceKind.DOCUMENT_COLLECTION
    else:
        kind = ResourceKind.CONNECTOR  # the only other resource with an exposure
    audit_event_write(
        kind=EventKind.RESOURCE_OPENED,
        request=request,
        resource_kind=kind,
        resource_id=resource.pk,
        details={"setting": f"exposure of {resource.name}", "before": before, "after": Exposure.ALL_MODELS},
    )


def embedding_exposure_warning() -> str | None:
    """Documents are sent to the embedding model when indexed. With a
    public embedding provider, internal-only resources would leave the network
    that way, whatever the turn-level rules say."""
    from django.conf import settings

    role = settings.OWLAI_INSTALL.roles.get("embedding")
    if role is None:
        return None
    provider = settings.OWLAI_INSTALL.provider(role.provider)
    if provider is None or provider.tier == Tier.PRIVATE:
        return None
    internal = (
        DbConnection.objects.filter(exposure=Exposure.INTERNAL_ONLY).exists()
        or DocumentCollection.objects.filter(exposure=Exposure.INTERNAL_ONLY).exists()
    )
    if not internal:
        return None
    return _(
        "The embedding model (%(provider)s / %(model)s) is on a public provider while internal-only "
        "resources exist: their documents leave the network when they are embedded. Use a private "
        "embedding provider in the install config."
    ) % {"provider": role.provider, "model": role.model}


def log_startup_warnings() -> None:
    """Called once by each entry point (ASGI app, Celery worker) at start-up."""
    try:
        warning = embedding_exposure_warning()
    except Exception:
        # The database may not be reachable or migrated yet; start-up goes on.
        logger.debug("embedding exposure check skipped", exc_info=True)
        return
    if warning:
        logger.warning("%s", warning)
