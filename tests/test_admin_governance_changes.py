"""Governed changes made in the admin, each on the record: role grants picked
from the analysed schema, classification bulk decisions (never a silent
delete), connection settings (engine, DSN, schemas; never the DSN itself),
conversations that the admin can neither read nor delete, user deletion."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from chat.models import Conversation, Message
from chat.services import conversation_create
from chat.turns.start import turn_start
from governance.models import ColumnClassification, DbConnection, DbGrant, Role
from tests.support.confirm import post_confirmed
from tests.support.governed import classify, governed_connection

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


# --- role grants: a table picker fed by the analysed schema ----------------------------


def grant_post(role, rows: list[dict], **extra) -> dict:
    data = {"name": role.name, "description": "", "db_grants-TOTAL_FORMS": len(rows), **extra}
    data["db_grants-INITIAL_FORMS"] = sum(1 for row in rows if "id" in row)
    for i, row in enumerate(rows):
        for key, value in row.items():
            data[f"db_grants-{i}-{key}"] = value
        data[f"db_grants-{i}-role"] = role.pk
    return data


def test_grant_form_offers_the_analysed_tables_not_a_json_box(admin_client, personas):
    classify(personas.partial, {"customers": {"id": None}, "orders": {"id": None}})
    classify(personas.hidden, {"salaries": {"amount": None}})
    page = admin_client.get(reverse("admin:governance_role_change", args=[personas.role.pk])).content.decode()
    assert '<textarea name="db_grants-0-tables"' not in page and "db_grants-0-tables" in page
    partial, hidden = personas.partial.pk, personas.hidden.pk
    # One checkbox per (connection, table); the granted one is checked.
    assert f'value="{partial}:customers" checked' in page
    assert f'value="{partial}:orders">' in page
    assert f'value="{hidden}:salaries"' in page
    # A connection without an analysed schema says what to do.
    assert "Analyse schema" in page or "스키마 분석" in page


def test_grant_picks_become_the_grant_and_a_permission_event(admin_client, personas):
    classify(personas.partial, {"customers": {"id": None}, "orders": {"id": None}})
    grant = DbGrant.objects.get(role=personas.role, connection=personas.partial)
    sales_grant = DbGrant.objects.get(role=personas.role, connection=personas.sales)
    rows = [
        {"id": grant.pk, "connection": personas.partial.pk, "tables": [f"{personas.partial.pk}:orders"]},
        {"id": sales_grant.pk, "connection": personas.sales.pk, "whole_database": "on"},
    ]
    data = grant_post(personas.role, rows, users=[personas.staff.pk])
    response = post_confirmed(admin_client, reverse("admin:governance_role_change", args=[personas.role.pk]), data)
    assert response.status_code == 302, response.content.decode()[:2000]
    grant.refresh_from_db()
    assert grant.tables == ["orders"]
    event = AuditEvent.objects.get(kind="role_updated")
    assert event.details["opened"] == [
        {"kind": "db_connection", "resource": "partial", "scope": "table", "table": "orders"}
    ]
    assert event.details["closed"] == [
        {"kind": "db_connection", "resource": "partial", "scope": "table", "table": "customers"}
    ]


@pytest.mark.parametrize(
    ("picked", "message"),
    [
        ("{partial}:salaries", "salaries"),  # not in partial's analysed schema
        ("{hidden}:salaries", "salaries"),  # a table of another connection
        ("{partial}:../etc", "../etc"),  # nothing the page offered
    ],
)
def test_a_table_outside_the_connections_analysed_schema_is_refused(admin_client, personas, picked, message):
    classify(personas.partial, {"customers": {"id": None}})
    classify(personas.hidden, {"salaries": {"amount": None}})
    grant = DbGrant.objects.get(role=personas.role, connection=personas.partial)
    sales_grant = DbGrant.objects.get(role=personas.role, connection=personas.sales)
    value = picked.format(partial=personas.partial.pk, hidden=personas.hidden.pk)
    rows = [
        {"id": grant.pk, "connection": personas.partial.pk, "tables": [f"{personas.partial.pk}:customers", value]},
        {"id": sales_grant.pk, "connection": personas.sales.pk, "whole_database": "on"},
    ]
    data = grant_post(personas.role, rows, users=[personas.staff.pk])
    response = admin_client.post(reverse("admin:governance_role_change", args=[personas.role.pk]), data)
    assert response.status_code == 200  # the form again, with its error
    errors = response.context["inline_admin_formsets"][0].formset.errors[0]
    assert message in json.dumps(errors, ensure_ascii=False)
    grant.refresh_from_db()
    assert grant.tables == ["customers"] and not AuditEvent.objects.filter(resource_kind="role").exists()


def test_a_granted_table_no_longer_analysed_is_kept_not_lost(admin_client, personas):
    """Saving a role for another reason keeps a table granted before the
    analysis stopped listing it (shown, checked, and saved as it was)."""
    grant = DbGrant.objects.get(role=personas.role, connection=personas.partial)  # customers; nothing analysed
    page = admin_client.get(reverse("admin:governance_role_change", args=[personas.role.pk])).content.decode()
    assert f'value="{personas.partial.pk}:customers" checked' in page
    sales_grant = DbGrant.objects.get(role=personas.role, connection=personas.sales)
    rows = [
        {"id": grant.pk, "connection": personas.partial.pk, "tables": [f"{personas.partial.pk}:customers"]},
        {"id": sales_grant.pk, "connection": personas.sales.pk, "whole_database": "on"},
    ]
    data = grant_post(personas.role, rows, users=[personas.staff.pk], description="renamed")
    assert admin_client.post(reverse("admin:governance_role_change", args=[personas.role.pk]), data).status_code == 302
    grant.refresh_from_db()
    assert grant.tables == ["customers"] and not AuditEvent.objects.filter(resource_kind="role").exists()


def test_a_grant_with_neither_whole_database_nor_tables_is_refused(admin_client, personas):
    rows = [{"connection": personas.hidden.pk}]
    role = Role.objects.create(name="empty")
    response = admin_client.post(reverse("admin:governance_role_change", args=[role.pk]), grant_post(role, rows))
    assert response.status_code == 200 and not DbGrant.objects.filter(role=role).exists()


# --- classifications: filters, bulk decisions, no silent delete -------------------------


def changelist_action(client, action: str, rows, **extra):
    # A widening action (set_none on a masked column) is confirmed on its impact page.
    return post_confirmed(
        client,
        reverse("admin:governance_columnclassification_changelist"),
        {"action": action, "_selected_action": [r.pk for r in rows], **extra},
    )


def suggest(connection, table, column, kind=""):
    return ColumnClassification.objects.create(
        connection=connection, table_name=table, column_name=column, pii_kind=kind, source="auto", state="suggested"
    )


def test_classification_filters_narrow_the_list(admin_client, personas):
    suggest(personas.sales, "customers", "phone", "phone")
    suggest(personas.sales, "customers", "city")
    suggest(personas.sales, "orders", "amount")
    classify(personas.partial, {"customers": {"phone": "phone"}})
    url = "admin:governance_columnclassification_changelist"

    def columns(**params):
        response = admin_client.get(reverse(url), params)
        return sorted(f"{c.connection.name}.{c.table_name}.{c.column_name}" for c in response.context["cl"].result_list)

    assert columns(connection_id=personas.partial.pk) == ["partial.customers.phone"]
    assert columns(connection_id=personas.sales.pk, table="customers") == [
        "sales.customers.city",
        "sales.customers.phone",
    ]
    assert columns(kind="none") == ["sales.customers.city", "sales.orders.amount"]
    assert columns(kind="phone", source__exact="manual") == ["partial.customers.phone"]
    assert columns(state__exact="suggested", kind="phone") == ["sales.customers.phone"]
    # The table filter offers the picked connection's tables only.
    page = admin_client.get(reverse(url), {"connection_id": personas.partial.pk}).content.decode()
    assert f"?connection_id={personas.partial.pk}&amp;table=customers" in page and "table=orders" not in page


def test_bulk_confirm_keeps_the_kind_and_survives_a_rescan(admin_client, personas):
    from governance.schema_analysis import ColumnVerdict, schema_analysis_apply

    phone, city = suggest(personas.sales, "customers", "phone", "phone"), suggest(personas.sales, "customers", "city")
    response = changelist_action(admin_client, "confirm_suggestions", [phone, city])
    assert response.status_code == 302
    phone.refresh_from_db()
    assert (phone.pii_kind, phone.state, phone.classified_by_username) == ("phone", "confirmed", "admin")
    events = AuditEvent.objects.filter(kind="classification_set", resource_kind="column_classification").order_by("id")
    assert [(e.resource_id, e.details["before"], e.details["after"], e.details["state_after"]) for e in events] == [
        (str(phone.pk), "phone", "phone", "confirmed"),
        (str(city.pk), None, None, "confirmed"),
    ]
    # A re-scan that now thinks otherwise leaves the confirmed decision alone.
    schema_analysis_apply(
        connection=personas.sales,
        results={("customers", "city"): ("TEXT", ColumnVerdict("address", 0.9, "looks like an address"), 50)},
    )
    city.refresh_from_db()
    assert (city.pii_kind, city.state) == ("", "confirmed")


def test_bulk_set_kind_and_set_none_write_one_event_per_column(admin_client, personas):
    a, b = suggest(personas.sales, "customers", "city"), suggest(personas.sales, "customers", "phone", "phone")
    changelist_action(admin_client, "set_kind", [a, b], pii_kind="address")
    assert {c.pii_kind for c in ColumnClassification.objects.all()} == {"address"}
    changelist_action(admin_client, "set_none", [a])
    a.refresh_from_db()
    assert (a.pii_kind, a.source, a.state) == ("", "manual", "confirmed")
    changes = [
        (e.resource_id, e.details["before"], e.details["after"])
        for e in AuditEvent.objects.filter(resource_kind="column_classification").order_by("id")
    ]
    assert changes == [(str(a.pk), None, "address"), (str(b.pk), "phone", "address"), (str(a.pk), "address", None)]


def test_set_kind_without_a_kind_changes_nothing(admin_client, personas):
    a = suggest(personas.sales, "customers", "city")
    changelist_action(admin_client, "set_kind", [a], pii_kind="")
    a.refresh_from_db()
    assert a.state == "suggested" and not AuditEvent.objects.filter(resource_kind="column_classification").exists()


def test_a_bulk_change_that_cannot_be_recorded_does_not_happen(admin_client, personas, monkeypatch):
    a = suggest(personas.sales, "customers", "city")

    def down(**kwargs):
        raise RuntimeError("audit store down")

    monkeypatch.setattr(AuditEvent.objects, "create", down)
    changelist_action(admin_client, "set_kind", [a], pii_kind="address")
    a.refresh_from_db()
    assert (a.pii_kind, a.state) == ("", "suggested")


def test_a_classification_cannot_be_deleted_only_set_to_none(admin_client, personas):
    row = suggest(personas.sales, "customers", "phone", "phone")
    assert admin_client.get(reverse("admin:governance_columnclassification_delete", args=[row.pk])).status_code == 403
    admin_client.post(reverse("admin:governance_columnclassification_delete", args=[row.pk]), {"post": "yes"})
    changelist_action(admin_client, "delete_selected", [row], post="yes")
    assert ColumnClassification.objects.filter(pk=row.pk).exists()
    page = admin_client.get(reverse("admin:governance_columnclassification_changelist")).content.decode()
    assert 'value="delete_selected"' not in page and 'value="set_none"' in page


def test_a_bulk_action_changes_the_next_querys_masking(admin_client, sqlite_customer_db, django_user_model):
    governed = governed_connection(sqlite_customer_db, django_user_model)  # city: not personal data
    payload, outcome = governed.run("SELECT city FROM customers WHERE id = 1")
    assert (outcome, payload["rows"]) == ("success", [["서울"]])
    city = ColumnClassification.objects.get(connection=governed.connection, table_name="customers", column_name="city")
    assert changelist_action(admin_client, "set_kind", [city], pii_kind="address").status_code == 302
    payload, _outcome = governed.run("SELECT city FROM customers WHERE id = 1")
    assert payload["rows"] == [["[주소-1]"]]
    changelist_action(admin_client, "set_none", [city])
    governed.new_conversation()
    payload, _outcome = governed.run("SELECT city FROM customers WHERE id = 1")
    assert payload["rows"] == [["서울"]]


# --- connection settings ----------------------------------------------------------------


def connection_post(connection: DbConnection, **changes) -> dict:
    data = {
        "name": connection.name,
        "business_summary": connection.business_summary,
        "engine": connection.engine,
        "exposure": connection.exposure,
        "dsn_env": connection.dsn_env,
        "stored_dsn": "",
        "schemas": json.dumps(connection.schemas),
        "row_cap": connection.row_cap,
        "statement_timeout_ms": connection.statement_timeout_ms,
    }
    return {**data, **changes}


def test_dsn_engine_and_schema_changes_are_settings_events_without_the_dsn(admin_client, personas, tmp_path):
    sales = personas.sales
    url = reverse("admin:governance_dbconnection_change", args=[sales.pk])
    secret = f"sqlite:///{tmp_path}/other-s3cret.sqlite3"
    response = admin_client.post(url, connection_post(sales, stored_dsn=secret, schemas='["main"]', row_cap=100))
    assert response.status_code == 302, response.content.decode()[:2000]
    events = {e.details["setting"]: e.details for e in AuditEvent.objects.filter(kind="connection_updated")}
    assert events["DSN of sales"] == {
        "setting": "DSN of sales",
        "before": "stored",
        "after": "stored",
        "replaced": True,
    }
    assert events["schemas of sales"]["before"] == [] and events["schemas of sales"]["after"] == ["main"]
    assert events["row cap of sales"]["after"] == 100
    recorded = json.dumps(list(AuditEvent.objects.values("details", "filters")), ensure_ascii=False)
    assert "s3cret" not in recorded and str(tmp_path) not in recorded
    # From a stored DSN to an environment variable; then the engine.
    before = AuditEvent.objects.count()
    admin_client.post(url, connection_post(DbConnection.objects.get(pk=sales.pk), dsn_env="SALES_DSN_UNSET"))
    admin_client.post(url, connection_post(DbConnection.objects.get(pk=sales.pk), engine="postgresql"))
    later = [e.details for e in AuditEvent.objects.order_by("id")[before:]]
    assert {"setting": "DSN of sales", "before": "stored", "after": "env:SALES_DSN_UNSET", "replaced": False} in later
    assert {"setting": "engine of sales", "before": "sqlite", "after": "postgresql"} in later


def test_saving_a_connection_unchanged_writes_no_event(admin_client, personas):
    url = reverse("admin:governance_dbconnection_change", args=[personas.sales.pk])
    assert admin_client.post(url, connection_post(personas.sales)).status_code == 302
    assert not AuditEvent.objects.filter(resource_kind="db_connection").exists()


def test_a_new_connection_is_one_event_with_its_settings(admin_client, personas, sample_sqlite_db):
    data = connection_post(
        DbConnection(name="crm", engine="sqlite", exposure="internal_only"), stored_dsn=sample_sqlite_db
    )
    data.update({"grants-TOTAL_FORMS": 0, "grants-INITIAL_FORMS": 0})
    assert admin_client.post(reverse("admin:governance_dbconnection_add"), data).status_code == 302
    event = AuditEvent.objects.get(kind="connection_created", details__setting="connection crm")
    assert event.details["before"] is None and event.details["after"]["dsn"] == "stored"
    assert event.details["after"]["engine"] == "sqlite" and sample_sqlite_db not in json.dumps(event.details)


def test_deleting_a_connection_records_the_grants_it_took(admin_client, personas):
    url = reverse("admin:governance_dbconnection_delete", args=[personas.partial.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert not DbConnection.objects.filter(pk=personas.partial.pk).exists()
    closed = AuditEvent.objects.get(kind="role_updated", resource_kind="role")
    assert closed.details["closed"] == [
        {"kind": "db_connection", "resource": "partial", "scope": "table", "table": "customers"}
    ]
    gone = AuditEvent.objects.get(kind="connection_deleted", details__setting="connection partial")
    assert gone.details["after"] is None and gone.details["before"]["dsn"] == "stored"


# --- conversations: metadata only, no delete ---------------------------------------------


def test_conversation_admin_shows_metadata_and_counts(admin_client, personas):
    conversation = conversation_create(owner=personas.staff, title="내 비밀 제목")
    turn_start(conversation=conversation, user=personas.staff, text="본문 xyzzy-1", model=None)
    listing = admin_client.get(reverse("admin:chat_conversation_changelist")).content.decode()
    row = admin_client.get(reverse("admin:chat_conversation_changelist")).context["cl"].result_list[0]
    assert (row.turns_n, row.messages_n) == (1, Message.objects.filter(conversation=conversation).count())
    assert "staff" in listing and "내 비밀 제목" not in listing and "xyzzy-1" not in listing


def test_admins_cannot_delete_conversations(admin_client, personas):
    conversation = conversation_create(owner=personas.staff)
    url = reverse("admin:chat_conversation_delete", args=[conversation.pk])
    assert admin_client.get(url).status_code == 403
    admin_client.post(url, {"post": "yes"})
    admin_client.post(
        reverse("admin:chat_conversation_changelist"),
        {"action": "delete_selected", "_selected_action": [conversation.pk], "post": "yes"},
    )
    assert Conversation.objects.filter(pk=conversation.pk).exists()


def test_a_user_with_conversations_cannot_be_deleted_in_the_admin(admin_client, personas):
    """Deleting the account would hard-delete its conversations, which the
    admin may not delete: Django refuses the whole deletion."""
    conversation_create(owner=personas.outsider)
    url = reverse("admin:auth_user_delete", args=[personas.outsider.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert Conversation.objects.filter(owner=personas.outsider).exists()


def test_deleting_a_user_is_on_the_record(admin_client, personas):
    personas.role.users.add(personas.outsider)
    url = reverse("admin:auth_user_delete", args=[personas.outsider.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    event = AuditEvent.objects.get(kind="user_deleted", resource_kind="user")
    assert event.details["user"] == "outsider" and event.details["deleted_with"]["governance.role_users"] == 1
    assert event.owner_username == "outsider" and event.actor_username == "admin"
