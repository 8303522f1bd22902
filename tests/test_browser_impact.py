"""Impact previews in a real browser (Playwright + Debian's Chromium, the
production stack of tests/support/browser.py): before each widening change
the admin sees what it changes, with figures that match what the test set
up; cancel changes nothing; confirm applies it and records one event whose
`confirmation` holds what the page showed.

chat_env: `alice` in sales-team (whole `sales`), `rita` in revealers (whole
`sales`, may reveal); models onprem/inhouse-model (chat default),
offline-demo (private) and cloud/cloud-model (public)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone, translation
from django.utils.translation import gettext

from accounts.models import ApiToken
from audit.events import audit_event_write
from audit.models import AuditEvent, EventKind
from governance.models import (
    ColumnClassification,
    DbConnection,
    DocumentCollection,
    Exposure,
    LlmModel,
    MaskStat,
    Role,
)
from tests.support.governed import classify

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


def ko(message: str) -> str:
    with translation.override("ko"):
        return gettext(message)


@pytest.fixture
def admin_user(chat_env, django_user_model):
    return django_user_model.objects.create_superuser("governor", password="pw-governor-123")


def fact(page, key: str, index: int = 0):
    """A fact of the `index`th impact on the page: its count and its listed names."""
    cell = page.locator("section.impact").nth(index).locator(f'[data-fact="{key}"]')
    return int(cell.locator(".impact-count").inner_text()), cell.locator("li").all_inner_texts()


def on_impact_page(page) -> None:
    page.wait_for_selector("#impact-confirm")
    assert page.locator("#content h1").inner_text() == ko("Confirm the change")


def run_action(page, changelist: str, labels: list[str], action: str, column: str = "field-name") -> None:
    page.goto(changelist)
    for label in labels:
        row = page.locator(
            "#result_list tbody tr",
            has=page.locator(f"td.{column}, th.{column}", has_text=re.compile(f"^{re.escape(label)}$")),
        )
        assert row.count() == 1, label
        row.locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    with page.expect_navigation():
        page.locator(".actions button[type=submit]").click()


def press(page, button: str) -> None:
    with page.expect_navigation():
        page.click(button)


def confirmations(kind: str) -> list[dict]:
    return [e.details.get("confirmation") for e in AuditEvent.objects.filter(kind=kind).order_by("id")]


def masked(connection, column: str, count: int, days_ago: int) -> None:
    MaskStat.objects.create(
        connection_id_value=connection.pk,
        table_name="customers",
        column_name=column,
        pii_kind="phone",
        day=timezone.localdate() - timedelta(days=days_ago),
        count=count,
    )


def test_columns_set_to_not_personal_show_their_masked_counts_first(chat_env, pages, admin_user):
    sales = chat_env.sales
    classify(sales, {"customers": {"phone": "phone", "email": "email", "city": None}})
    masked(sales, "phone", 4, days_ago=0)
    masked(sales, "phone", 6, days_ago=20)
    masked(sales, "phone", 100, days_ago=45)  # outside the 30 days
    masked(sales, "email", 3, days_ago=1)
    page = pages.open(admin_user)
    changelist = chat_env.url(f"/admin/governance/columnclassification/?connection_id={sales.pk}")

    # Bulk: phone and city (city is not masked now: nothing to show for it).
    run_action(page, changelist, ["phone", "city"], "set_none", column="field-column_name")
    on_impact_page(page)
    assert page.locator("section.impact").count() == 1
    assert fact(page, "masked_last_30_days") == (10, [])
    assert fact(page, "users") == (2, ["alice", "rita"])
    assert fact(page, "roles") == (2, ["revealers", "sales-team"])
    press(page, "#impact-cancel")
    assert ColumnClassification.objects.get(column_name="phone").pii_kind == "phone"
    assert confirmations(EventKind.CLASSIFICATION_SET) == []

    run_action(page, changelist, ["phone", "city"], "set_none", column="field-column_name")
    on_impact_page(page)
    press(page, "#impact-confirm")
    assert page.locator(".messagelist li").inner_text() == ko(
        "%(count)d column classifications changed; the next query uses them."
    ) % {"count": 1}  # city was not personal data already
    assert ColumnClassification.objects.get(column_name="phone").pii_kind == ""
    recorded = [c for c in confirmations(EventKind.CLASSIFICATION_SET) if c]
    assert len(recorded) == 1 and recorded[0]["shown"]["masked_last_30_days"] == 10
    assert recorded[0]["shown"]["users"] == ["alice", "rita"]

    # Single: the change form of email.
    email = ColumnClassification.objects.get(column_name="email")
    form = chat_env.url(f"/admin/governance/columnclassification/{email.pk}/change/")
    page.goto(form)
    page.select_option("select[name=pii_kind]", "")
    press(page, "input[name=_save]")
    on_impact_page(page)
    assert fact(page, "masked_last_30_days") == (3, [])
    press(page, "#impact-cancel")
    assert page.url == form
    email.refresh_from_db()
    assert email.pii_kind == "email"
    page.select_option("select[name=pii_kind]", "")
    press(page, "input[name=_save]")
    press(page, "#impact-confirm")
    email.refresh_from_db()
    assert email.pii_kind == ""
    event = AuditEvent.objects.filter(kind=EventKind.CLASSIFICATION_SET, resource_id=str(email.pk)).get()
    assert event.details["confirmation"]["shown"]["masked_last_30_days"] == 3


def test_opening_a_collection_names_who_and_which_public_models_start_seeing_it(chat_env, pages, admin_user):
    manuals = DocumentCollection.objects.create(name="manuals", exposure=Exposure.INTERNAL_ONLY)
    Role.objects.get(name="sales-team").document_collections.add(manuals)
    page = pages.open(admin_user)
    form = chat_env.url(f"/admin/governance/documentcollection/{manuals.pk}/change/")
    page.goto(form)
    page.select_option("select[name=exposure]", Exposure.ALL_MODELS)
    press(page, "input[name=_save]")
    on_impact_page(page)
    assert fact(page, "users") == (1, ["alice"])
    assert fact(page, "public_models") == (1, ["cloud/cloud-model"])
    press(page, "#impact-cancel")
    manuals.refresh_from_db()
    assert manuals.exposure == Exposure.INTERNAL_ONLY
    assert confirmations(EventKind.RESOURCE_OPENED) == []

    page.select_option("select[name=exposure]", Exposure.ALL_MODELS)
    press(page, "input[name=_save]")
    press(page, "#impact-confirm")
    manuals.refresh_from_db()
    assert manuals.exposure == Exposure.ALL_MODELS
    [recorded] = confirmations(EventKind.RESOURCE_OPENED)
    assert recorded["shown"]["users"] == ["alice"] and recorded["shown"]["public_models"] == ["cloud/cloud-model"]


def test_a_role_grant_shows_which_members_gain_which_tables_and_reveal(chat_env, pages, admin_user):
    hr = DbConnection.objects.create(name="hr", engine="postgresql", dsn_env="OWLAI_TEST_TARGET_DSN")
    classify(hr, {"salaries": {"amount": None}, "staff": {"id": None}})
    analysts = Role.objects.create(name="analysts")
    analysts.users.add(chat_env.alice, chat_env.rita)
    page = pages.open(admin_user)
    form = chat_env.url(f"/admin/governance/role/{analysts.pk}/change/")

    def grant_salaries_and_reveal() -> None:
        page.goto(form)
        page.locator(".add-row a").click()
        page.select_option("select[name=db_grants-0-connection]", str(hr.pk))
        page.check(f'input[name=db_grants-0-tables][value="{hr.pk}:salaries"]')
        page.check("input[name=can_view_raw_pii]")
        press(page, "input[name=_save]")
        on_impact_page(page)

    grant_salaries_and_reveal()
    reveal = ko("may reveal personal data")
    assert fact(page, "opened") == (2, ["hr: salaries", reveal])
    # rita may reveal through revealers already: she gains the table only.
    assert fact(page, "members_gaining") == (2, [f"alice: hr: salaries, {reveal}", "rita: hr: salaries"])
    assert fact(page, "reveal_gained_by") == (1, ["alice"])
    press(page, "#impact-cancel")
    analysts.refresh_from_db()
    assert not analysts.can_view_raw_pii and not analysts.db_grants.exists()
    assert confirmations(EventKind.ROLE_UPDATED) == []

    grant_salaries_and_reveal()
    press(page, "#impact-confirm")
    analysts.refresh_from_db()
    assert analysts.can_view_raw_pii and list(analysts.db_grants.values_list("tables", flat=True)) == [["salaries"]]
    [recorded] = confirmations(EventKind.ROLE_UPDATED)
    assert recorded["shown"]["members_gaining"] == {
        "alice": ["hr: salaries", "reveal_personal_data"],
        "rita": ["hr: salaries"],
    }


def test_enabling_and_disabling_models_show_what_they_change(chat_env, pages, admin_user):
    from governance.services import model_set_enabled

    cloud = chat_env.models["cloud-model"]
    model_set_enabled(model=cloud, enabled=False)
    handbook = DocumentCollection.objects.create(name="handbook", exposure=Exposure.ALL_MODELS)
    Role.objects.get(name="revealers").document_collections.add(handbook)
    DocumentCollection.objects.create(name="internal", exposure=Exposure.INTERNAL_ONLY)
    page = pages.open(admin_user)
    changelist = chat_env.url("/admin/governance/llmmodel/")

    run_action(page, changelist, ["cloud-model"], "enable_models")
    on_impact_page(page)
    assert fact(page, "resources") == (1, ["handbook"])  # a public model: only what is open to all
    assert fact(page, "users") == (1, ["rita"])
    press(page, "#impact-cancel")
    assert not LlmModel.objects.get(pk=cloud.pk).enabled
    run_action(page, changelist, ["cloud-model"], "enable_models")
    press(page, "#impact-confirm")
    assert LlmModel.objects.get(pk=cloud.pk).enabled
    [recorded] = [c for c in confirmations(EventKind.MODEL_ENABLED) if c]
    assert recorded["shown"]["collections"] == ["handbook"] and recorded["shown"]["users"] == ["rita"]

    inhouse = chat_env.models["inhouse-model"]
    run_action(page, changelist, ["inhouse-model"], "disable_models")
    on_impact_page(page)
    assert fact(page, "feature_defaults_cleared") == (1, ["chat"])
    assert fact(page, "usable_models_left") == (2, [])
    press(page, "#impact-cancel")
    assert LlmModel.objects.get(pk=inhouse.pk).enabled
    run_action(page, changelist, ["inhouse-model"], "disable_models")
    press(page, "#impact-confirm")
    assert not LlmModel.objects.get(pk=inhouse.pk).enabled
    [recorded] = [c for c in confirmations(EventKind.MODEL_DISABLED) if c]
    assert recorded["shown"]["feature_defaults_cleared"] == ["chat"]


def test_revoking_a_token_shows_its_owner_and_recent_use(chat_env, pages, admin_user):
    from accounts.services import api_token_create

    token, _key = api_token_create(user=chat_env.alice, name="nightly-report", actor=chat_env.alice)
    for _ in range(2):
        audit_event_write(
            kind=EventKind.API_TOKEN_USED, actor=chat_env.alice, resource_kind="api_token", resource_id=token.pk
        )
    page = pages.open(admin_user)
    changelist = chat_env.url("/admin/accounts/apitoken/")
    run_action(page, changelist, ["nightly-report"], "revoke_selected")
    on_impact_page(page)
    assert fact(page, "requests_last_30_days") == (2, [])
    assert page.locator('[data-fact="user"] .impact-count').inner_text() == "alice"
    press(page, "#impact-cancel")
    assert ApiToken.objects.get(pk=token.pk).revoked_at is None
    run_action(page, changelist, ["nightly-report"], "revoke_selected")
    press(page, "#impact-confirm")
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    [recorded] = confirmations(EventKind.API_TOKEN_REVOKED)
    assert recorded["shown"]["requests_last_30_days"] == 2 and recorded["shown"]["user"] == "alice"
