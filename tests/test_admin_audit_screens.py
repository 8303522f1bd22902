"""The audit screens as a compliance officer uses them: pickers and a time
range as filters, one time zone with its offset on screens and in CSV, event
lists that read without opening each record, no History on append-only
records, links to a conversation's metadata, OwlAI branding."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import translation

from audit.events import audit_event_write
from audit.models import AuditEvent, EventKind, ResourceKind, ToolCallAudit
from audit.services import tool_call_audit_write
from chat.models import Conversation
from chat.services import conversation_create

pytestmark = pytest.mark.django_db

SQL_LIST = "admin:audit_sqlexecution_changelist"


def sql_row(user, *, connection=None, resource_kind="db_connection", outcome="success", at=None, **extra):
    write = lambda: tool_call_audit_write(  # noqa: E731
        actor_id=user.pk,
        actor_username=extra.pop("username", user.username),
        tool=extra.pop("tool", "run_sql"),
        outcome=outcome,
        resource_kind=resource_kind,
        resource_id=connection.pk if connection is not None else None,
        resource_name=connection.name if connection is not None else "",
        row_count=1,
        sql_text=extra.pop("sql", "SELECT 1"),
        tables=["customers"],
        **extra,
    )
    if at is None:
        return write()
    with mock.patch("django.utils.timezone.now", return_value=at):
        return write()


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def listed(client, url_name=SQL_LIST, **params) -> list:
    response = client.get(reverse(url_name), params)
    assert response.status_code == 200, response.status_code
    return list(response.context["cl"].result_list)


# --- pickers ------------------------------------------------------------------------


def test_user_picker_narrows_to_the_picked_account(admin_client, personas):
    sql_row(personas.staff, sql="SELECT 'staff'")
    # Same user name, another account (a renamed or recreated user): not staff's.
    sql_row(personas.outsider, username="staff", sql="SELECT 'impostor'")
    sql_row(personas.outsider, sql="SELECT 'outsider'")
    rows = listed(admin_client, user_id=personas.staff.pk)
    assert [r.sql_text for r in rows] == ["SELECT 'staff'"]
    assert len(listed(admin_client)) == 3


def test_connection_picker_narrows_to_the_picked_connection(admin_client, personas):
    sql_row(personas.staff, connection=personas.sales, sql="SELECT 'sales'")
    sql_row(personas.staff, connection=personas.partial, sql="SELECT 'partial'")
    # A document collection with the same id is another resource.
    sql_row(
        personas.staff,
        connection=personas.sales,
        resource_kind="document_collection",
        tool="search_documents",
        sql="",
    )
    rows = listed(admin_client, "admin:audit_toolcallaudit_changelist", connection_id=personas.sales.pk)
    assert [(r.tool, r.sql_text) for r in rows] == [("run_sql", "SELECT 'sales'")]


def test_picked_filters_show_their_names_and_are_recorded_in_words(admin_client, personas):
    sql_row(personas.staff, connection=personas.sales)
    response = admin_client.get(
        reverse(SQL_LIST),
        {"user_id": personas.staff.pk, "connection_id": personas.sales.pk, "outcome__exact": "success"},
    )
    html = response.content.decode()
    assert f'<option value="{personas.staff.pk}" selected>staff</option>' in html
    assert f'<option value="{personas.sales.pk}" selected>sales</option>' in html
    event = AuditEvent.objects.get(kind="admin_view")
    assert event.filters == {
        "user_id": str(personas.staff.pk),
        "connection_id": str(personas.sales.pk),
        "outcome__exact": "success",
    }
    with translation.override("ko"):
        expected = {
            str(translation.gettext("user")): "staff",
            str(translation.gettext("DB connection")): "sales",
            str(translation.gettext("outcome")): str(translation.gettext("Success")),
        }
    assert event.details["filter_labels"] == expected


def test_picker_endpoint_answers_from_the_objects_own_admin(admin_client, personas):
    url = reverse("admin:audit_sqlexecution_pick", args=["user"])
    found = admin_client.get(url, {"term": "sta"}).json()
    assert [r["text"] for r in found["results"]] == ["staff"]
    assert found["results"][0]["id"] == str(personas.staff.pk)
    url = reverse("admin:audit_sqlexecution_pick", args=["db_connection"])
    assert [r["text"] for r in admin_client.get(url, {"term": "par"}).json()["results"]] == ["partial"]
    assert admin_client.get(reverse("admin:audit_sqlexecution_pick", args=["no_such_kind"])).status_code == 404


def test_picker_endpoint_needs_the_view_permission_of_the_screen_it_serves(client, personas, django_user_model):
    from django.contrib.auth.models import Permission

    clerk = django_user_model.objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_user"))
    client.force_login(clerk)
    url = reverse("admin:audit_sqlexecution_pick", args=["user"])
    assert client.get(url, {"term": "sta"}).status_code == 403  # may not view the SQL list
    clerk.user_permissions.set([Permission.objects.get(codename="view_sqlexecution")])
    clerk = django_user_model.objects.get(pk=clerk.pk)  # permission cache
    client.force_login(clerk)
    # No right on the users' own screen is needed to pick one to filter by.
    assert [r["text"] for r in client.get(url, {"term": "sta"}).json()["results"]] == ["staff"]
    client.logout()
    assert client.get(url, {"term": "sta"}).status_code == 302  # to the login page


@pytest.mark.parametrize("url_name", [SQL_LIST, "admin:governance_columnclassification_changelist"])
def test_the_picker_script_loads_after_djangos_jquery(admin_client, url_name):
    # It binds through `django.jQuery`; loaded before it, picking did nothing
    # (tests/test_browser_admin.py picks in a browser).
    html = admin_client.get(reverse(url_name)).content.decode()
    assert html.index("admin/js/jquery.init.js") < html.index("audit/picker_filter.js")


def test_a_malformed_picker_value_is_refused_not_ignored(admin_client, personas):
    sql_row(personas.staff)
    response = admin_client.get(reverse(SQL_LIST), {"user_id": "staff"})
    # The admin's "invalid filter" redirect (?e=1), never the unfiltered list.
    assert response.status_code == 302 and "e=1" in response["Location"]


# --- time range and time zone -------------------------------------------------------


@override_settings(TIME_ZONE="Asia/Seoul")
def test_time_range_is_read_in_the_installation_time_zone(admin_client, personas):
    # 23:59:59 and 00:00:01 in Seoul, on either side of midnight (UTC: the 1st, both).
    late = sql_row(personas.staff, at=datetime(2025, 3, 1, 14, 59, 59, tzinfo=UTC), sql="SELECT 'late'")
    sql_row(personas.staff, at=datetime(2025, 3, 1, 15, 0, 1, tzinfo=UTC), sql="SELECT 'next day'")
    rows = listed(
        admin_client,
        **{
            "created_at__range__gte_0": "2025-03-01",
            "created_at__range__gte_1": "00:00:00",
            "created_at__range__lte_0": "2025-03-01",
            "created_at__range__lte_1": "23:59:59",
        },
    )
    assert [r.pk for r in rows] == [late.pk]
    event = AuditEvent.objects.get(kind="admin_view")
    shown = next(v for k, v in event.details["filter_labels"].items() if "Asia/Seoul" in k)
    assert shown == "2025-03-01T00:00:00+09:00 – 2025-03-01T23:59:59+09:00"


@override_settings(TIME_ZONE="Asia/Seoul")
def test_list_detail_and_title_show_one_zone_with_its_offset(admin_client, personas):
    row = sql_row(personas.staff, at=datetime(2025, 3, 1, 15, 0, 1, tzinfo=UTC))
    listing = admin_client.get(reverse(SQL_LIST)).content.decode()
    assert "2025-03-02T00:00:01+09:00" in listing and "Asia/Seoul, UTC+09:00" in listing
    detail = admin_client.get(reverse("admin:audit_sqlexecution_change", args=[row.pk])).content.decode()
    # The title (breadcrumbs and heading) and the fields agree, offset included.
    assert detail.count("2025-03-02T00:00:01+09:00") >= 3
    assert "2025-03-01 15:00:01" not in detail and "2025-03-01T15:00:01" not in detail


@override_settings(TIME_ZONE="Asia/Seoul")
def test_csv_times_are_iso_8601_with_offsets_and_the_header_names_the_zone(admin_client, personas):
    sql_row(personas.staff, at=datetime(2025, 3, 1, 15, 0, 1, tzinfo=UTC), outcome="denied")
    audit_event_write(kind=EventKind.SETTINGS_CHANGE, actor=personas.admin, resource_kind=ResourceKind.ROLE)
    for url_name in ("admin:audit_sqlexecution_export", "admin:audit_auditevent_export"):
        response = admin_client.get(reverse(url_name))
        body = b"".join(response.streaming_content).decode("utf-8-sig")
        header, *rows = list(csv.reader(io.StringIO(body, newline="")))
        assert "Asia/Seoul, UTC+09:00" in header[0]
        for row in rows:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+09:00", row[0]), row[0]
    sql_csv = b"".join(admin_client.get(reverse("admin:audit_sqlexecution_export")).streaming_content)
    with translation.override("ko"):
        assert "2025-03-02T00:00:01+09:00" in sql_csv.decode("utf-8-sig")
        assert str(translation.gettext("Denied")) in sql_csv.decode("utf-8-sig")  # outcomes in words


# --- the admin-event list -------------------------------------------------------------


def test_event_list_reads_without_opening_each_record(admin_client, personas):
    audit_event_write(
        kind=EventKind.ADMIN_VIEW,
        actor=personas.outsider,
        resource_kind=ResourceKind.SQL_EXECUTION,
        owner_id=personas.staff.pk,
        owner_username="staff",
        row_count=37,
        filters={"user_id": "2"},
        details={"filter_labels": {"사용자": "staff"}},
    )
    audit_event_write(
        kind=EventKind.PERMISSION_CHANGE,
        actor=personas.admin,
        resource_kind=ResourceKind.ROLE,
        resource_id=personas.role.pk,
        details={"role": "sales-team", "opened": []},
    )
    response = admin_client.get(reverse("admin:audit_auditevent_changelist"), HTTP_ACCEPT_LANGUAGE="ko")
    html = response.content.decode()
    with translation.override("ko"):
        for words in (EventKind.ADMIN_VIEW.label, EventKind.PERMISSION_CHANGE.label, ResourceKind.SQL_EXECUTION.label):
            assert f">{words}" in html or f"{words} " in html, words
        role_target = f"{ResourceKind.ROLE.label} #{personas.role.pk} sales-team"
    assert role_target in html
    assert "사용자: staff" in html  # the filters, as the viewer saw them
    assert ">37<" in html  # rows
    visible = re.sub(r"<[^>]+>", " ", html)  # the text on screen, not URLs
    assert "admin_view" not in visible and "sql_execution" not in visible  # no codes


def test_event_filters_narrow_by_user_kind_and_resource_kind(admin_client, personas):
    audit_event_write(kind=EventKind.ADMIN_VIEW, actor=personas.staff, resource_kind=ResourceKind.USER)
    audit_event_write(kind=EventKind.SETTINGS_CHANGE, actor=personas.staff, resource_kind=ResourceKind.DB_CONNECTION)
    audit_event_write(kind=EventKind.SETTINGS_CHANGE, actor=personas.outsider, resource_kind=ResourceKind.ROLE)
    url = "admin:audit_auditevent_changelist"

    def kinds(**params):
        return sorted((e.actor_username, e.kind, e.resource_kind) for e in listed(admin_client, url, **params))

    assert kinds(user_id=personas.staff.pk) == [
        ("staff", "admin_view", "user"),
        ("staff", "settings_change", "db_connection"),
    ]
    assert kinds(kind__exact="settings_change", resource_kind="role") == [("outsider", "settings_change", "role")]


# --- no History; links ----------------------------------------------------------------


@pytest.mark.parametrize("screen", ["sqlexecution", "toolcallaudit", "auditevent"])
def test_append_only_records_have_no_history(admin_client, personas, screen):
    row = sql_row(personas.staff) if screen != "auditevent" else None
    if row is None:
        row = audit_event_write(kind=EventKind.ADMIN_VIEW, actor=personas.staff, resource_kind=ResourceKind.USER)
    detail = admin_client.get(reverse(f"admin:audit_{screen}_change", args=[row.pk]))
    assert detail.status_code == 200
    history = reverse(f"admin:audit_{screen}_history", args=[row.pk])
    assert history not in detail.content.decode() and 'class="historylink"' not in detail.content.decode()
    assert admin_client.get(history).status_code == 404


def test_execution_links_to_its_conversations_metadata_only(admin_client, personas):
    conversation = conversation_create(owner=personas.staff, title="제목-비밀-1234")
    row = sql_row(personas.staff, conversation_id=conversation.pk, turn_id=1)
    detail = admin_client.get(reverse("admin:audit_sqlexecution_change", args=[row.pk])).content.decode()
    link = reverse("admin:chat_conversation_change", args=[conversation.pk])
    assert f'href="{link}"' in detail
    page = admin_client.get(link).content.decode()
    assert "staff" in page and "제목-비밀-1234" not in page
    # A purged conversation: its id stays, as text.
    Conversation.objects.filter(pk=conversation.pk).delete()
    detail = admin_client.get(reverse("admin:audit_sqlexecution_change", args=[row.pk])).content.decode()
    assert str(conversation.pk) in detail and f'href="{link}"' not in detail


def test_the_admin_is_branded_owlai(admin_client):
    for language in ("ko", "en"):
        page = admin_client.get(reverse("admin:index"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
        with translation.override(language):
            assert str(translation.gettext("OwlAI administration")) in page
            assert str(translation.gettext("Django administration")) not in page
            assert f"<title>{translation.gettext('Governance and audit')} | " in page


def test_audit_lists_keep_their_big_table_settings(admin_client, personas):
    """The pickers did not bring back what the big tables cannot afford."""
    from django.contrib import admin as django_admin

    from audit.admin import CappedCountPaginator

    for model in (ToolCallAudit, AuditEvent):
        model_admin = django_admin.site._registry[model]
        assert model_admin.show_full_result_count is False
        assert model_admin.paginator is CappedCountPaginator
        assert model_admin.show_facets is django_admin.ShowFacets.NEVER


# --- a search term on the record --------------------------------------------------------


def test_a_list_search_is_recorded_by_its_fingerprint_and_found_by_its_term(admin_client, personas):
    import json

    term = "010-4821-7735"
    sql_row(personas.staff, sql=f"SELECT name FROM customers WHERE phone = '{term}'")
    listed(admin_client, q=term)
    admin_client.get(reverse("admin:audit_auditevent_export"), {"q": "Kim Minjun"})
    events = list(AuditEvent.objects.filter(kind__in=[EventKind.ADMIN_VIEW, EventKind.CSV_EXPORT]))
    assert {e.kind for e in events} == {EventKind.ADMIN_VIEW, EventKind.CSV_EXPORT}
    for event in events:
        recorded = json.dumps([event.filters, event.details], ensure_ascii=False)
        assert "4821" not in recorded and "7735" not in recorded and "minjun" not in recorded.lower()
        assert event.filters["q"].startswith("#")
    view = next(e for e in events if e.kind == EventKind.ADMIN_VIEW)
    assert "13" in json.dumps(view.details, ensure_ascii=False)  # its length, in words
    # The compliance officer's question "who searched for this number?" is
    # answered by typing it (spaces and case do not matter).
    found = listed(admin_client, "admin:audit_auditevent_changelist", q=f"  {term} ")
    assert view in found
    assert next(e for e in events if e.kind == EventKind.CSV_EXPORT) in listed(
        admin_client, "admin:audit_auditevent_changelist", q="kim  MINJUN"
    )
    assert view not in listed(admin_client, "admin:audit_auditevent_changelist", q="010-4821-7736")
