"""The admin's turn preview of a playbook: what a run would be given (its
tier, the person it acts as, tool schemas, system prompt, whether each tool
step's tool is offered), one admin view event naming the playbook, the
rights chat's turn preview needs, and only people who may run it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent, EventKind, ResourceKind
from governance.models import Tier
from playbooks.services import playbook_create, playbook_share

pytestmark = [pytest.mark.django_db(transaction=True)]

NODES = [
    {"key": "phones", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "SELECT 1"}},
    {"key": "summary", "kind": "agent", "prompt": "정리해 줘: $phones"},
]


@pytest.fixture
def playbook(personas, install_models):
    return playbook_create(
        owner=personas.staff, name="전화번호 정리", model=install_models, nodes=NODES, actor=personas.staff
    )


def _url(playbook, **query) -> str:
    url = reverse("admin:playbooks_playbook_turn_preview", args=[playbook.pk])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def test_preview_shows_what_a_run_would_see_and_is_recorded(personas, playbook):
    admin = Client()
    admin.force_login(personas.admin)
    page = admin.get(_url(playbook)).content.decode()
    assert 'id="preview-steps"' in page and "정리해 줘: $phones" in page
    assert "&quot;run_sql&quot;" in page  # the tool schemas the run's model is offered
    who = page.split('id="preview-who">')[1].split("</h2>")[0]
    assert "staff" in who and str(Tier("private").label) in who
    event = AuditEvent.objects.get(kind=EventKind.ADMIN_VIEW, resource_kind=ResourceKind.TURN_PREVIEW)
    assert event.details["playbook_id"] == playbook.pk and event.owner_username == "staff"
    change = admin.get(reverse("admin:playbooks_playbook_change", args=[playbook.pk])).content.decode()
    assert _url(playbook) in change


def test_preview_acts_only_as_someone_who_may_run_it(personas, playbook):
    admin = Client()
    admin.force_login(personas.admin)
    assert admin.get(_url(playbook, user=personas.outsider.pk)).status_code == 404
    playbook_share(playbook=playbook, users=[personas.outsider], actor=personas.staff)
    page = admin.get(_url(playbook, user=personas.outsider.pk)).content.decode()
    assert "outsider" in page
    # The outsider has no grant on `sales`: the tool step is offered (run_sql
    # is built in), the connection is not among the resources.
    assert AuditEvent.objects.filter(resource_kind=ResourceKind.TURN_PREVIEW, owner_username="outsider").count() == 1


def test_preview_needs_the_rights_to_see_roles_and_users(personas, playbook, django_user_model):
    clerk = django_user_model.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_playbook"))
    client = Client()
    client.force_login(clerk)
    assert client.get(_url(playbook)).status_code == 404
    assert not AuditEvent.objects.filter(resource_kind=ResourceKind.TURN_PREVIEW).exists()
