"""Admin screens of playbook runs are on the record: the run list writes one
view event per request (rows returned, filters), a run's detail one with the
run's person, one's own runs nothing. The detail shows each node's input and
output masked. SQL history and tool calls filter by origin and link a row to
its run."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from playbooks.models import PlaybookRun
from playbooks.runs import playbook_run_start
from playbooks.services import playbook_create

pytestmark = [pytest.mark.usefixtures("english"), pytest.mark.django_db(transaction=True)]

NODE = {"key": "names", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "$sql"}}
SQL = "SELECT name, phone FROM customers ORDER BY id"


def a_run(owner, model) -> PlaybookRun:
    playbook = playbook_create(
        owner=owner,
        name=f"Phones of {owner.username}",
        model=model,
        parameters=[{"name": "sql", "kind": "text"}],
        nodes=[NODE],
        actor=owner,
    )
    return PlaybookRun.objects.get(pk=playbook_run_start(playbook=playbook, actor=owner, parameters={"sql": SQL}).pk)


def views() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind="admin_view", resource_kind="playbook_run").order_by("id"))


@pytest.fixture
def admin_client(personas):
    client = Client()
    client.force_login(personas.admin)
    return client


def test_the_run_list_writes_one_event_per_request(personas, install_models, admin_client):
    a_run(personas.staff, install_models)
    response = admin_client.get(reverse("admin:playbooks_playbookrun_changelist"), {"status__exact": "completed"})
    assert response.status_code == 200
    (event,) = views()
    assert event.row_count == 1 and event.filters == {"status__exact": "completed"}
    assert event.actor_id == personas.admin.pk


def test_a_run_detail_writes_one_event_with_its_person_and_shows_masked_outputs(personas, install_models, admin_client):
    run = a_run(personas.staff, install_models)
    response = admin_client.get(reverse("admin:playbooks_playbookrun_change", args=[run.pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "010-1234-5678" not in body and "김민준" in body  # names are not personal data here; phones are
    assert "[" in body and "names" in body
    (event,) = views()
    assert event.owner_id == personas.staff.pk and event.owner_username == "staff"
    assert event.resource_id == str(run.pk)


def test_viewing_only_ones_own_runs_writes_nothing(personas, install_models, admin_client):
    personas.role.users.add(personas.admin)
    run = a_run(personas.admin, install_models)
    assert admin_client.get(reverse("admin:playbooks_playbookrun_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:playbooks_playbookrun_change", args=[run.pk])).status_code == 200
    assert views() == []


def test_sql_history_filters_by_origin_and_links_to_the_run(personas, install_models, admin_client):
    from audit.models import ToolCallAudit

    run = a_run(personas.staff, install_models)
    listed = admin_client.get(reverse("admin:audit_sqlexecution_changelist"), {"origin__exact": "playbook"})
    assert listed.status_code == 200 and listed.context["cl"].result_count >= 1
    assert (
        admin_client.get(reverse("admin:audit_sqlexecution_changelist"), {"origin__exact": "chat"})
        .context["cl"]
        .result_count
        == 0
    )
    row = ToolCallAudit.objects.filter(origin_ref=run.reference).first()
    detail = admin_client.get(reverse("admin:audit_toolcallaudit_change", args=[row.pk])).content.decode()
    assert reverse("admin:playbooks_playbookrun_change", args=[run.pk]) in detail
