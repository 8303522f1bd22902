"""Admin pages beyond the lists: the classification coverage page, the turn
preview (both admin view events), and two sweeps over every admin page: no
message content of anyone's conversation in any of them, and no English
left on the Korean screens."""

from __future__ import annotations

import html as html_lib
import json
import re

import pytest
from django.contrib import admin
from django.urls import NoReverseMatch, reverse

import owlai.asgi  # noqa: F401  (imported early: its first import configures logging)
from audit.models import AuditEvent
from audit.services import tool_call_audit_write
from chat.models import Message, Turn, TurnEvent
from chat.services import conversation_create
from chat.turns.start import turn_start
from governance.models import ColumnClassification, DbConnection, MaskStat
from governance.schema_analysis import classify_column
from tests.support.fake_llm import text
from tests.support.governed import governed_connection
from tests.test_tier_exposure import fake, run_turn, world  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


# --- classification coverage -----------------------------------------------------------


def coverage_url(connection) -> str:
    return reverse("admin:governance_columnclassification_coverage", args=[connection.pk])


def section(page: str, table_id: str) -> str:
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    return match.group(1) if match else ""


def test_coverage_shows_the_three_gaps_and_is_a_view_event(client, sqlite_customer_db, django_user_model):
    governed = governed_connection(sqlite_customer_db, django_user_model)
    connection = governed.connection
    # customers.phone classified "not personal data" by mistake: a real query
    # masks its values with the detectors all the same, and counts them.
    ColumnClassification.objects.filter(connection=connection, table_name="customers", column_name="phone").update(
        pii_kind=""
    )
    payload, outcome = governed.run("SELECT name, phone FROM customers")
    assert outcome == "success" and "010-1234-5678" not in json.dumps(payload, ensure_ascii=False)
    assert MaskStat.objects.filter(table_name="customers", column_name="phone", pii_kind="phone").exists()
    # customers.city was never analysed; orders.note is a suggestion.
    ColumnClassification.objects.filter(connection=connection, table_name="customers", column_name="city").delete()
    ColumnClassification.objects.filter(connection=connection, table_name="orders", column_name="note").update(
        state="suggested", source="auto"
    )
    admin_user = django_user_model.objects.create_superuser("boss", "b@example.com", "pw-boss-123")
    client.force_login(admin_user)
    response = client.get(coverage_url(connection))
    assert response.status_code == 200
    page = response.content.decode()
    never, unconfirmed, masked = (section(page, t) for t in ("never-analysed", "unconfirmed", "masked-while-none"))
    assert "<td>customers</td><td>city</td>" in never and "phone" not in never
    assert ">note</a>" in unconfirmed and "memo" not in unconfirmed
    assert "<td>customers</td><td>phone</td><td>3</td>" in masked and "email" not in masked
    event = AuditEvent.objects.get(kind="admin_view", resource_kind="classification_coverage")
    assert event.resource_id == str(connection.pk) and event.actor_username == "boss"
    assert event.row_count == 3


def test_coverage_of_an_unreachable_database_still_shows_what_is_known(admin_client, personas):
    broken = DbConnection.objects.create(name="gone", engine="sqlite", dsn_env="OWLAI_TEST_UNSET_DSN")
    ColumnClassification.objects.create(
        connection=broken, table_name="t", column_name="c", source="auto", state="suggested"
    )
    page = admin_client.get(coverage_url(broken)).content.decode()
    assert "OWLAI_TEST_UNSET_DSN" in page  # why the live columns are missing
    assert ">c</a>" in section(page, "unconfirmed")


def test_coverage_that_cannot_be_recorded_is_not_shown(admin_client, personas, monkeypatch):
    def down(**kwargs):
        raise RuntimeError("audit store down")

    monkeypatch.setattr(AuditEvent.objects, "create", down)
    response = admin_client.get(coverage_url(personas.sales))
    assert response.status_code == 503


# --- turn preview ----------------------------------------------------------------------


def preview(client, user, tier):
    return client.get(reverse("admin:chat_conversation_turn_preview"), {"user": user.pk, "tier": tier})


def pre(page: str, element_id: str) -> str:
    match = re.search(rf'<pre id="{element_id}"[^>]*>(.*?)</pre>', page, re.S)
    return html_lib.unescape(match.group(1)) if match else ""


@pytest.mark.parametrize(("tier", "model"), [("public", "cloud/cloud-model"), ("private", "onprem/inhouse-model")])
def test_turn_preview_is_exactly_what_a_turn_sends(client, world, fake, django_user_model, tier, model):  # noqa: F811
    user = world["user"]
    fake.script = [text("네")]
    run_turn(conversation_create(owner=user), user, "안녕", model=model)
    sent = fake.requests[0]
    boss = django_user_model.objects.create_superuser("boss", "b@example.com", "pw-boss-123")
    client.force_login(boss)
    page = preview(client, user, tier).content.decode()
    assert pre(page, "preview-prompt") == sent["messages"][0]["content"]
    assert json.loads(pre(page, "preview-tools")) == sent.get("tools", [])
    hidden = re.search(r'<p id="preview-hidden">(.*?)</p>', page, re.S).group(1)
    if tier == "public":
        # Internal-only resources: not even named to the model; listed apart for the admin.
        assert "hr_internal" in hidden and "hr_internal" not in pre(page, "preview-prompt")
    else:
        assert "hr_internal" not in hidden and "hr_internal" in pre(page, "preview-prompt")
    event = AuditEvent.objects.get(kind="admin_view", resource_kind="turn_preview")
    assert (event.owner_id, event.owner_username, event.details) == (user.pk, "analyst", {"tier": tier})


def test_turn_preview_needs_the_right_to_see_roles_and_users(client, personas, django_user_model):
    from django.contrib.auth.models import Permission

    clerk = django_user_model.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client.force_login(clerk)
    assert preview(client, personas.staff, "private").status_code == 404
    assert not AuditEvent.objects.filter(resource_kind="turn_preview").exists()


def test_turn_preview_that_cannot_be_recorded_is_not_shown(admin_client, personas, monkeypatch):
    def down(**kwargs):
        raise RuntimeError("audit store down")

    monkeypatch.setattr(AuditEvent.objects, "create", down)
    response = preview(admin_client, personas.staff, "private")
    assert response.status_code == 503 and b"sales" not in response.content


# --- sweeps over every admin page -------------------------------------------------------

MARKER = "xyzzy-본문-7731"


@pytest.fixture
def populated(personas):
    """Someone else's conversation whose every part carries MARKER, and the
    audit rows of what it touched."""
    conversation = conversation_create(owner=personas.staff, title=f"제목 {MARKER}")
    turn = turn_start(conversation=conversation, user=personas.staff, text=f"질문 {MARKER}", model=None)
    Message.objects.create(conversation=conversation, turn=turn, role="tool", content=f"결과 {MARKER}")
    Message.objects.create(conversation=conversation, turn=turn, role="assistant", content=f"답 {MARKER}")
    TurnEvent.objects.create(turn=turn, seq=99, type="message.delta", payload={"text": MARKER})
    tool_call_audit_write(
        actor_id=personas.staff.pk,
        actor_username="staff",
        tool="run_sql",
        outcome="success",
        resource_id=personas.sales.pk,
        resource_name="sales",
        row_count=1,
        sql_text="SELECT 1",
        conversation_id=conversation.pk,
        turn_id=turn.pk,
    )
    ColumnClassification.objects.create(
        connection=personas.sales,
        table_name="customers",
        column_name="phone",
        pii_kind="phone",
        source="auto",
        state="suggested",
        reason=classify_column("phone", ["010-1234-5678"]).reason,  # stored in English, shown translated
    )
    return conversation


def every_admin_page(personas) -> list[str]:
    urls = [reverse("admin:index")]
    for model, model_admin in admin.site._registry.items():
        opts = model._meta
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        urls.append(reverse("admin:app_list", args=[opts.app_label]))
        for pk in model_admin.get_queryset(type("R", (), {"user": personas.admin})()).values_list("pk", flat=True)[:3]:
            for view in ("change", "delete", "history"):
                try:
                    urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=[pk]))
                except NoReverseMatch:
                    pass
    for tier in ("private", "public"):
        urls.append(reverse("admin:chat_conversation_turn_preview") + f"?user={personas.staff.pk}&tier={tier}")
    for connection in DbConnection.objects.all():
        urls.append(coverage_url(connection))
    return sorted(set(urls))


def test_no_admin_page_shows_anyones_message_content(admin_client, personas, populated):
    assert Message.objects.filter(content__contains=MARKER).count() == 3 and Turn.objects.exists()
    pages = every_admin_page(personas)
    assert any("/chat/conversation/" in url and "/change/" in url for url in pages)
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code in (200, 403, 404), (url, response.status_code)
        assert MARKER.encode() not in response.content, url


def visible_text(page: str) -> str:
    page = re.sub(r"<(script|style|pre|textarea)\b.*?</\1>", " ", page, flags=re.S)  # code and typed data
    # Django stores permission names in the database in English when it
    # migrates, and names auto-created join rows in English ("Role_users
    # object"): data of Django's, not strings of these screens.
    page = re.sub(r'<select name="(user_)?permissions".*?</select>', " ", page, flags=re.S)
    page = re.sub(r'<ul id="deleted-objects">.*?(?=<form)', " ", page, flags=re.S)
    page = re.sub(r"<bdi>.*?</bdi>", " ", page, flags=re.S)  # the parts of a password hash
    page = re.sub(r"<[^>]+>", " ", page)
    return html_lib.unescape(page)


# Words a Korean screen may show in Latin letters: names, codes and data.
NOT_ENGLISH_PROSE = {
    "OwlAI",
    "CSV",
    "SQL",
    "ISO",
    "UTC",
    "IP",
    "ID",
    "DB",
    "DSN",
    "JSON",
    "URL",
    "API",
    "PostgreSQL",
    "MySQL",
    "MariaDB",
    "SQLite",
    "Asia",
    "Seoul",
    "Mac",
    "Command",
    "Control",
    "Shift",
    # The test data: users, connections, tables, columns, tools, addresses.
    "admin",
    "staff",
    "outsider",
    "sales",
    "partial",
    "hr_secret",
    "customers",
    "phone",
    "SELECT",
    "run_sql",
    "example",
    "com",
    "out",
    "sales-team",
    "main",
    "public",
    "ms",
    "amount",
    "city",
    "customer_id",
    "employee",
    "id",
    "name",
    "orders",
    "salaries",
    # The MCP transport's own name, kept beside its Korean description.
    "stdio",
    # Django names an auto-created join table after the two classes ("Role-user relationships").
    "Role-user",
    "Group-permission",
}


def english_words(page: str) -> set[str]:
    words = set()
    for word in re.findall(r"[A-Za-z][A-Za-z_\-']+", visible_text(page)):
        if re.fullmatch(r"[0-9a-f-]+", word):  # a piece of a UUID
            continue
        if word not in NOT_ENGLISH_PROSE and not word.isupper():
            words.add(word)
    return words


def test_korean_admin_pages_have_no_english_left(admin_client, personas, populated):
    leftovers = {}
    for url in every_admin_page(personas):
        response = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="ko")
        if response.status_code != 200:
            continue
        words = english_words(response.content.decode())
        if words:
            leftovers[url] = sorted(words)
    assert leftovers == {}, json.dumps(leftovers, ensure_ascii=False)


def korean_words(page: str, allowed: set[str]) -> set[str]:
    words = set(re.findall(r"[\uac00-\ud7a3]+", visible_text(page)))
    return {w for w in words if not any(w in name for name in allowed)}


def test_english_admin_pages_have_no_korean_left(admin_client, personas, populated):
    """The other way round: an English reader sees no Korean interface text.
    Korean data stays (names people gave things: the built-in group is named
    in the installation's language)."""
    from accounts.builtin_groups import auditor_group

    # Django names an auto-created join model when it is imported, in the
    # language active then ("Role-user 관계들" in a deletion's summary).
    data = {auditor_group().name, "관계들"}
    leftovers = {}
    for url in every_admin_page(personas):
        response = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="en")
        if response.status_code != 200:
            continue
        words = korean_words(response.content.decode(), data)
        if words:
            leftovers[url] = sorted(words)
    assert leftovers == {}, json.dumps(leftovers, ensure_ascii=False)
