"""A governed model's admin saves and deletes through its services: one that
keeps Django's default save_model / delete_model (no GovernedAdminMixin)
would change it with no record."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin import AdminSite
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from audit.governed import GovernedAdminMixin, governed_actions, governed_models, is_governed
from audit.models import AuditEvent
from governance.models import (
    Connector,
    ConnectorTool,
    DbConnection,
    Document,
    DocumentCollection,
    FeatureDefault,
    LlmModel,
    Role,
)

HOOKS = ("save_model", "save_related", "delete_model", "delete_queryset")


def ungoverned_admins(site: AdminSite) -> list[str]:
    """Admins of governed models that lack the mixin or put Django's
    default back for one of its hooks."""
    offenders = []
    for model, model_admin in site._registry.items():
        if not is_governed(model):
            continue
        cls = type(model_admin)
        if not isinstance(model_admin, GovernedAdminMixin):
            offenders.append(f"{cls.__name__} ({model._meta.label}): no GovernedAdminMixin")
            continue
        for hook in HOOKS:
            if getattr(cls, hook) is getattr(admin.ModelAdmin, hook):
                offenders.append(f"{cls.__name__}.{hook} is Django's default")
    return offenders


def test_every_governed_models_admin_goes_through_its_services():
    assert ungoverned_admins(admin.site) == []


def test_the_governed_models_are_the_ones_that_grant_or_reach_data():
    # Not vacuous: the walk above covers these (each registered in the admin).
    expected = {get_user_model(), Group, Role, DbConnection, Connector, DocumentCollection, Document}
    expected |= {LlmModel, FeatureDefault, ConnectorTool}
    assert expected <= set(governed_models())
    assert expected <= set(admin.site._registry)


def test_an_admin_without_the_mixin_is_caught():
    site = AdminSite(name="probe")

    class PlainRoleAdmin(admin.ModelAdmin):
        pass

    class MixinUndoneAdmin(GovernedAdminMixin, admin.ModelAdmin):
        delete_model = admin.ModelAdmin.delete_model

    site.register(Role, PlainRoleAdmin)
    site.register(Connector, MixinUndoneAdmin)
    assert sorted(ungoverned_admins(site)) == [
        "MixinUndoneAdmin.delete_model is Django's default",
        "PlainRoleAdmin (governance.Role): no GovernedAdminMixin",
    ]


def test_a_model_nobody_registered_is_refused_not_saved_silently():
    from audit.models import AuditDigest

    with pytest.raises(LookupError):
        governed_actions(AuditDigest)


@pytest.mark.django_db
def test_the_connector_tool_policy_is_saved_through_its_service(client, django_user_model):
    admin_user = django_user_model.objects.create_superuser("root", password="pw-root-123")
    client.force_login(admin_user)
    crm = Connector.objects.create(name="crm", transport="streamable_http", url="https://crm.internal/mcp")
    tool = ConnectorTool.objects.create(connector=crm, name="lookup", slug="lookup", policy="allow")
    url = reverse("admin:governance_connectortool_change", args=[tool.pk])
    assert client.post(url, {"policy": "block"}).status_code == 302
    tool.refresh_from_db()
    assert tool.policy == "block"
    (event,) = AuditEvent.objects.filter(resource_kind="connector_tool")
    assert (event.details["before"], event.details["after"], event.actor_username) == ("allow", "block", "root")
    assert event.ip == "127.0.0.1"
