"""Impact previews of widening governed changes (governance.impact,
accounts.impact) and the record of a confirmation (audit.confirm): the pure
set arithmetic, the figures read from the platform's data, and the admin
flow (page first, cancel changes nothing, confirm records one event with
what was shown, narrowing changes apply directly)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.confirm import CONFIRM_FIELD, Impact, confirmation_details, confirmation_recorded, impacts_digest
from audit.events import audit_event_write
from audit.models import AuditEvent, EventKind, ResourceKind
from governance.grant_diff import WHOLE, RoleGrants
from governance.impact import (
    atom_text,
    column_unmask_impacts,
    grant_covers_table,
    member_gains,
    model_disable_impact,
    model_enable_impact,
    resource_open_impact,
    role_grant_impact,
)
from governance.models import (
    ColumnClassification,
    DbConnection,
    DbGrant,
    Exposure,
    FeatureDefault,
    LlmModel,
    MaskStat,
    Provider,
    Role,
)
from tests.support.confirm import confirm, impact_page


def grants(databases=None, members=(), collections=(), connectors=(), reveal=False) -> RoleGrants:
    return RoleGrants(
        databases={name: frozenset(scope) for name, scope in (databases or {}).items()},
        collections=frozenset(collections),
        members=frozenset(members),
        reveal_pii=reveal,
        connectors=frozenset(connectors),
    )


# --- pure parts -----------------------------------------------------------------------------


def test_a_member_who_stays_gains_what_opened_and_a_new_member_gains_everything():
    before = grants({"sales": {"customers"}}, members={"ann"})
    after = grants({"sales": {"customers", "orders"}}, members={"ann", "bob"}, collections={"manuals"})
    gains = member_gains(before, after, {})
    assert gains == {
        "ann": [("collection", "manuals", ""), ("db", "sales", "orders")],
        "bob": [("collection", "manuals", ""), ("db", "sales", "customers"), ("db", "sales", "orders")],
    }


def test_what_another_role_already_grants_is_no_gain_and_a_whole_database_covers_its_tables():
    before = grants({}, members={"ann"})
    after = grants({"sales": {"orders"}, "hr": {WHOLE}}, members={"ann", "bob"})
    elsewhere = {"ann": {("db", "sales", WHOLE)}, "bob": {("db", "hr", WHOLE), ("db", "sales", "orders")}}
    assert member_gains(before, after, elsewhere) == {"ann": [("db", "hr", WHOLE)]}


def test_removing_or_narrowing_gains_nobody_anything():
    before = grants({"sales": {WHOLE}}, members={"ann", "bob"}, reveal=True)
    after = grants({"sales": {"orders"}}, members={"ann"})
    assert member_gains(before, after, {}) == {}


def test_reveal_is_a_gain_of_its_own():
    before = grants({"sales": {WHOLE}}, members={"ann"})
    after = grants({"sales": {WHOLE}}, members={"ann"}, reveal=True)
    assert member_gains(before, after, {}) == {"ann": [("permission", "reveal_personal_data", "")]}


def test_grant_covers_table_compares_names_as_the_grant_stores_them():
    assert grant_covers_table(whole_database=True, tables=[], table="anything")
    assert grant_covers_table(whole_database=False, tables=[" Customers "], table="customers")
    assert not grant_covers_table(whole_database=False, tables=["orders", 3], table="customers")


def test_atom_text_names_each_kind():
    assert [atom_text(a) for a in [("db", "s", WHOLE), ("db", "s", "t"), ("connector", "crm", "")]] == [
        "s (*)",
        "s: t",
        "connector: crm",
    ]
    assert atom_text(("permission", "reveal_personal_data", "")) == "reveal_personal_data"


def test_atom_label_is_in_the_admins_language():
    from django.utils import translation

    from governance.impact import atom_label

    with translation.override("ko"):
        assert atom_label(("db", "hr", WHOLE)) == "hr (DB 전체)"
        assert atom_label(("permission", "reveal_personal_data", "")) == "개인정보 원문 열람 권한"
    with translation.override("en"):
        assert atom_label(("collection", "manuals", "")) == "document collection manuals"
        assert atom_label(("db", "hr", "salaries")) == "hr: salaries"


def _impact(resource_id, kinds=(EventKind.ROLE_UPDATED,), facts=None) -> Impact:
    return Impact("role_grant", ResourceKind.ROLE, resource_id, kinds, "t", facts or {"n": resource_id})


def test_a_confirmation_goes_to_the_first_matching_event_only():
    impacts = [_impact(1), _impact(2)]
    with confirmation_recorded(impacts):
        other_kind = confirmation_details(kind=EventKind.ROLE_DELETED, resource_kind="role", resource_id=1, details={})
        other_id = confirmation_details(kind=EventKind.ROLE_UPDATED, resource_kind="role", resource_id=3, details={})
        first = confirmation_details(kind=EventKind.ROLE_UPDATED, resource_kind="role", resource_id=1, details={"a": 1})
        again = confirmation_details(kind=EventKind.ROLE_UPDATED, resource_kind="role", resource_id=1, details={})
    outside = confirmation_details(kind=EventKind.ROLE_UPDATED, resource_kind="role", resource_id=2, details={})
    assert other_kind == other_id == again == outside == {}
    assert first == {
        "a": 1,
        "confirmation": {
            "change": "role_grant",
            "shown": {"n": 1},
            "digest": impacts_digest(impacts),
            "confirmed_together": 2,
        },
    }


def test_a_created_resource_matches_by_kind():
    with confirmation_recorded([_impact(None, kinds=(EventKind.ROLE_CREATED,))]):
        details = confirmation_details(kind=EventKind.ROLE_CREATED, resource_kind="role", resource_id=9, details={})
    assert details["confirmation"]["shown"] == {"n": None}


def test_the_digest_changes_with_any_fact():
    assert impacts_digest([_impact(1, facts={"users": ["a"]})]) != impacts_digest([_impact(1, facts={"users": ["b"]})])
    assert impacts_digest([_impact(1)]) == impacts_digest([_impact(1)])


# --- figures from the data --------------------------------------------------------------------


@pytest.fixture
def setup(db, django_user_model):
    ann = django_user_model.objects.create_user("ann")
    bob = django_user_model.objects.create_user("bob")
    django_user_model.objects.create_user("cy")  # no role: sees nothing
    sales = DbConnection.objects.create(name="sales", engine="sqlite", dsn_env="X", exposure=Exposure.INTERNAL_ONLY)
    team = Role.objects.create(name="team")
    team.users.add(ann)
    DbGrant.objects.create(role=team, connection=sales, whole_database=False, tables=["customers"])
    auditors = Role.objects.create(name="auditors")
    auditors.users.add(bob)
    DbGrant.objects.create(role=auditors, connection=sales, whole_database=False, tables=["orders"])
    private = Provider.objects.create(name="onprem", kind="openai", tier="private")
    public = Provider.objects.create(name="cloud", kind="openai", tier="public")
    models = {
        "inhouse": LlmModel.objects.create(provider=private, name="inhouse"),
        "cloud": LlmModel.objects.create(provider=public, name="cloud-model"),
        "cloud-off": LlmModel.objects.create(provider=public, name="cloud-off", enabled=False),
    }
    return {"ann": ann, "bob": bob, "sales": sales, "team": team, "auditors": auditors, **models}


def masked(connection, table, column, count, days_ago):
    MaskStat.objects.create(
        connection_id_value=connection.pk,
        table_name=table,
        column_name=column,
        pii_kind="phone",
        day=timezone.localdate() - timedelta(days=days_ago),
        count=count,
    )


def column(connection, table, name, kind):
    return ColumnClassification.objects.create(
        connection=connection, table_name=table, column_name=name, pii_kind=kind, source="auto", state="confirmed"
    )


def test_unmasking_a_column_counts_its_masked_values_of_the_last_30_days_and_who_reads_it(setup):
    phone = column(setup["sales"], "customers", "phone", "phone")
    city = column(setup["sales"], "customers", "city", "")
    masked(setup["sales"], "customers", "phone", 7, days_ago=0)
    masked(setup["sales"], "customers", "phone", 5, days_ago=29)
    masked(setup["sales"], "customers", "phone", 100, days_ago=31)  # outside the window
    masked(setup["sales"], "orders", "phone", 50, days_ago=1)  # another table
    [impact] = column_unmask_impacts([phone, city], new_kind="")  # city is not masked now: no impact
    assert impact.resource_id == phone.pk
    assert impact.facts == {
        "column": "sales.customers.phone",
        "kind_before": "phone",
        "masked_last_30_days": 12,
        "roles": ["team"],
        "users": ["ann"],
        "tiers": ["private"],
    }
    assert column_unmask_impacts([phone], new_kind="address") == []


def test_opening_a_resource_names_who_and_which_public_models_start_seeing_it(setup):
    column(setup["sales"], "customers", "city", "")
    column(setup["sales"], "customers", "phone", "phone")
    impact = resource_open_impact(setup["sales"])
    assert impact.facts == {
        "resource": "sales",
        "users": ["ann", "bob"],
        "roles": ["auditors", "team"],
        "public_models": ["cloud/cloud-model"],
        "columns_in_clear": 1,
    }
    DbConnection.objects.filter(pk=setup["sales"].pk).update(exposure=Exposure.ALL_MODELS)
    assert resource_open_impact(setup["sales"]) is None  # already open: nothing widens


def test_a_role_impact_lists_each_member_gain_less_what_they_hold_elsewhere(setup):
    from governance.services import role_grants_snapshot

    team = setup["team"]
    before = role_grants_snapshot(role_id=team.pk)
    after = RoleGrants(
        databases={"sales": frozenset({"customers", "orders"})},
        collections=frozenset(),
        members=frozenset({"ann", "bob"}),
        reveal_pii=True,
    )
    impact = role_grant_impact(role_id=team.pk, role_name="team", before=before, after=after)
    assert impact.facts == {
        "role": "team",
        "opened": ["sales: orders", "reveal_personal_data"],
        # bob reads orders through auditors already
        "members_gaining": {
            "ann": ["sales: orders", "reveal_personal_data"],
            "bob": ["sales: customers", "reveal_personal_data"],
        },
        "reveal_gained_by": ["ann", "bob"],
        "open_to_all_models": [],  # sales is internal-only
    }
    DbConnection.objects.filter(pk=setup["sales"].pk).update(exposure=Exposure.ALL_MODELS)
    impact = role_grant_impact(role_id=team.pk, role_name="team", before=before, after=after)
    assert impact.facts["open_to_all_models"] == ["sales"]
    assert role_grant_impact(role_id=team.pk, role_name="team", before=before, after=before) is None


def test_enabling_a_public_model_shows_only_resources_open_to_all_models(setup):
    assert model_enable_impact(setup["cloud-off"]).facts["connections"] == []
    DbConnection.objects.filter(pk=setup["sales"].pk).update(exposure=Exposure.ALL_MODELS)
    facts = model_enable_impact(setup["cloud-off"]).facts
    assert (facts["tier"], facts["connections"], facts["users"]) == ("public", ["sales"], ["ann", "bob"])
    assert model_enable_impact(setup["cloud"]) is None  # enabled already


def test_disabling_a_model_names_the_defaults_it_clears(setup):
    FeatureDefault.objects.create(feature="chat", model=setup["inhouse"])
    facts = model_disable_impact(setup["inhouse"]).facts
    assert facts == {"model": "onprem/inhouse", "feature_defaults_cleared": ["chat"], "usable_models_left": 1}
    assert model_disable_impact(setup["cloud-off"]) is None


def test_revoking_a_token_counts_its_requests_of_the_last_30_days(setup):
    from accounts.impact import api_token_revoke_impact
    from accounts.services import api_token_create

    token, _key = api_token_create(user=setup["ann"], name="report", actor=setup["ann"])
    for _ in range(3):
        audit_event_write(
            kind=EventKind.API_TOKEN_USED, actor=setup["ann"], resource_kind="api_token", resource_id=token.pk
        )
    old = audit_event_write(
        kind=EventKind.API_TOKEN_USED, actor=setup["ann"], resource_kind="api_token", resource_id=token.pk
    )
    AuditEvent.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))
    facts = api_token_revoke_impact(token).facts
    assert (facts["user"], facts["requests_last_30_days"]) == ("ann", 3)


# --- the admin flow ---------------------------------------------------------------------------


@pytest.fixture
def admin_client(client, setup, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("root", password="pw-root-123"))
    return client


def test_an_unmask_shows_the_page_cancel_changes_nothing_confirm_records_one_event(admin_client, setup):
    phone = column(setup["sales"], "customers", "phone", "phone")
    masked(setup["sales"], "customers", "phone", 4, days_ago=2)
    url = reverse("admin:governance_columnclassification_changelist")
    page = admin_client.post(url, {"action": "set_none", "_selected_action": [phone.pk]})
    assert impact_page(page)
    assert page.context["impacts"][0].facts["masked_last_30_days"] == 4
    phone.refresh_from_db()
    assert phone.pii_kind == "phone" and not AuditEvent.objects.filter(kind=EventKind.CLASSIFICATION_SET).exists()
    assert admin_client.get(page.context["cancel_url"]).status_code == 200  # cancel is a plain link back
    assert confirm(admin_client, url, page).status_code == 302
    phone.refresh_from_db()
    [event] = AuditEvent.objects.filter(kind=EventKind.CLASSIFICATION_SET)
    assert phone.pii_kind == "" and event.details["confirmation"]["shown"]["masked_last_30_days"] == 4
    assert event.details["confirmation"]["digest"] == page.context["digest"]
    # The events screen shows what was confirmed with the change.
    detail = admin_client.get(reverse("admin:audit_auditevent_change", args=[event.pk]))
    assert detail.status_code == 200 and "masked_last_30_days" in detail.content.decode()


def test_figures_that_changed_since_the_page_show_it_again(admin_client, setup):
    phone = column(setup["sales"], "customers", "phone", "phone")
    url = reverse("admin:governance_columnclassification_changelist")
    page = admin_client.post(url, {"action": "set_none", "_selected_action": [phone.pk]})
    masked(setup["sales"], "customers", "phone", 9, days_ago=0)  # masked again meanwhile
    again = confirm(admin_client, url, page)
    assert impact_page(again) and again.context["stale"]
    phone.refresh_from_db()
    assert phone.pii_kind == "phone"


def test_a_narrowing_change_applies_directly(admin_client, setup):
    city = column(setup["sales"], "customers", "city", "")
    url = reverse("admin:governance_columnclassification_changelist")
    response = admin_client.post(url, {"action": "set_kind", "_selected_action": [city.pk], "pii_kind": "address"})
    assert response.status_code == 302
    [event] = AuditEvent.objects.filter(kind=EventKind.CLASSIFICATION_SET)
    assert "confirmation" not in event.details


def test_a_role_form_shows_members_gains_before_saving(admin_client, setup):
    team = setup["team"]
    grant = DbGrant.objects.get(role=team)
    url = reverse("admin:governance_role_change", args=[team.pk])
    data = {
        "name": "team",
        "description": "",
        "users": [setup["ann"].pk, setup["bob"].pk],
        "db_grants-TOTAL_FORMS": 1,
        "db_grants-INITIAL_FORMS": 1,
        "db_grants-0-id": grant.pk,
        "db_grants-0-role": team.pk,
        "db_grants-0-connection": setup["sales"].pk,
        "db_grants-0-whole_database": "on",
    }
    page = admin_client.post(url, data)
    assert impact_page(page)
    assert page.context["impacts"][0].facts["members_gaining"] == {"ann": ["sales (*)"], "bob": ["sales (*)"]}
    assert set(team.users.values_list("username", flat=True)) == {"ann"}
    assert confirm(admin_client, url, page).status_code == 302
    [event] = AuditEvent.objects.filter(kind=EventKind.ROLE_UPDATED)
    assert event.details["confirmation"]["shown"]["members_gaining"]["bob"] == ["sales (*)"]
    assert set(team.users.values_list("username", flat=True)) == {"ann", "bob"}


def test_the_confirm_field_alone_cannot_skip_the_page(admin_client, setup):
    phone = column(setup["sales"], "customers", "phone", "phone")
    url = reverse("admin:governance_columnclassification_changelist")
    forged = admin_client.post(url, {"action": "set_none", "_selected_action": [phone.pk], CONFIRM_FIELD: "x" * 64})
    assert impact_page(forged)
    phone.refresh_from_db()
    assert phone.pii_kind == "phone"


@pytest.mark.parametrize(
    ("language", "confirm_text", "label"),
    [
        ("ko", "예, 변경을 적용합니다", "최근 30일간 이 컬럼에서 마스킹된 값 수"),
        ("en", "Yes, apply the change", "Values masked in this column in the last 30 days"),
    ],
)
def test_the_impact_page_speaks_the_admins_language(admin_client, setup, language, confirm_text, label):
    phone = column(setup["sales"], "customers", "phone", "phone")
    url = reverse("admin:governance_columnclassification_changelist")
    page = admin_client.post(
        url, {"action": "set_none", "_selected_action": [phone.pk]}, HTTP_ACCEPT_LANGUAGE=language
    ).content.decode()
    assert confirm_text in page and label in page


def test_opening_a_connection_in_its_form_never_echoes_a_replaced_dsn(admin_client, setup):
    sales = setup["sales"]
    url = reverse("admin:governance_dbconnection_change", args=[sales.pk])
    data = {
        "name": "sales",
        "engine": "sqlite",
        "exposure": "all_models",
        "dsn_env": "X",
        "stored_dsn": "/tmp/very-secret-dsn.sqlite3",
        "row_cap": 10,
        "statement_timeout_ms": 1000,
        "grants-TOTAL_FORMS": 0,
        "grants-INITIAL_FORMS": 0,
    }
    page = admin_client.post(url, data)
    assert impact_page(page)
    html = page.content.decode()
    assert "very-secret-dsn" not in html and 'id="impact-dropped"' in html
    assert page.context["impacts"][0].facts["users"] == ["ann", "bob"]
    sales.refresh_from_db()
    assert sales.exposure == Exposure.INTERNAL_ONLY
    assert confirm(admin_client, url, page).status_code == 302
    sales.refresh_from_db()
    assert sales.exposure == Exposure.ALL_MODELS and not sales.dsn_encrypted
    [event] = AuditEvent.objects.filter(kind=EventKind.RESOURCE_OPENED, resource_id=str(sales.pk))
    assert event.details["confirmation"]["shown"]["users"] == ["ann", "bob"]


def role_post(role_name, users, grants_rows=()):
    data = {"name": role_name, "description": "", "users": users, "db_grants-INITIAL_FORMS": 0}
    data["db_grants-TOTAL_FORMS"] = len(grants_rows)
    for i, row in enumerate(grants_rows):
        data.update({f"db_grants-{i}-{key}": value for key, value in row.items()})
    return data


def test_a_new_role_with_a_grant_is_confirmed_and_recorded_on_its_created_event(admin_client, setup):
    url = reverse("admin:governance_role_add")
    rows = [{"connection": setup["sales"].pk, "whole_database": "on"}]
    page = admin_client.post(url, role_post("newcomers", [setup["ann"].pk], rows))
    assert impact_page(page)
    # ann reads customers through team already; the whole database is still more.
    assert page.context["impacts"][0].facts["members_gaining"] == {"ann": ["sales (*)"]}
    assert not Role.objects.filter(name="newcomers").exists()
    assert confirm(admin_client, url, page).status_code == 302
    [event] = AuditEvent.objects.filter(kind=EventKind.ROLE_CREATED)
    assert event.resource_id == str(Role.objects.get(name="newcomers").pk)
    assert event.details["confirmation"]["shown"]["role"] == "newcomers"


def test_removing_a_member_applies_directly(admin_client, setup):
    team = setup["team"]
    grant = DbGrant.objects.get(role=team)
    url = reverse("admin:governance_role_change", args=[team.pk])
    data = role_post("team", [], [{"id": grant.pk, "role": team.pk, "connection": setup["sales"].pk}])
    data["db_grants-INITIAL_FORMS"] = 1
    data["db_grants-0-tables"] = [f"{setup['sales'].pk}:customers"]
    column(setup["sales"], "customers", "id", "")  # the analysed schema the grant picks from
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    [event] = AuditEvent.objects.filter(kind=EventKind.ROLE_UPDATED)
    assert event.details["members_removed"] == ["ann"] and "confirmation" not in event.details


def test_select_across_is_resolved_to_the_rows_the_page_showed(admin_client, setup):
    phone = column(setup["sales"], "customers", "phone", "phone")
    email = column(setup["sales"], "customers", "email", "email")
    url = reverse("admin:governance_columnclassification_changelist")
    data = {"action": ["set_none", ""], "index": 0, "select_across": "1", "_selected_action": [phone.pk]}
    page = admin_client.post(url, data)
    assert impact_page(page) and [i.resource_id for i in page.context["impacts"]] == [phone.pk, email.pk]
    keep = page.context["keep"]
    assert ("action", "set_none") in keep and not any(name in ("index", "select_across") for name, _v in keep)
    assert sorted(int(v) for name, v in keep if name == "_selected_action") == [phone.pk, email.pk]
    assert confirm(admin_client, url, page).status_code == 302
    events = AuditEvent.objects.filter(kind=EventKind.CLASSIFICATION_SET).order_by("id")
    assert [e.details["confirmation"]["confirmed_together"] for e in events] == [2, 2]
    assert set(ColumnClassification.objects.values_list("pii_kind", flat=True)) == {""}


def test_enabling_a_model_in_its_form_shows_the_page_and_records_it(admin_client, setup):
    model = setup["cloud-off"]
    url = reverse("admin:governance_llmmodel_change", args=[model.pk])
    page = admin_client.post(url, {"enabled": "on"})
    assert impact_page(page) and page.context["impacts"][0].facts["tier"] == "public"
    assert not LlmModel.objects.get(pk=model.pk).enabled
    assert confirm(admin_client, url, page).status_code == 302
    assert LlmModel.objects.get(pk=model.pk).enabled
    [event] = AuditEvent.objects.filter(kind=EventKind.MODEL_ENABLED)
    assert event.details["confirmation"]["change"] == "model_enable"
