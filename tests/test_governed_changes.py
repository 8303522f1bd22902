"""Acceptance: every governed change goes through a service that records it.
A connector's URL, command or secret-header names, a role's grants, a
document upload, a user made staff or superuser or put in a group: each
writes exactly one event, with the before and after of what changed and the
actor (user, address, browser), through the admin as through the service;
never a secret's value."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ValidationError
from django.forms import MultiWidget
from django.urls import reverse

from accounts.services import group_update, user_update
from audit.actors import SYSTEM, Actor
from audit.models import AuditEvent
from audit.services import AuditWriteError
from governance.connectors.services import connector_create, connector_delete, connector_update
from governance.documents import document_create
from governance.models import Connector, Document, DocumentCollection
from governance.services import role_update
from owlai.install_config import parse_install_config
from tests.support.confirm import post_confirmed

pytestmark = pytest.mark.django_db

BROWSER = "governed-test-browser/1.0"

INSTALL = """
[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "http://x"
models = ["m"]

[[connector_commands]]
name = "crm"
command = "/opt/mcp/crm"

[[connector_commands]]
name = "crm-v2"
command = "/opt/mcp/crm2"
"""


@pytest.fixture
def install(settings):
    settings.OWLAI_INSTALL = parse_install_config(INSTALL)


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    client.defaults["HTTP_USER_AGENT"] = BROWSER
    return client


def form_data(client, url: str) -> dict:
    """What the change page's form would post back unchanged."""
    form = client.get(url).context["adminform"].form
    data = {}
    for name, bound in form.fields.items():
        if bound.disabled:
            continue
        value = form[name].value()
        widget = bound.widget
        if isinstance(widget, MultiWidget):
            for i, part in enumerate(widget.decompress(value)):
                data[f"{name}_{i}"] = "" if part is None else part
        elif isinstance(value, list | tuple):
            data[name] = [str(v) for v in value]
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = value
    return data


def only_event(**filters) -> AuditEvent:
    events = list(AuditEvent.objects.filter(**filters))
    assert len(events) == 1, [(e.kind, e.details) for e in AuditEvent.objects.all()]
    return events[0]


def assert_admin_actor(event: AuditEvent, username: str = "admin") -> None:
    assert (event.actor_username, event.ip, event.user_agent) == (username, "127.0.0.1", BROWSER)


# --- connectors ---------------------------------------------------------------------


def connector_form(connector: Connector | None = None, **changes) -> dict:
    data = {
        "name": "crm",
        "business_summary": "",
        "exposure": "internal_only",
        "transport": "streamable_http",
        "url": "https://crm.internal/mcp",
        "command": "",
        "secret_headers": "{}",
        "timeout_seconds": 30,
        "tools-TOTAL_FORMS": 0,
        "tools-INITIAL_FORMS": 0,
    }
    if connector is not None:
        data.update(
            name=connector.name,
            url=connector.url,
            secret_headers=json.dumps(connector.secret_headers),
            exposure=connector.exposure,
        )
    return {**data, **changes}


def test_a_connector_url_and_secret_header_change_is_one_event_without_secrets(install, admin_client):
    add = admin_client.post(
        reverse("admin:governance_connector_add"),
        connector_form(secret_headers='{"Authorization": "OWLAI_CONNECTOR_CRM_TOKEN"}'),
    )
    assert add.status_code == 302, add.content.decode()[:2000]
    crm = Connector.objects.get(name="crm")
    created = only_event(kind="connector_created")
    assert_admin_actor(created)
    assert created.details["after"]["secret_headers"] == ["Authorization"] and created.details["before"] == {}

    url = reverse("admin:governance_connector_change", args=[crm.pk])
    moved = "https://bob:p4ss-word@crm2.internal:8443/mcp?token=t0ken-value"
    headers = '{"Authorization": "OWLAI_CONNECTOR_OTHER_TOKEN", "X-Api-Key": "OWLAI_CONNECTOR_CRM_KEY"}'
    response = admin_client.post(url, connector_form(crm, url=moved, secret_headers=headers))
    assert response.status_code == 302, response.content.decode()[:2000]
    crm.refresh_from_db()
    assert crm.url == moved
    event = only_event(kind="connector_updated")
    assert_admin_actor(event)
    assert event.resource_kind == "connector" and event.resource_id == str(crm.pk)
    assert event.details["before"] == {
        "url": "https://crm.internal/mcp",
        "secret_headers": ["Authorization"],
    }
    assert event.details["after"] == {
        "url": "https://***@crm2.internal:8443/mcp?token=***",
        "secret_headers": ["Authorization", "X-Api-Key"],
    }
    # The Authorization header now reads another variable: changed, not shown.
    assert event.details["secrets_changed"] == ["secret_headers"]
    recorded = json.dumps(list(AuditEvent.objects.values("details")))
    for secret in ("p4ss-word", "t0ken-value", "OWLAI_CONNECTOR_OTHER_TOKEN", "OWLAI_CONNECTOR_CRM_KEY", "bob"):
        assert secret not in recorded

    # Saved again unchanged: no event.
    assert admin_client.post(url, connector_form(crm)).status_code == 302
    assert AuditEvent.objects.filter(kind="connector_updated").count() == 1


def test_a_connector_command_change_through_the_service_is_one_event(install, personas):
    actor = Actor(user=personas.admin, ip="10.0.0.7", user_agent="cli")
    crm = connector_create(actor=actor, name="crm", transport="stdio", command="crm")
    connector_update(connector=crm, actor=actor, command="crm-v2", timeout_seconds=10)
    event = only_event(kind="connector_updated")
    assert event.details["before"] == {"command": "crm", "timeout_seconds": 30}
    assert event.details["after"] == {"command": "crm-v2", "timeout_seconds": 10}
    assert (event.actor_username, event.ip, event.user_agent) == ("admin", "10.0.0.7", "cli")
    # A command the install config does not allow is refused, and not recorded.
    with pytest.raises(ValidationError):
        connector_update(connector=crm, actor=actor, command="/bin/sh")
    assert AuditEvent.objects.filter(kind="connector_updated").count() == 1
    crm.refresh_from_db()
    assert crm.command == "crm-v2"


def test_deleting_a_connector_records_it_and_the_role_grants_it_took(install, personas, admin_client):
    crm = connector_create(actor=SYSTEM, name="crm", transport="streamable_http", url="https://crm.internal/mcp")
    personas.role.connectors.add(crm)
    url = reverse("admin:governance_connector_delete", args=[crm.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert not Connector.objects.filter(pk=crm.pk).exists()
    deleted = only_event(kind="connector_deleted")
    assert_admin_actor(deleted)
    assert deleted.details["before"]["url"] == "https://crm.internal/mcp" and deleted.details["after"] == {}
    closed = only_event(kind="role_updated", resource_kind="role")
    assert closed.details["closed"] == [{"kind": "connector", "resource": "crm"}]


def test_a_connector_change_that_cannot_be_recorded_does_not_happen(install, personas, monkeypatch):
    crm = connector_create(actor=SYSTEM, name="crm", transport="streamable_http", url="https://crm.internal/mcp")

    def down(**kwargs):
        raise RuntimeError("audit store down")

    monkeypatch.setattr(AuditEvent.objects, "create", down)
    with pytest.raises(AuditWriteError):
        connector_update(connector=crm, actor=SYSTEM, url="https://elsewhere.example/mcp")
    assert Connector.objects.get(pk=crm.pk).url == "https://crm.internal/mcp"
    with pytest.raises(AuditWriteError):
        connector_delete(instance=crm, actor=SYSTEM)
    assert Connector.objects.filter(pk=crm.pk).exists()


# --- roles ----------------------------------------------------------------------------


def test_a_role_grant_change_in_the_admin_is_one_event_with_before_and_after(admin_client, personas):
    manuals = DocumentCollection.objects.create(name="manuals")
    role = personas.role
    data = {
        "name": role.name,
        "description": "",
        "users": [personas.staff.pk, personas.outsider.pk],
        "document_collections": [manuals.pk],
        "db_grants-TOTAL_FORMS": 0,
        "db_grants-INITIAL_FORMS": 0,
    }
    grants = list(role.db_grants.order_by("pk"))
    for i, grant in enumerate(grants):
        data.update(
            {
                f"db_grants-{i}-id": grant.pk,
                f"db_grants-{i}-role": role.pk,
                f"db_grants-{i}-connection": grant.connection_id,
                f"db_grants-{i}-whole_database": "on" if grant.whole_database else "",
                f"db_grants-{i}-tables": [f"{grant.connection_id}:{t}" for t in grant.tables],
            }
        )
    data["db_grants-TOTAL_FORMS"] = data["db_grants-INITIAL_FORMS"] = len(grants)
    data["db_grants-0-DELETE"] = "on"  # sales: whole database, withdrawn
    response = post_confirmed(admin_client, reverse("admin:governance_role_change", args=[role.pk]), data)
    assert response.status_code == 302, response.content.decode()[:3000]
    event = only_event(kind="role_updated")
    assert_admin_actor(event)
    assert event.details["before"] == {
        "databases": {"partial": ["customers"], "sales": ["*"]},
        "collections": [],
        "members": ["staff"],
    }
    assert event.details["after"] == {
        "databases": {"partial": ["customers"]},
        "collections": ["manuals"],
        "members": ["outsider", "staff"],
    }
    assert event.details["members_added"] == ["outsider"]


def test_a_role_change_through_the_service_names_its_actor(personas):
    actor = Actor(user=personas.admin, ip="10.0.0.8")
    role_update(role=personas.role, actor=actor, fields={"can_view_raw_pii": True}, users=[])
    event = only_event(kind="role_updated")
    assert (event.actor_username, event.ip) == ("admin", "10.0.0.8")
    assert event.details["before"] == {"members": ["staff"], "reveal_pii": False}
    assert event.details["after"] == {"members": [], "reveal_pii": True}
    # A description is no grant: no event.
    role_update(role=personas.role, actor=actor, fields={"description": "renamed"})
    assert AuditEvent.objects.count() == 1


# --- documents --------------------------------------------------------------------------


def test_a_document_upload_in_the_admin_is_one_event_without_its_text(admin_client, personas):
    manuals = DocumentCollection.objects.create(name="manuals")
    body = "연봉 테이블은 인사팀만 본다 (confidential-body-xyzzy)"
    response = admin_client.post(
        reverse("admin:governance_document_add"), {"collection": manuals.pk, "title": "HR policy", "body": body}
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    document = Document.objects.get(title="HR policy")
    event = only_event(kind="document_created")
    assert_admin_actor(event)
    assert event.resource_kind == "document" and event.resource_id == str(document.pk)
    assert event.details["before"] == {}
    assert event.details["after"]["collection"] == "manuals" and event.details["after"]["title"] == "HR policy"
    assert event.details["after"]["body"]["chars"] == len(body)
    assert "xyzzy" not in json.dumps(event.details, ensure_ascii=False)
    # Deleting it is on the record too.
    url = reverse("admin:governance_document_delete", args=[document.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert only_event(kind="document_deleted").details["before"]["title"] == "HR policy"


def test_a_document_uploaded_through_the_service_and_edited_inline(admin_client, personas):
    manuals = DocumentCollection.objects.create(name="manuals", exposure="internal_only")
    document = document_create(collection=manuals, title="Guide", body="v1", actor=SYSTEM)
    created = only_event(kind="document_created")
    assert created.actor_username == "" and created.actor_id is None  # the system
    url = reverse("admin:governance_documentcollection_change", args=[manuals.pk])
    data = {
        "name": "manuals",
        "business_summary": "",
        "exposure": "internal_only",
        "documents-TOTAL_FORMS": 1,
        "documents-INITIAL_FORMS": 1,
        "documents-0-id": document.pk,
        "documents-0-collection": manuals.pk,
        "documents-0-title": "Guide",
        "documents-0-body": "v2, longer",
    }
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    event = only_event(kind="collection_updated")
    assert_admin_actor(event)
    (before,), (after,) = event.details["before"]["documents"], event.details["after"]["documents"]
    assert (before["title"], before["chars"], after["chars"]) == ("Guide", 2, len("v2, longer"))
    assert before["sha256"] != after["sha256"]


# --- users and groups ----------------------------------------------------------------------


def test_making_a_user_staff_and_superuser_in_the_admin_is_one_event(admin_client, personas):
    url = reverse("admin:auth_user_change", args=[personas.outsider.pk])
    data = form_data(admin_client, url)
    analysts = Group.objects.create(name="analysts")
    data.update(is_staff="on", is_superuser="on", groups=[str(analysts.pk)])
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    personas.outsider.refresh_from_db()
    assert personas.outsider.is_superuser and personas.outsider.groups.filter(name="analysts").exists()
    event = only_event(kind="user_privilege_changed")
    assert_admin_actor(event)
    assert (event.owner_username, event.resource_id) == ("outsider", str(personas.outsider.pk))
    assert event.details["before"] == {"is_staff": False, "is_superuser": False, "groups": []}
    assert event.details["after"] == {"is_staff": True, "is_superuser": True, "groups": ["analysts"]}
    # Unchanged: no event.
    assert admin_client.post(url, form_data(admin_client, url)).status_code == 302
    assert AuditEvent.objects.filter(kind="user_privilege_changed").count() == 1


def test_deactivating_a_user_and_giving_a_permission_through_the_service(personas):
    actor = Actor(user=personas.admin, ip="10.0.0.9")
    permission = Permission.objects.get(codename="view_auditevent")
    user_update(user=personas.staff, actor=actor, fields={"is_active": False}, user_permissions=[permission])
    event = only_event(kind="user_privilege_changed")
    assert event.details["before"] == {"is_active": True, "user_permissions": []}
    assert event.details["after"] == {"is_active": False, "user_permissions": ["audit.view_auditevent"]}
    assert (event.actor_username, event.ip) == ("admin", "10.0.0.9")


def test_a_password_change_is_recorded_as_changed_never_as_its_hash(personas):
    old_hash = personas.staff.password
    personas.staff.set_password("a-new-password-123")
    user_update(user=personas.staff, actor=SYSTEM)
    event = only_event(kind="user_updated")
    assert event.details == {
        "name": "staff",
        "before": {"password": "set"},
        "after": {"password": "set"},
        "secrets_changed": ["password"],
    }
    assert old_hash not in json.dumps(event.details) and personas.staff.password not in json.dumps(event.details)


def test_a_privilege_change_that_cannot_be_recorded_does_not_happen(personas, monkeypatch):
    def down(**kwargs):
        raise RuntimeError("audit store down")

    monkeypatch.setattr(AuditEvent.objects, "create", down)
    with pytest.raises(AuditWriteError):
        user_update(user=personas.outsider, actor=SYSTEM, fields={"is_superuser": True})
    personas.outsider.refresh_from_db()
    assert not personas.outsider.is_superuser


def test_adding_a_user_to_a_group_in_the_admin_and_a_group_permission(admin_client, personas):
    admins = Group.objects.create(name="auditors")
    url = reverse("admin:auth_user_change", args=[personas.staff.pk])
    data = form_data(admin_client, url)
    data["groups"] = [str(admins.pk)]
    assert admin_client.post(url, data).status_code == 302
    event = only_event(kind="user_privilege_changed")
    assert (event.details["before"], event.details["after"]) == ({"groups": []}, {"groups": ["auditors"]})

    permission = Permission.objects.get(codename="view_auditevent")
    group_url = reverse("admin:auth_group_change", args=[admins.pk])
    assert admin_client.post(group_url, {"name": "auditors", "permissions": [permission.pk]}).status_code == 302
    group_event = only_event(kind="group_updated")
    assert_admin_actor(group_event)
    assert group_event.details["after"] == {"permissions": ["audit.view_auditevent"]}
    group_update(group=admins, actor=SYSTEM, name="auditors-2")
    assert AuditEvent.objects.filter(kind="group_updated").count() == 2


def test_a_user_created_in_the_admin_is_one_event_without_the_password(admin_client, personas):
    response = admin_client.post(
        reverse("admin:auth_user_add"),
        {
            "username": "newcomer",
            "password1": "a-long-pass-321",
            "password2": "a-long-pass-321",
            "usable_password": "true",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    user = get_user_model().objects.get(username="newcomer")
    event = only_event(kind="user_created")
    assert_admin_actor(event)
    assert (event.owner_username, event.details["before"]) == ("newcomer", {})
    assert event.details["after"] == {
        "username": "newcomer",
        "is_active": True,
        "is_staff": False,
        "is_superuser": False,
        "groups": [],
        "user_permissions": [],
        "password": "set",
    }
    assert user.password not in json.dumps(event.details) and "a-long-pass-321" not in json.dumps(event.details)


def test_deleting_a_group_is_on_the_record(admin_client, personas):
    group = Group.objects.create(name="temps")
    group.user_set.add(personas.staff)
    assert admin_client.post(reverse("admin:auth_group_delete", args=[group.pk]), {"post": "yes"}).status_code == 302
    event = only_event(kind="group_deleted")
    assert_admin_actor(event)
    assert event.details["before"] == {"name": "temps", "permissions": [], "members": ["staff"]}


def test_a_password_set_in_the_admins_password_form_is_recorded_as_changed(admin_client, personas):
    url = reverse("admin:auth_user_password_change", args=[personas.staff.pk])
    data = {"password1": "another-pass-654", "password2": "another-pass-654", "usable_password": "true"}
    assert admin_client.post(url, data).status_code == 302
    personas.staff.refresh_from_db()
    assert personas.staff.check_password("another-pass-654")
    event = only_event(kind="user_updated")
    assert_admin_actor(event)
    assert event.details["secrets_changed"] == ["password"] and personas.staff.password not in json.dumps(event.details)
    # A refused form changes nothing and records nothing.
    assert admin_client.post(url, {"password1": "x", "password2": "y"}).status_code == 200
    assert AuditEvent.objects.filter(kind="user_updated").count() == 1
