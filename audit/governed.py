"""Governed models: every change an admin makes to one goes through its
service, which saves it and writes its audit event in one transaction.

The owning app registers each governed model with the service functions the
admin calls (imports only go down, so the registry lives here):

    register_governed(Connector, save=connector_save, delete=connector_delete)

and its ModelAdmin takes `GovernedAdminMixin`, which replaces Django's
save_model / save_related / delete_model / delete_queryset with those
services (tests/test_governed_admin.py fails for a governed model whose admin
does not). The save is deferred from save_model to save_related so that one
service call saves the row, its many-to-many fields and its inlines, and
records them as one change: the before is read from the database inside that
call, never parked on the request between two admin hooks.

`GovernedModel` is the generic half the services share: the before/after
snapshot of a model's recorded fields (audit.changes), and a save or a delete
with its event.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import models, transaction

from audit.actors import Actor, actor_from_request
from audit.changes import Fields, change_record, has_change, json_value
from audit.events import audit_event_write
from audit.models import AuditEvent


@dataclass(frozen=True)
class GovernedModel:
    model: type[models.Model]
    resource_kind: str
    fields: Fields
    created: str
    updated: str
    deleted: str
    # Many-to-many fields among `fields.plain`, recorded as sorted names.
    m2m: tuple[str, ...] = ()
    # Further recorded values read by primary key (e.g. a collection's documents).
    extra: Callable[[Any], dict] | None = None
    # How a field is recorded when not as it is (a document's body: its digest).
    shown: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    name: Callable[[models.Model], str] = str
    # The user a change is about (owner_id/owner_username of the event).
    owner: Callable[[models.Model], Any] | None = None
    # The type of an update by what it changed (default: `updated`).
    update_kind: Callable[[dict], str] | None = None

    def snapshot(self, pk) -> dict | None:
        """The recorded values as stored now (locked until the transaction
        ends, so two saves cannot record the same before); None: no row."""
        instance = self.model._default_manager.select_for_update().filter(pk=pk).first()
        if instance is None:
            return None
        values = dict(self.extra(pk)) if self.extra is not None else {}
        for name in self.fields.all:
            if name in values:
                continue
            if name in self.m2m:
                values[name] = sorted(_related_name(related) for related in getattr(instance, name).all())
            else:
                value = getattr(instance, name)
                values[name] = json_value(self.shown[name](value) if name in self.shown else value)
        return values

    def save(
        self, *, instance: models.Model, actor: Actor, related: Callable[[], None] | None = None, **details
    ) -> AuditEvent | None:
        """Save `instance` (with its related rows: `related`), and record what
        changed; nothing changed, no event. A change that cannot be recorded
        does not happen (AuditWriteError rolls it back)."""
        with transaction.atomic():
            created = instance._state.adding or instance.pk is None
            before = None if created else self.snapshot(instance.pk)
            instance.save()
            if related is not None:
                related()
            record = change_record(before, self.snapshot(instance.pk), self.fields)
            if not created and not has_change(record):
                return None
            kind = self.created if created else self._update_kind(record)
            return self._write(kind, instance, actor, record, details)

    def around(self, *, pk, actor: Actor, apply: Callable[[], Any], **details) -> Any:
        """Run `apply` (a change made by code that saves the row itself, e.g.
        Django's password form) and record what it changed; returns what
        `apply` returned. No such row: `apply` alone (it refuses)."""
        with transaction.atomic():
            before = self.snapshot(pk)
            if before is None:
                return apply()
            result = apply()
            record = change_record(before, self.snapshot(pk), self.fields)
            if has_change(record):
                instance = self.model._default_manager.get(pk=pk)
                self._write(self._update_kind(record), instance, actor, record, details)
            return result

    def delete(self, *, instance: models.Model, actor: Actor, **details) -> AuditEvent:
        with transaction.atomic():
            record = change_record(self.snapshot(instance.pk), None, self.fields)
            pk = instance.pk
            instance.delete()
            instance.pk = pk  # the record names what was deleted
            return self._write(self.deleted, instance, actor, record, details)

    def _update_kind(self, record: dict) -> str:
        return self.update_kind(record) if self.update_kind is not None else self.updated

    def _write(self, kind: str, instance, actor: Actor, record: dict, details: dict) -> AuditEvent:
        owner = self.owner(instance) if self.owner is not None else None
        return audit_event_write(
            kind=kind,
            actor=actor,
            resource_kind=self.resource_kind,
            resource_id=instance.pk,
            owner_id=owner.pk if owner is not None else None,
            owner_username=owner.get_username() if owner is not None else "",
            details={"name": self.name(instance), **record, **details},
        )


def _related_name(obj: models.Model) -> str:
    # A permission by its code (its str() is translated text).
    if hasattr(obj, "codename") and hasattr(obj, "content_type"):
        return f"{obj.content_type.app_label}.{obj.codename}"
    return str(obj)


@dataclass(frozen=True)
class GovernedActions:
    """The services the admin calls for one governed model."""

    save: Callable[..., Any]  # save(instance=, actor=, related=)
    delete: Callable[..., Any]  # delete(instance=, actor=)


_GOVERNED: dict[type[models.Model], GovernedActions] = {}


def register_governed(model: type[models.Model], *, save: Callable, delete: Callable) -> None:
    _GOVERNED[model] = GovernedActions(save=save, delete=delete)


def governed_actions(model: type[models.Model]) -> GovernedActions:
    """The model's services; a model nobody registered is refused (the admin
    would otherwise save it with no record)."""
    try:
        return _GOVERNED[model]
    except KeyError:
        raise LookupError(f"{model._meta.label} is not a governed model") from None


def governed_models() -> list[type[models.Model]]:
    return list(_GOVERNED)


def is_governed(model: type[models.Model]) -> bool:
    return model in _GOVERNED


class GovernedAdminMixin:
    """A ModelAdmin of a governed model: saves and deletes through its services.

    Hooks for the admin itself: `governed_before_save(request, form, change)`
    runs before the service (e.g. to undo a field the form may not change),
    `governed_after_save(request, form, change)` inside the service's
    transaction after the related rows are saved (e.g. a write-only secret),
    so what it changes is in the same record."""

    def save_model(self, request, obj, form, change) -> None:
        # Deferred to save_related (see the module docstring).
        return None

    def save_related(self, request, form, formsets, change) -> None:
        actions = governed_actions(self.model)
        self.governed_before_save(request, form, change)

        def related() -> None:
            form.save_m2m()
            for formset in formsets:
                self.save_formset(request, form, formset, change=change)
            self.governed_after_save(request, form, change)

        actions.save(instance=form.instance, actor=actor_from_request(request), related=related)

    def delete_model(self, request, obj) -> None:
        governed_actions(self.model).delete(instance=obj, actor=actor_from_request(request))

    def delete_queryset(self, request, queryset) -> None:
        actor = actor_from_request(request)
        delete = governed_actions(self.model).delete
        with transaction.atomic():
            for obj in queryset:
                delete(instance=obj, actor=actor)

    def governed_before_save(self, request, form, change) -> None:
        return None

    def governed_after_save(self, request, form, change) -> None:
        return None
