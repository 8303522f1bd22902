"""The rough edges a Korean administrator met at once, one test each: the
events CSV counting its own rows, internal words on the screens, filters
shown in the reader's words, the token endpoints' refusal, API 404s in the
session's language, the login / 404 / 500 pages, the favicon, and schema
analysis that says when it finished."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.urls import reverse
from django.utils import translation

from audit.events import audit_event_write
from audit.models import AuditEvent, EventKind

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, personas):
    client.force_login(personas.admin)
    return client


def csv_rows(response) -> list[list[str]]:
    body = b"".join(response.streaming_content).decode("utf-8-sig")
    return list(csv.reader(io.StringIO(body, newline="")))


def test_the_events_csv_counts_exactly_the_rows_of_its_file(admin_client, personas):
    for n in range(3):
        audit_event_write(kind=EventKind.ADMIN_VIEW, actor=personas.staff, resource_kind="conversation", row_count=n)
    header, *rows = csv_rows(admin_client.get(reverse("admin:audit_auditevent_export")))
    export = AuditEvent.objects.get(kind=EventKind.CSV_EXPORT)
    assert export.row_count == len(rows) == 3
    # A second export lists the first one (it existed when it was asked for).
    header, *rows = csv_rows(admin_client.get(reverse("admin:audit_auditevent_export")))
    second = AuditEvent.objects.filter(kind=EventKind.CSV_EXPORT).latest("pk")
    assert second.row_count == len(rows) == 4


@pytest.mark.parametrize(("language", "one", "other"), [("en", "1 row", "2 rows"), ("ko", "1행", "2행")])
def test_a_row_count_is_singular_or_plural_as_the_language_says(language, one, other):
    from chat.views import _page_text

    with translation.override(language):
        rows = _page_text()["rows"]
    assert rows["one"] % {"count": 1} == one and rows["other"] % {"count": 2} == other


def test_the_chat_page_picks_the_form_by_the_count():
    from pathlib import Path

    script = (Path(__file__).resolve().parent.parent / "chat/static/chat/chat.js").read_text(encoding="utf-8")
    assert "step.row_count === 1 ? T.rows.one : T.rows.other" in script


@pytest.mark.parametrize("language", ["ko", "en"])
def test_a_token_managing_tokens_is_told_the_true_reason(personas, language):
    from django.test import Client

    from accounts.models import ApiToken
    from accounts.services import api_token_create

    token, key = api_token_create(user=personas.staff, name="a", actor=personas.staff)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_ACCEPT_LANGUAGE=language)
    with translation.override(language):
        expected = translation.gettext("This endpoint does not accept API tokens: sign in with the browser.")
    for response in (
        client.get("/api/tokens/"),
        client.post("/api/tokens/", {"name": "more"}, content_type="application/json"),
        client.delete(f"/api/tokens/{token.pk}/"),
    ):
        assert response.status_code == 403 and response.json()["detail"] == expected
    assert ApiToken.objects.count() == 1 and ApiToken.objects.get().revoked_at is None
    if language == "ko":
        assert "토큰" in expected


# --- pages outside the chat and the admin ----------------------------------------------

STYLESHEET = "/static/accounts/standalone.css"
ICON = "/static/accounts/favicon.svg"


def assert_product_page(page: str, language: str) -> None:
    """The product's look (its stylesheet and icon) and a working switcher."""
    import re

    assert STYLESHEET in page and f'rel="icon" href="{ICON}"' in page
    assert 'action="/i18n/setlang/"' in page and 'name="csrfmiddlewaretoken"' in page
    assert f'<option value="{language}" selected>' in page
    assert f'<html lang="{language}">' in page
    text = re.sub(r"<(script|style)\b.*?</\1>|<[^>]+>", " ", page, flags=re.S)
    if language == "ko":
        assert re.search("[가-힣]", text)


@pytest.mark.parametrize("language", ["ko", "en"])
def test_the_login_page_is_styled_with_the_switcher(client, language):
    response = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE=language)
    page = response.content.decode()
    assert_product_page(page, language)
    with translation.override(language):
        assert f"<h1>{translation.gettext('Log in')}</h1>" in page


def test_the_switcher_on_the_login_page_changes_the_language(client):
    page = client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "<h1>로그인</h1>" in page
    client.post("/i18n/setlang/", {"language": "en", "next": "/accounts/login/"})
    assert "<h1>Log in</h1>" in client.get("/accounts/login/", HTTP_ACCEPT_LANGUAGE="ko").content.decode()


@pytest.mark.parametrize("language", ["ko", "en"])
def test_the_404_page_is_the_products_and_translated(client, language):
    response = client.get("/no/such/page/", HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 404
    page = response.content.decode()
    assert_product_page(page, language)
    with translation.override(language):
        assert translation.gettext("Page not found") in page
    assert "Not Found" not in page and "The requested resource" not in page


@pytest.mark.parametrize("language", ["ko", "en"])
def test_the_500_page_is_the_products_and_translated(language):
    from django.test import RequestFactory

    from accounts.views import server_error
    from owlai import urls

    assert urls.handler500 == "accounts.views.server_error"
    request = RequestFactory().get("/broken/")
    with translation.override(language):
        response = server_error(request)
        expected = translation.gettext("Something went wrong")
    assert response.status_code == 500
    page = response.content.decode()
    assert_product_page(page, language)
    assert expected in page


def test_the_favicon_is_served_and_every_page_names_it(admin_client):
    from django.test import Client

    client = Client()  # signed out
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == ICON
    from django.contrib.staticfiles import finders

    assert finders.find("accounts/favicon.svg")
    assert ICON in admin_client.get(reverse("admin:index")).content.decode()
    assert ICON in admin_client.get("/").content.decode()  # the chat page
    assert ICON in client.get(reverse("admin:login")).content.decode()


def test_the_admin_has_the_switcher_too(admin_client):
    from django.test import Client

    for response in (admin_client.get(reverse("admin:index")), Client().get(reverse("admin:login"))):
        page = response.content.decode()
        assert 'action="/i18n/setlang/"' in page and 'class="language-switcher"' in page


# --- schema analysis says when it finished -----------------------------------------------


def test_schema_analysis_says_when_it_finished_and_how_many_columns(admin_client, personas):
    from governance.models import ColumnClassification
    from governance.schema_analysis import schema_analysis_run
    from governance.schema_analysis_status import schema_analysis_status

    connection = personas.sales
    with translation.override("en"):
        assert schema_analysis_status(connection_id=connection.pk) == "never run"
    changed = schema_analysis_run(connection_id=connection.pk)
    assert changed == ColumnClassification.objects.filter(connection=connection).count() > 1
    finished = AuditEvent.objects.get(kind=EventKind.ANALYSIS_FINISHED, resource_id=str(connection.pk))
    assert finished.details == {"connection": "sales", "columns": changed}
    with translation.override("en"):
        status = schema_analysis_status(connection_id=connection.pk)
    assert status.startswith("finished ") and status.endswith(f": {changed} columns classified")
    page = admin_client.get(reverse("admin:governance_dbconnection_changelist"), HTTP_ACCEPT_LANGUAGE="ko")
    assert f"컬럼 {changed}개 분류" in page.content.decode()
    detail = admin_client.get(reverse("admin:governance_dbconnection_change", args=[connection.pk]))
    assert f"컬럼 {changed}개 분류" in detail.content.decode()


def test_a_failed_schema_analysis_says_so(personas):
    from governance.models import DbConnection
    from governance.schema_analysis import schema_analysis_run
    from governance.schema_analysis_status import schema_analysis_status
    from governance.services import GovernanceError

    broken = DbConnection.objects.create(name="gone", engine="sqlite", dsn_env="OWLAI_TEST_UNSET_DSN")
    with pytest.raises(GovernanceError):
        schema_analysis_run(connection_id=broken.pk)
    failed = AuditEvent.objects.get(kind=EventKind.ANALYSIS_FAILED, resource_id=str(broken.pk))
    assert "OWLAI_TEST_UNSET_DSN" in failed.details["error"]
    with translation.override("ko"):
        assert "실패" in schema_analysis_status(connection_id=broken.pk)


def test_the_analysis_action_tells_the_admin_where_to_read_the_end(admin_client, personas):
    response = admin_client.post(
        reverse("admin:governance_dbconnection_changelist"),
        {"action": "analyse_schema", "_selected_action": [personas.sales.pk]},
        HTTP_ACCEPT_LANGUAGE="ko",
        follow=True,
    )
    assert "끝나면 목록의 스키마 분석 열에 표시됩니다" in response.content.decode()


# --- internal words -------------------------------------------------------------------


def test_filters_of_a_view_event_read_in_the_readers_language(admin_client, personas):
    from audit.services import tool_call_audit_write

    tool_call_audit_write(
        actor_id=personas.staff.pk, actor_username="staff", tool="run_sql", outcome="denied", sql_text="DELETE"
    )
    # An English reader filters the SQL list by outcome; a Korean reader reads the record.
    admin_client.get(
        reverse("admin:audit_sqlexecution_changelist"), {"outcome__exact": "denied"}, HTTP_ACCEPT_LANGUAGE="en"
    )
    event = AuditEvent.objects.get(kind=EventKind.ADMIN_VIEW, resource_kind="sql_execution")
    assert event.details["filter_labels"] == {"outcome": "Denied"}
    assert event.details["filter_labels_by_language"]["ko"] == {"결과": "거부됨"}
    page = admin_client.get(reverse("admin:audit_auditevent_changelist"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "결과: 거부됨" in page and "outcome" not in page and "Denied" not in page
    english = admin_client.get(reverse("admin:audit_auditevent_change", args=[event.pk]), HTTP_ACCEPT_LANGUAGE="en")
    assert "outcome: Denied" in english.content.decode()


def test_older_records_without_every_language_keep_what_they_recorded():
    from audit.admin_views import recorded_filters

    assert recorded_filters({"filter_labels": {"사용자": "staff"}}, {"user_id": "3"}) == {"사용자": "staff"}
    assert recorded_filters(None, {"user_id": "3"}) == {"user_id": "3"}


def test_token_events_and_dsn_sources_are_in_words(admin_client, personas):
    from accounts.services import api_token_create

    api_token_create(user=personas.staff, name="script", actor=personas.admin)
    event = AuditEvent.objects.get(kind=EventKind.API_TOKEN_CREATED)
    assert event.resource_kind == "api_token"  # the record keeps the code
    page = admin_client.get(reverse("admin:audit_auditevent_changelist"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    target = re.search(r'<td class="field-target">(.*?)</td>', page).group(1)
    assert target.startswith("API 토큰 #"), target
    connections = admin_client.get(reverse("admin:governance_dbconnection_changelist"), HTTP_ACCEPT_LANGUAGE="ko")
    assert "암호화해 저장함" in connections.content.decode() and ">stored<" not in connections.content.decode()


def test_recorded_codes_in_an_events_details_are_in_words(admin_client, personas):
    event = audit_event_write(
        kind=EventKind.SETTINGS_CHANGE,
        actor=personas.admin,
        resource_kind="db_connection",
        details={"setting": "DSN of sales", "before": "stored", "after": "env:SALES_DSN"},
    )
    page = admin_client.get(reverse("admin:audit_auditevent_change", args=[event.pk]), HTTP_ACCEPT_LANGUAGE="ko")
    text = page.content.decode()
    assert "암호화해 저장함" in text and '"stored"' not in text
    event.refresh_from_db()
    assert event.details["before"] == "stored"


def test_recorded_setting_names_are_shown_in_the_readers_words(admin_client, personas):
    from governance.models import Feature, LlmModel, Provider
    from governance.services import feature_default_set

    provider = Provider.objects.create(name="p", kind="openai", tier="private")
    model = LlmModel.objects.create(provider=provider, name="m", label="M", enabled=True)
    feature_default_set(feature=Feature.CHAT, model=model)
    event = AuditEvent.objects.filter(details__setting="default model for chat").get()
    ko_page = admin_client.get(reverse("admin:audit_auditevent_changelist"), HTTP_ACCEPT_LANGUAGE="ko").content.decode()
    assert "chat 기본 모델" in ko_page and "default model for" not in ko_page
    en_page = admin_client.get(reverse("admin:audit_auditevent_change", args=[event.pk]), HTTP_ACCEPT_LANGUAGE="en")
    assert "default model for chat" in en_page.content.decode()
