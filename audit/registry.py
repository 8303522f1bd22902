"""The models behind audit resource kinds, registered by the apps that own them.

Audit records name what they describe by kind and id, never by foreign key,
and the audit app sits below the apps that own those things (imports only go
down). So the owners register their models here, from their admin modules:

    register_resource_model(ResourceKind.DB_CONNECTION, DbConnection)

and the audit screens use the registration to offer a picker over the live
objects (filters by id) and to link a record to the object's admin page when
the object still exists. An unregistered kind simply has neither.
"""

from __future__ import annotations

from django.db import models

_MODELS: dict[str, type[models.Model]] = {}


def register_resource_model(kind: str, model: type[models.Model]) -> None:
    _MODELS[kind] = model


def resource_model(kind: str) -> type[models.Model] | None:
    return _MODELS.get(kind)
