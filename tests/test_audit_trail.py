"""The audit trail: records outlive conversations, admin views and changes are
events, the screens are read-only, CSV exports are capped and safe."""

from __future__ import annotations

import csv
import io
import uuid

import pytest
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from audit.models import AuditEvent, ToolCallAudit
from audit.search_terms import search_fingerprint
from audit.services import AuditWriteError, tool_call_audit_write
from chat.models import Conversation
from chat.services import conversation_create
from governance.models import DbConnection, DbGrant, DocumentCollection, LlmModel, Role
from governance.services import feature_default_set, install_config_sync, model_set_enabled
from owlai.install_config import parse_install_config
from tests.support.confirm import post_confirmed
from tests.support.governed import classify

pytestmark = pytest.mark.django_db


def write_sql_row(user, sql="SELECT 1", conversation_id=None, **extra):
    return tool_call_audit_write(
        actor_id=user.pk,
        actor_username=user.username,
        tool="run_sql",
        outcome=extra.pop("outcome", "success"),
        resource_name=extra.pop("resource_name", "sales"),
        resource_id=extra.pop("resource_id", None),
        row_count=1,
        sql_text=sql,
        tables=extra.pop("tables", ["customers"]),
        conversation_id=conversation_id,
        turn_id=1,
    )


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    client.defaults["HTTP_USER_AGENT"] = "pytest-browser/1.0"
    return client


def test_deleting_a_conversation_leaves_its_audit_rows(personas):
    conversation = conversation_create(owner=personas.staff)
    conversation_id = conversation.pk
    write_sql_row(personas.staff, conversation_id=conversation_id)
    conversation.delete()
    assert not Conversation.objects.filter(pk=conversation_id).exists()
    assert ToolCallAudit.objects.get().conversation_id == conversation_id


def test_sql_history_list_writes_one_event_with_count_and_filters(admin_client, personas):
    for i in range(3):
        write_sql_row(personas.staff, sql=f"SELECT {i} FROM customers")
    url = reverse("admin:audit_sqlexecution_changelist")
    response = admin_client.get(url, {"outcome": "success", "q": "customers"})
    assert response.status_code == 200
    event = AuditEvent.objects.get()
    assert (event.kind, event.resource_kind, event.row_count) == ("admin_view", "sql_execution", 3)
    assert event.actor_id == personas.admin.pk and event.actor_username == "admin"
    assert event.ip == "127.0.0.1" and event.user_agent == "pytest-browser/1.0"
    # The search term is kept by its fingerprint (audit.search_terms), never as typed.
    assert event.filters == {"outcome": "success", "q": search_fingerprint("customers")}
    assert "customers" not in str(event.details)


def test_sql_history_detail_writes_one_event_with_owner(admin_client, personas):
    row = write_sql_row(personas.staff)
    response = admin_client.get(reverse("admin:audit_sqlexecution_change", args=[row.pk]))
    assert response.status_code == 200
    event = AuditEvent.objects.get()
    assert (event.resource_id, event.owner_id, event.owner_username) == (str(row.pk), personas.staff.pk, "staff")


def test_viewing_only_ones_own_records_writes_none(admin_client, personas):
    mine = write_sql_row(personas.admin)
    admin_client.get(reverse("admin:audit_sqlexecution_changelist"))
    admin_client.get(reverse("admin:audit_sqlexecution_change", args=[mine.pk]))
    admin_client.get(reverse("admin:auth_user_change", args=[personas.admin.pk]))
    assert AuditEvent.objects.count() == 0
    # Someone else's row in the list makes it a view of others' records.
    write_sql_row(personas.staff)
    admin_client.get(reverse("admin:audit_sqlexecution_changelist"))
    assert AuditEvent.objects.count() == 1


@pytest.mark.parametrize(
    ("url_name", "kind"),
    [("admin:auth_user_changelist", "user"), ("admin:chat_conversation_changelist", "conversation")],
)
def test_user_and_conversation_lists_are_view_events(admin_client, personas, url_name, kind):
    conversation_create(owner=personas.staff)
    assert admin_client.get(reverse(url_name)).status_code == 200
    event = AuditEvent.objects.get()
    assert event.resource_kind == kind and event.row_count >= 1


def test_view_not_recorded_is_not_shown(admin_client, personas, monkeypatch):
    write_sql_row(personas.staff, sql="SELECT secret_column FROM customers")

    def fail(**kwargs):
        raise RuntimeError("audit table unavailable")

    monkeypatch.setattr(AuditEvent.objects, "create", fail)
    response = admin_client.get(reverse("admin:audit_sqlexecution_changelist"))
    assert response.status_code == 503 and b"secret_column" not in response.content


def test_audit_screens_are_read_only(admin_client, personas):
    row = write_sql_row(personas.staff)
    assert admin_client.get(reverse("admin:audit_toolcallaudit_add")).status_code == 403
    admin_client.post(reverse("admin:audit_sqlexecution_change", args=[row.pk]), {"sql_text": "changed"})
    admin_client.post(reverse("admin:audit_toolcallaudit_delete", args=[row.pk]), {"post": "yes"})
    row.refresh_from_db()
    assert row.sql_text == "SELECT 1"


def test_search_finds_sql_text_and_table_names(admin_client, personas):
    write_sql_row(personas.staff, sql="SELECT count(*) FROM orders", tables=["orders"])
    write_sql_row(personas.staff, sql="SELECT * FROM v", tables=["customers"])
    url = reverse("admin:audit_sqlexecution_changelist")
    by_text = admin_client.get(url, {"q": "count(*)"}).context["cl"].result_list
    by_table = admin_client.get(url, {"q": "customers"}).context["cl"].result_list
    assert [r.sql_text for r in by_text] == ["SELECT count(*) FROM orders"]
    assert [r.sql_text for r in by_table] == ["SELECT * FROM v"]


def test_filters_by_user_connection_outcome_and_period(admin_client, personas):
    write_sql_row(personas.staff, resource_name="sales", resource_id=personas.sales.pk, outcome="denied")
    write_sql_row(personas.outsider, resource_name="hr_secret", resource_id=personas.hidden.pk, outcome="success")
    url = reverse("admin:audit_sqlexecution_changelist")

    def names(**params):
        return sorted(r.actor_username for r in admin_client.get(url, params).context["cl"].result_list)

    assert names(user_id=personas.staff.pk) == ["staff"]
    assert names(connection_id=personas.hidden.pk) == ["outsider"]
    assert names(outcome="denied") == ["staff"]
    assert names(period="1d") == ["outsider", "staff"]


# --- permission and settings changes -------------------------------------------


def test_role_grant_change_writes_one_event_with_opened_and_closed(admin_client, personas):
    role = personas.role  # sales: whole DB; partial: customers table
    collection = DocumentCollection.objects.create(name="manuals", exposure="all_models")
    classify(personas.partial, {"customers": {"id": None}, "orders": {"id": None}})  # the analysed schema
    url = reverse("admin:governance_role_change", args=[role.pk])
    grants = list(DbGrant.objects.filter(role=role).order_by("connection__name"))  # partial, sales
    response = post_confirmed(
        admin_client,
        url,
        {
            "name": role.name,
            "description": "",
            "users": [personas.staff.pk, personas.outsider.pk],
            "document_collections": [collection.pk],
            "db_grants-TOTAL_FORMS": 3,
            "db_grants-INITIAL_FORMS": 2,
            # partial: customers -> customers + orders
            "db_grants-0-id": grants[0].pk,
            "db_grants-0-role": role.pk,
            "db_grants-0-connection": personas.partial.pk,
            "db_grants-0-tables": [f"{personas.partial.pk}:customers", f"{personas.partial.pk}:orders"],
            # sales: whole database -> deleted
            "db_grants-1-id": grants[1].pk,
            "db_grants-1-role": role.pk,
            "db_grants-1-connection": personas.sales.pk,
            "db_grants-1-whole_database": "on",
            "db_grants-1-DELETE": "on",
            # hr_secret: new whole-database grant
            "db_grants-2-role": role.pk,
            "db_grants-2-connection": personas.hidden.pk,
            "db_grants-2-whole_database": "on",
        },
    )
    assert response.status_code == 302, response.content[:3000]
    event = AuditEvent.objects.get(kind="role_updated")
    assert event.resource_id == str(role.pk) and event.actor_username == "admin"
    assert event.details["opened"] == [
        {"kind": "document_collection", "resource": "manuals"},
        {"kind": "db_connection", "resource": "hr_secret", "scope": "whole_database"},
        {"kind": "db_connection", "resource": "partial", "scope": "table", "table": "orders"},
    ]
    assert event.details["closed"] == [{"kind": "db_connection", "resource": "sales", "scope": "whole_database"}]
    assert event.details["members_added"] == ["outsider"]


def test_saving_a_role_without_changes_writes_no_event(admin_client, personas):
    role = Role.objects.create(name="empty-role")
    admin_client.post(
        reverse("admin:governance_role_change", args=[role.pk]),
        {"name": "empty-role", "description": "x", "db_grants-TOTAL_FORMS": 0, "db_grants-INITIAL_FORMS": 0},
    )
    assert not AuditEvent.objects.filter(resource_kind="role").exists()


def test_model_and_default_changes_are_fine_grained_events(personas, rf):
    install_config_sync(
        config=parse_install_config(
            '[[providers]]\nname="p"\nkind="openai"\ntier="private"\nbase_url="http://x"\nmodels=["a","b"]\n'
        )
    )
    a, b = LlmModel.objects.get(name="a"), LlmModel.objects.get(name="b")
    request = rf.get("/", HTTP_USER_AGENT="ua", REMOTE_ADDR="10.1.2.3")
    request.user = personas.admin
    feature_default_set(feature="chat", model=a, request=request)
    model_set_enabled(model=a, enabled=False, request=request)  # also clears the default
    events = list(AuditEvent.objects.exclude(kind="admin_view").order_by("id"))
    assert [(e.kind, e.details["before"], e.details["after"]) for e in events] == [
        ("feature_default_set", None, "p/a"),
        ("model_disabled", True, False),
        ("feature_default_set", "p/a", None),
    ]
    assert events[0].ip == "10.1.2.3" and events[0].actor_username == "admin"
    assert b.enabled


def test_settings_change_that_cannot_be_recorded_does_not_happen(personas, monkeypatch):
    install_config_sync(
        config=parse_install_config(
            '[[providers]]\nname="p"\nkind="openai"\ntier="private"\nbase_url="http://x"\nmodels=["a"]\n'
        )
    )
    model = LlmModel.objects.get(name="a")

    def fail(**kwargs):
        raise RuntimeError("down")

    monkeypatch.setattr(AuditEvent.objects, "create", fail)
    with pytest.raises(AuditWriteError):
        model_set_enabled(model=model, enabled=False)
    model.refresh_from_db()
    assert model.enabled is True


def test_opening_a_resource_is_its_own_event(personas):
    from governance.exposure import resource_open_to_all_models

    connection_ = DbConnection.objects.create(name="crm", engine="sqlite", exposure="internal_only")
    resource_open_to_all_models(resource=connection_)
    event = AuditEvent.objects.get(kind="resource_opened")
    assert event.details == {"setting": "exposure of crm", "before": "internal_only", "after": "all_models"}


# --- CSV export -------------------------------------------------------------------


def download(client, url, params=None) -> tuple[bytes, list[list[str]]]:
    response = client.get(url, params or {})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content)
    assert body.startswith(b"\xef\xbb\xbf")
    return body, list(csv.reader(io.StringIO(body.decode("utf-8-sig"), newline="")))


def test_csv_export_is_capped_safe_and_recorded(admin_client, personas, settings):
    settings.OWLAI_AUDIT_EXPORT_MAX_ROWS = 5000
    rows = [
        ToolCallAudit(
            actor_id=personas.staff.pk,
            actor_username="staff",
            tool="run_sql",
            resource_name="sales",
            outcome="success",
            sql_text=f"SELECT {i} /* 고객 */",
            tables=["customers"],
        )
        for i in range(5003)
    ]
    rows[-1].sql_text = '=HYPERLINK("http://evil","x")'  # newest: listed first
    rows[-2].sql_text = "+cmd|' /C calc'!A0"
    rows[-3].actor_username = "@staff"
    ToolCallAudit.objects.bulk_create(rows)
    body, parsed = download(admin_client, reverse("admin:audit_sqlexecution_export"), {"outcome": "success"})
    header, data, note = parsed[0], parsed[1:-1], parsed[-1]
    assert len(data) == 5000 and "5000" in note[0]
    sql_col = header.index("SQL") if "SQL" in header else 8
    assert data[0][sql_col].startswith("'=HYPERLINK") and data[1][sql_col].startswith("'+cmd")
    assert data[2][1] == "'@staff"
    assert "고객" in data[3][sql_col]
    event = AuditEvent.objects.get(kind="csv_export")
    assert event.row_count == 5000 and event.details["cut"] is True and event.filters == {"outcome": "success"}


def test_csv_export_of_a_small_filter_has_no_cut_note(admin_client, personas):
    write_sql_row(personas.staff, sql="SELECT 1")
    write_sql_row(personas.outsider, sql="SELECT 2")
    _body, parsed = download(admin_client, reverse("admin:audit_sqlexecution_export"), {"user_id": personas.staff.pk})
    assert len(parsed) == 2 and parsed[1][1] == "staff"
    assert AuditEvent.objects.get(kind="csv_export").row_count == 1


# --- the database guards the record (embedded profile) ---------------------------


@pytest.mark.embedded
@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite triggers (PostgreSQL: tests/test_audit_db_guards.py)")
def test_sqlite_refuses_update_and_early_delete_but_allows_expired_delete(personas):
    row = write_sql_row(personas.staff)
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            ToolCallAudit.objects.filter(pk=row.pk).update(sql_text="rewritten")
    with pytest.raises(IntegrityError):
        with transaction.atomic():
            ToolCallAudit.objects.filter(pk=row.pk).delete()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_auditevent (created_at, kind, actor_username, user_agent, resource_kind, resource_id,"
            " owner_username, filters, details) VALUES (datetime('now', '-1100 days'), 'admin_view', '', '', '', '',"
            " '', '{}', '{}')"
        )
    old = AuditEvent.objects.get()
    AuditEvent.objects.filter(pk=old.pk).delete()
    assert not AuditEvent.objects.exists() and ToolCallAudit.objects.filter(pk=row.pk).exists()


def test_unknown_event_kind_is_refused():
    from audit.events import audit_event_write
    from audit.services import AuditWriteError

    with pytest.raises(AuditWriteError):
        audit_event_write(kind="made_up", resource_id=uuid.uuid4())
