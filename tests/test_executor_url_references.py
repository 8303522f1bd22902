"""Credentialed URLs reach the model only as per-conversation references
`[URL-n]`; the URL stays on the server (encrypted, per conversation), and
only the conversation's owner with the raw-personal-data permission can
resolve it, audited without the URL. A reference the model writes back is
never substituted into a tool's arguments."""

from __future__ import annotations

import json
import sqlite3

import pytest
from django.urls import reverse

from audit.models import AuditEvent, ToolCallAudit
from chat.models import UrlReference
from chat.services import conversation_create, conversation_delete
from tests.support.tool_world import tool_world

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

SIGNED = "https://files.example.com/report.pdf?X-Amz-Signature=abc123secret&X-Amz-Credential=AKIAXYZ"
BASIC = "ftp://backup:hunter2@ftp.example.com/dump.sql"
FORM = "https://files.example.com/form.pdf?token=s3cr3t-t0ken"


@pytest.fixture
def world(personas, settings, tmp_path, sample_sqlite_db):
    conn = sqlite3.connect(sample_sqlite_db.removeprefix("sqlite:///"))
    conn.execute("CREATE TABLE links (id INTEGER PRIMARY KEY, url TEXT, note TEXT)")
    conn.executemany(
        "INSERT INTO links VALUES (?, ?, ?)",
        [(1, SIGNED, f"mirror: {BASIC}"), (2, SIGNED, "plain https://example.com/ok"), (3, BASIC, None)],
    )
    conn.commit()
    conn.close()
    return tool_world(personas, settings, tmp_path)


def links(world, **context):
    payload, outcome = world.call(
        "run_sql", {"connection": "sales", "sql": "SELECT url, note FROM links ORDER BY id"}, **context
    )
    assert outcome == "success", payload
    return payload


def test_credentialed_urls_become_references_the_same_url_the_same_reference(world):
    payload = links(world)
    assert payload["rows"] == [
        ["[URL-1]", "mirror: [URL-2]"],
        ["[URL-1]", "plain https://example.com/ok"],  # no credential: shown as it is
        ["[URL-2]", None],
    ]
    text = json.dumps(payload)
    assert "abc123secret" not in text and "hunter2" not in text and "AKIA" not in text
    # Stored encrypted: the table never holds the URL in the clear.
    stored = list(UrlReference.objects.filter(conversation=world.conversation).values_list("number", "ciphertext"))
    assert sorted(n for n, _ in stored) == [1, 2]
    assert all("hunter2" not in c and "abc123secret" not in c for _, c in stored)
    # A later call in the conversation reuses them.
    assert links(world)["rows"][0][0] == "[URL-1]"
    assert UrlReference.objects.filter(conversation=world.conversation).count() == 2


def test_search_results_get_references_too(world):
    payload, outcome = world.call("search_documents", {"collection": "manuals", "query": "환불"})
    assert outcome == "success"
    assert "[URL-1]" in payload["hits"][0]["text"] and "s3cr3t" not in json.dumps(payload)


def test_references_are_per_conversation(world, client):
    other = conversation_create(owner=world.personas.staff)
    world.call("search_documents", {"collection": "manuals", "query": "환불"}, conversation=other)  # FORM is 1 there
    assert links(world)["rows"][0][0] == "[URL-1]"  # SIGNED is 1 here
    world.personas.role.can_view_raw_pii = True
    world.personas.role.save()
    client.force_login(world.personas.staff)
    here = client.post(resolve_url(world.conversation), {"reference": "[URL-1]"}, content_type="application/json")
    there = client.post(resolve_url(other), {"reference": "[URL-1]"}, content_type="application/json")
    assert (here.json()["url"], there.json()["url"]) == (SIGNED, FORM)


def resolve_url(conversation) -> str:
    return reverse("chat:conversation-url-reference", args=[conversation.pk])


def test_only_the_owner_with_the_permission_resolves_and_every_attempt_is_audited(world, client):
    links(world)
    staff, outsider = world.personas.staff, world.personas.outsider
    url = resolve_url(world.conversation)
    client.force_login(staff)
    refused = client.post(url, {"reference": "[URL-2]"}, content_type="application/json")
    assert refused.status_code == 403 and "hunter2" not in refused.content.decode()
    world.personas.role.can_view_raw_pii = True
    world.personas.role.save()
    allowed = client.post(url, {"reference": "[URL-2]"}, content_type="application/json")
    assert allowed.status_code == 200 and allowed.json() == {"reference": "[URL-2]", "url": BASIC}
    english = {"HTTP_ACCEPT_LANGUAGE": "en"}
    unknown = client.post(url, {"reference": "[URL-9]"}, content_type="application/json", **english)
    garbage = client.post(url, {"reference": "https://x"}, content_type="application/json", **english)
    # The person is told in words; the audit event keeps the reason's code.
    assert (unknown.status_code, unknown.json()["detail"]) == (
        403,
        "This reference does not belong to this conversation.",
    )
    assert (garbage.status_code, garbage.json()["detail"]) == (403, "This is not a URL reference.")
    client.force_login(outsider)
    assert client.post(url, {"reference": "[URL-2]"}, content_type="application/json").status_code == 404

    events = list(AuditEvent.objects.filter(kind__startswith="url_reveal").order_by("id"))
    assert [e.kind for e in events] == ["url_reveal_refused", "url_reveal", "url_reveal_refused", "url_reveal_refused"]
    assert all(e.actor_id == staff.pk and e.resource_id == str(world.conversation.pk) for e in events)
    assert [e.details.get("reference") for e in events] == ["[URL-2]", "[URL-2]", "[URL-9]", ""]
    recorded = json.dumps([[e.details, e.filters, e.user_agent] for e in events])
    assert "hunter2" not in recorded and "ftp.example.com" not in recorded


def test_a_reference_written_back_by_the_model_is_not_substituted(world):
    links(world)
    payload, outcome = world.call("run_sql", {"connection": "sales", "sql": "SELECT length('[URL-2]') AS n"})
    assert outcome == "success" and payload["rows"] == [[7]]  # the literal itself reached the database
    payload, outcome = world.call(
        "run_sql", {"connection": "sales", "sql": "SELECT count(*) AS n FROM links WHERE url = '[URL-2]'"}
    )
    assert payload["rows"] == [[0]]
    assert not ToolCallAudit.objects.filter(sql_text__contains="hunter2").exists()


def test_deleting_the_conversation_deletes_its_references_at_once(world):
    links(world)
    assert UrlReference.objects.filter(conversation=world.conversation).exists()
    conversation_delete(conversation=world.conversation)
    assert not UrlReference.objects.filter(conversation_id=world.conversation.pk).exists()


def test_a_deleted_conversation_stores_no_new_reference(world):
    from chat.url_references import DbUrlReferences
    from chat.vault import VaultClosed

    conversation_delete(conversation=world.conversation)
    with pytest.raises(VaultClosed):
        DbUrlReferences(world.conversation.pk).reference_for(BASIC)


def test_a_url_in_a_refusal_or_an_error_becomes_a_reference_too(world, monkeypatch):
    from governance.services import GovernanceError

    payload, outcome = world.call(BASIC, {})  # an unknown tool: its name is echoed
    assert outcome == "denied" and "hunter2" not in json.dumps(payload) and "[URL-" in payload["error"]

    def unreachable(**kwargs):
        raise GovernanceError(f"cannot reach {BASIC}")

    monkeypatch.setattr("chat.executor.tools.sql.execute_readonly", unreachable)
    payload, outcome = world.call("run_sql", {"connection": "sales", "sql": "SELECT 1"})
    assert outcome == "failed" and payload["error"].startswith("query failed: cannot reach [URL-")
    reasons = [(r.reason, r.call_reason) for r in ToolCallAudit.objects.all()]
    assert "hunter2" not in json.dumps(reasons)
