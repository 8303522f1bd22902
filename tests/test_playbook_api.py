"""The playbooks API: save a conversation's turn as a playbook (its question
and tier), create with checked parameters, edit by the owner only, run with
parameters checked first (a translated error), the run's detail with masked
step outputs for its person, stop and re-run."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start

pytestmark = [pytest.mark.django_db(transaction=True)]

NODE = {"key": "names", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "$sql"}}


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_save_a_turn_as_a_playbook_and_run_it(personas, install_models):
    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(
        conversation=conversation, user=personas.staff, text="@sales SELECT phone FROM customers", model=None
    )
    turn_run(turn_id=turn.pk)
    staff = client_of(personas.staff)
    assert (
        client_of(personas.outsider)
        .post(reverse("playbooks:from-turn"), {"turn_id": turn.pk}, content_type="application/json")
        .status_code
        == 400
    )
    saved = staff.post(
        reverse("playbooks:from-turn"), {"turn_id": turn.pk, "name": "Phones"}, content_type="application/json"
    )
    assert saved.status_code == 201, saved.content
    playbook = saved.json()
    assert playbook["tier"] == "private" and playbook["nodes"][0]["prompt"] == "@sales SELECT phone FROM customers"
    started = staff.post(reverse("playbooks:runs", args=[playbook["id"]]), {}, content_type="application/json")
    assert started.status_code == 201
    run = staff.get(reverse("playbooks:run-detail", args=[started.json()["id"]])).json()
    assert run["status"] == "completed" and run["runs_as"] == "staff"
    assert "010-1234-5678" not in str(run) and "[" in run["nodes"][0]["output"]
    # Not someone else's to read here (the admin reads it, on the record).
    assert client_of(personas.outsider).get(reverse("playbooks:run-detail", args=[run["id"]])).status_code == 404
    again = staff.post(reverse("playbooks:run-rerun", args=[run["id"]]))
    assert again.status_code == 201 and again.json()["trigger"] == "rerun"


def test_create_edit_and_parameter_errors_in_the_persons_language(personas, install_models):
    staff = client_of(personas.staff)
    body = {
        "name": "Names",
        "model": install_models.pk,
        "parameters": [{"name": "sql", "kind": "text"}, {"name": "n", "kind": "number", "required": False}],
        "nodes": [NODE],
    }
    created = staff.post(reverse("playbooks:playbooks"), body, content_type="application/json")
    assert created.status_code == 201, created.content
    pid = created.json()["id"]
    refused = staff.post(
        reverse("playbooks:runs", args=[pid]),
        {"parameters": {"sql": "SELECT 1", "n": "many"}},
        content_type="application/json",
        HTTP_ACCEPT_LANGUAGE="ko",
    )
    assert refused.status_code == 400 and refused.json()["detail"] == "n은(는) 숫자여야 합니다."
    # Only the owner edits.
    assert (
        client_of(personas.outsider)
        .patch(reverse("playbooks:detail", args=[pid]), {"name": "x"}, content_type="application/json")
        .status_code
        == 404
    )
    renamed = staff.patch(
        reverse("playbooks:detail", args=[pid]), {"name": "All names"}, content_type="application/json"
    )
    assert renamed.json()["name"] == "All names"
    assert AuditEvent.objects.filter(kind="playbook_updated").count() == 1


def test_reordered_steps_that_use_a_later_output_are_refused_on_save(personas, install_models):
    """What the editor's move buttons send: the same steps in a new order.
    A step moved above the step whose output it uses would run before that
    output exists: the save is refused naming both steps, nothing changes;
    the order that keeps every reference earlier is saved as sent."""
    from playbooks.models import Playbook

    staff = client_of(personas.staff)
    summary = {"key": "summary", "kind": "agent", "prompt": "Summarise: $names"}
    first = {"key": "first", "kind": "agent", "prompt": "Say hello"}
    body = {"name": "Names", "model": install_models.pk, "parameters": [{"name": "sql", "kind": "text"}]}
    created = staff.post(
        reverse("playbooks:playbooks"), {**body, "nodes": [first, NODE, summary]}, content_type="application/json"
    )
    assert created.status_code == 201, created.content
    url = reverse("playbooks:detail", args=[created.json()["id"]])

    for language, words in (
        ("en", "Step 2 uses the output of step 3 (names), which runs only after it"),
        ("ko", "2단계가 3단계(names)의 출력을 쓰지만, 그 단계는 뒤에 실행됩니다."),
    ):
        moved_up = staff.patch(
            url, {"nodes": [first, summary, NODE]}, content_type="application/json", HTTP_ACCEPT_LANGUAGE=language
        )
        assert moved_up.status_code == 400 and words in moved_up.json()["detail"], moved_up.content
    assert [n["key"] for n in Playbook.objects.get().nodes] == ["first", "names", "summary"]

    reordered = staff.patch(url, {"nodes": [NODE, first, summary]}, content_type="application/json")
    assert reordered.status_code == 200, reordered.content
    assert [n["key"] for n in Playbook.objects.get().nodes] == ["names", "first", "summary"]
    assert AuditEvent.objects.filter(kind="playbook_updated").count() == 1  # the refused saves changed nothing
