"""Governance actions: sync the install config, models, defaults, connections.

Each action is keyword-only and atomic (HackSoft style); the admin calls these.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction
from django.utils.translation import gettext as _

from audit.actors import Actor
from audit.changes import Fields, change_record
from audit.events import audit_event_write
from audit.governed import register_governed
from audit.models import EventKind, ResourceKind
from governance.field_crypto import decrypt_text, encrypt_text
from governance.grant_diff import EMPTY, WHOLE, RoleGrants, grant_changes, has_changes
from governance.models import DbConnection, DbGrant, Feature, FeatureDefault, LlmModel, Provider, Role
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


def _record_setting(
    *, kind: str, request, resource_kind: str, resource_id, setting: str, before, after, actor=None
) -> None:
    # Written inside the caller's transaction: a change that cannot be
    # recorded does not happen (AuditWriteError rolls it back).
    audit_event_write(
        kind=kind,
        request=request,
        actor=actor,
        resource_kind=resource_kind,
        resource_id=resource_id,
        details={"setting": setting, "before": before, "after": after},
    )


@transaction.atomic
def model_set_enabled(*, model: LlmModel, enabled: bool, request=None, actor=None) -> LlmModel:
    before = LlmModel.objects.filter(pk=model.pk).values_list("enabled", flat=True).first()
    model.enabled = enabled
    model.save(update_fields=["enabled"])
    if before != enabled:
        _record_setting(
            kind=EventKind.MODEL_ENABLED if enabled else EventKind.MODEL_DISABLED,
            request=request,
            actor=actor,
            resource_kind=ResourceKind.LLM_MODEL,
            resource_id=model.pk,
            setting=f"model {model.provider.name}/{model.name} enabled",
            before=before,
            after=enabled,
        )
    if not enabled:
        # A disabled model cannot stay a feature default.
        for default in FeatureDefault.objects.filter(model=model):
            feature_default_set(feature=default.feature, model=None, request=request, actor=actor)
    return model


def llm_model_update(*, model: LlmModel, actor: Actor, enabled: bool) -> LlmModel:
    """The one governed setting of a model (the rest comes from the install config)."""
    return model_set_enabled(model=model, enabled=enabled, actor=actor)


@transaction.atomic
def feature_default_set(*, feature: str, model: LlmModel | None, request=None, actor=None) -> FeatureDefault:
    if feature not in Feature.values:
        raise GovernanceError(_("Unknown feature: %(feature)s") % {"feature": feature})
    if model is not None and not model.usable:
        raise GovernanceError(_("Only an enabled model can be a feature default."))
    default, _created = FeatureDefault.objects.select_related("model__provider").get_or_create(feature=feature)
    before = _model_ref(default.model)
    default.model = model
    default.save(update_fields=["model"])
    if before != _model_ref(model):
        _record_setting(
            kind=EventKind.FEATURE_DEFAULT_SET,
            request=request,
            actor=actor,
            resource_kind=ResourceKind.FEATURE_DEFAULT,
            resource_id=feature,
            setting=f"default model for {feature}",
            before=before,
            after=_model_ref(model),
        )
    return default


def _model_ref(model: LlmModel | None) -> str | None:
    return f"{model.provider.name}/{model.name}" if model is not None else None


def role_grants_snapshot(*, role_id: int | None) -> RoleGrants:
    """The role's grants as they are in the database now (EMPTY for a new role)."""
    if role_id is None:
        return EMPTY
    databases: dict[str, set[str]] = {}
    for connection_name, whole, tables in DbGrant.objects.filter(role_id=role_id).values_list(
        "connection__name", "whole_database", "tables"
    ):
        scope = {WHOLE} if whole else {t.strip().lower() for t in (tables or []) if isinstance(t, str) and t.strip()}
        databases.setdefault(connection_name, set()).update(scope)
    collections = Role.document_collections.through.objects.filter(role_id=role_id).values_list(
        "documentcollection__name", flat=True
    )
    members = Role.users.through.objects.filter(role_id=role_id).values_list("user__username", flat=True)
    connectors = Role.connectors.through.objects.filter(role_id=role_id).values_list("connector__name", flat=True)
    return RoleGrants(
        databases={name: frozenset(scope) for name, scope in databases.items()},
        collections=frozenset(collections),
        members=frozenset(members),
        reveal_pii=Role.objects.filter(pk=role_id, can_view_raw_pii=True).exists(),
        connectors=frozenset(connectors),
    )


_GRANT_FIELDS = Fields(plain=("databases", "collections", "connectors", "members", "reveal_pii"))


def _grants_values(grants: RoleGrants) -> dict:
    return {
        "databases": {name: sorted(scope) for name, scope in sorted(grants.databases.items())},
        "collections": sorted(grants.collections),
        "connectors": sorted(grants.connectors),
        "members": sorted(grants.members),
        "reveal_pii": grants.reveal_pii,
    }


def role_permission_change_record(
    *,
    role_id,
    role_name: str,
    before: RoleGrants,
    after: RoleGrants,
    request=None,
    actor=None,
    kind=EventKind.ROLE_UPDATED,
):
    """One event per change (`kind`: role created, updated or deleted): what
    it opened and what it closed, and the before and after of the grants
    that changed."""
    changes = grant_changes(before, after)
    if not has_changes(changes):
        return None
    return audit_event_write(
        kind=kind,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.ROLE,
        resource_id=role_id,
        details={
            "role": role_name,
            **changes,
            **change_record(_grants_values(before), _grants_values(after), _GRANT_FIELDS),
        },
    )


@contextmanager
def roles_losing_grants(roles, *, request=None, actor=None) -> Iterator[None]:
    """Around a deletion that takes grants away (a connection, a collection,
    a connector): one role-updated event per role in `roles` whose grants
    changed, with their before and after. Inside the caller's transaction."""
    roles = list(roles.order_by("pk"))
    before = {role.pk: role_grants_snapshot(role_id=role.pk) for role in roles}
    yield
    for role in roles:
        role_permission_change_record(
            role_id=role.pk,
            role_name=role.name,
            before=before[role.pk],
            after=role_grants_snapshot(role_id=role.pk),
            request=request,
            actor=actor,
        )


def role_save(*, instance: Role, actor: Actor, related=None):
    """Save a role with its members and grants (`related`: the admin's form
    and inlines); one role event (created, updated) for what the save opened and
    closed, none when it changed no grant (a description)."""
    with transaction.atomic():
        created = instance._state.adding or instance.pk is None
        if not created:
            Role.objects.select_for_update().filter(pk=instance.pk).first()
        before = role_grants_snapshot(role_id=None if created else instance.pk)
        instance.save()
        if related is not None:
            related()
        return role_permission_change_record(
            role_id=instance.pk,
            role_name=instance.name,
            before=before,
            after=role_grants_snapshot(role_id=instance.pk),
            actor=actor,
            kind=EventKind.ROLE_CREATED if created else EventKind.ROLE_UPDATED,
        )


def role_update(
    *, role: Role, actor: Actor, fields: dict | None = None, users=None, document_collections=None, connectors=None
):
    """Change a role's fields and members/grants as a whole (None: unchanged)."""
    for name, value in (fields or {}).items():
        if name not in {"name", "description", "can_view_raw_pii"}:
            raise ValueError(f"not a role field: {name}")
        setattr(role, name, value)

    def related() -> None:
        for manager, value in (
            (role.users, users),
            (role.document_collections, document_collections),
            (role.connectors, connectors),
        ):
            if value is not None:
                manager.set(value)

    return role_save(instance=role, actor=actor, related=related)


def role_delete(*, instance: Role, actor: Actor):
    """Delete a role on the record: everything it granted, closed."""
    with transaction.atomic():
        before = role_grants_snapshot(role_id=instance.pk)
        role_id, name = instance.pk, instance.name
        instance.delete()
        return role_permission_change_record(
            role_id=role_id, role_name=name, before=before, after=EMPTY, actor=actor, kind=EventKind.ROLE_DELETED
        )


def db_connection_account_check(*, engine: str, dsn: str) -> None:
    """Refuse a DSN whose account may do more than read: superuser, server
    files, server programs (PostgreSQL predefined roles), FILE/SUPER and the
    like (MySQL). Raises GovernanceError with the reason; QueryError when the
    database cannot be reached to check."""
    from governance.sql.execute import account_risks

    risks = account_risks(engine=engine, dsn=dsn)
    if risks:
        raise GovernanceError(
            _(
                "This connection's database account may do more than read (%(risks)s). Give the connection "
                "its own account with only SELECT on its schemas."
            )
            % {"risks": ", ".join(risks)}
        )


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


# --- connection settings on the record ----------------------------------------------
#
# What a connection reaches (engine, DSN, schemas) decides what its existing
# grants cover: a changed DSN can point the same grants at another database.
# Each change is a connection event (connection_updated); the DSN itself never is (only where
# it comes from, and that it was replaced).

_CONNECTION_SETTINGS = {
    # field -> the setting's name in the record
    "name": "name",
    "engine": "engine",
    "schemas": "schemas",
    "row_cap": "row cap",
    "statement_timeout_ms": "statement timeout (ms)",
}


def db_connection_settings(*, connection_id: int | None) -> dict | None:
    """The connection's recorded settings as stored now (None: no such row).
    Holds the encrypted DSN only to tell whether it was replaced."""
    if connection_id is None:
        return None
    return (
        DbConnection.objects.filter(pk=connection_id).values(*_CONNECTION_SETTINGS, "dsn_env", "dsn_encrypted").first()
    )


def _dsn_source(settings_: dict) -> str:
    if settings_.get("dsn_env"):
        return f"env:{settings_['dsn_env']}"
    return "stored" if settings_.get("dsn_encrypted") else "-"


def _dsn_replaced(before: dict, after: dict) -> bool:
    if before.get("dsn_encrypted") == after.get("dsn_encrypted"):
        return False
    if not before.get("dsn_encrypted") or not after.get("dsn_encrypted"):
        return True
    try:
        # Fernet tokens differ for the same text: compare what they hold.
        return decrypt_text(before["dsn_encrypted"]) != decrypt_text(after["dsn_encrypted"])
    except Exception:  # unreadable: cannot show it is the same, so say it changed
        return True


def _public(settings_: dict) -> dict:
    """A connection's settings for the record: everything but the DSN."""
    return {**{key: settings_.get(key) for key in _CONNECTION_SETTINGS}, "dsn": _dsn_source(settings_)}


def db_connection_settings_change_record(
    *, connection: DbConnection, before: dict | None, request=None, actor=None
) -> list:
    """Record what a save changed (compared with `before`, read by
    db_connection_settings before the save): one connection_updated event per
    setting, in the caller's transaction; a new connection is one event with
    all its settings. Raises AuditWriteError: the save is then rolled back."""
    after = db_connection_settings(connection_id=connection.pk)
    if after is None:
        return []
    if before is None:
        return [
            _record_connection(
                request,
                connection,
                f"connection {after['name']}",
                before=None,
                after=_public(after),
                actor=actor,
                kind=EventKind.CONNECTION_CREATED,
            )
        ]
    events = []
    for field_name, label in _CONNECTION_SETTINGS.items():
        if before.get(field_name) != after.get(field_name):
            events.append(
                _record_connection(
                    request,
                    connection,
                    f"{label} of {after['name']}",
                    before=before.get(field_name),
                    after=after.get(field_name),
                    actor=actor,
                )
            )
    source_before, source_after = _dsn_source(before), _dsn_source(after)
    if source_before != source_after or _dsn_replaced(before, after):
        events.append(
            _record_connection(
                request,
                connection,
                f"DSN of {after['name']}",
                before=source_before,
                after=source_after,
                replaced=_dsn_replaced(before, after),
                actor=actor,
            )
        )
    return events


def _record_connection(
    request, connection, setting: str, *, before, after, actor=None, kind=EventKind.CONNECTION_UPDATED, **extra
):
    return audit_event_write(
        kind=kind,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.DB_CONNECTION,
        resource_id=connection.pk,
        details={"setting": setting, "before": before, "after": after, **extra},
    )


def connection_save(*, instance: DbConnection, actor: Actor, related=None, stored_dsn: str = "") -> list:
    """Save a connection (new or changed; `related`: the admin's form's other
    rows and a replaced DSN) and record each setting it changed, in one
    transaction (not recorded, not saved)."""
    with transaction.atomic():
        created = instance._state.adding or instance.pk is None
        if not created:
            DbConnection.objects.select_for_update().filter(pk=instance.pk).first()
        before = None if created else db_connection_settings(connection_id=instance.pk)
        instance.save()
        if stored_dsn:
            db_connection_set_stored_dsn(connection=instance, dsn=stored_dsn)
        if related is not None:
            related()
        return db_connection_settings_change_record(connection=instance, before=before, actor=actor)


def connection_create(*, actor: Actor, stored_dsn: str = "", **fields) -> DbConnection:
    connection = DbConnection(**fields)
    connection.full_clean()
    connection_save(instance=connection, actor=actor, stored_dsn=stored_dsn)
    return connection


def connection_update(*, connection: DbConnection, actor: Actor, stored_dsn: str = "", **fields) -> list:
    for name, value in fields.items():
        if name in {"exposure", "dsn_encrypted", "id", "pk"}:
            # Exposure opens only through governance.exposure (one-way,
            # recorded); the stored DSN only as `stored_dsn` (encrypted).
            raise ValueError(f"{name} is not changed here")
        setattr(connection, name, value)
    connection.full_clean()
    return connection_save(instance=connection, actor=actor, stored_dsn=stored_dsn)


def connection_delete(*, instance: DbConnection, actor: Actor) -> None:
    db_connection_delete(connection=instance, actor=actor)


@transaction.atomic
def db_connection_delete(*, connection: DbConnection, request=None, actor=None) -> None:
    """Delete a connection, with its grants and classifications, on the
    record: a connection_deleted event for the connection (its settings, not
    its DSN) and a role_updated event for every role whose grant went
    with it."""
    settings_ = db_connection_settings(connection_id=connection.pk)
    classified = connection.classifications.count()
    connection_id = connection.pk
    roles = Role.objects.filter(db_grants__connection=connection).distinct()
    with roles_losing_grants(roles, request=request, actor=actor):
        connection.delete()
    if settings_ is not None:
        connection.pk = connection_id
        _record_connection(
            request,
            connection,
            f"connection {settings_['name']}",
            before=_public(settings_),
            after=None,
            actor=actor,
            kind=EventKind.CONNECTION_DELETED,
            classifications_deleted=classified,
        )


register_governed(Role, save=role_save, delete=role_delete)
register_governed(DbConnection, save=connection_save, delete=connection_delete)
