"""The admin in a real browser (Playwright + Debian's Chromium) on the
production stack (tests/support/browser.py): a bulk classification decision
that changes what the next chat query masks, and the audit SQL-execution
list as a compliance officer filters and exports it."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime
from unittest import mock
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext

from audit.models import AuditEvent, EventKind, ResourceKind
from audit.services import tool_call_audit_write
from governance.models import ColumnClassification, DbConnection, PiiKindChoice
from tests.support.governed import classify

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

NAMES = ["김민준", "이서연", "박지후"]  # customers.name, in id order (tests/support/customer_dbs.py)


def ko(message: str) -> str:
    with translation.override("ko"):
        return gettext(message)


@pytest.fixture
def admin_user(chat_env, django_user_model):
    return django_user_model.objects.create_superuser("compliance", password="pw-compliance-123")


def script_errors(page) -> list[str]:
    """Uncaught script errors of `page` from now on (a broken admin script
    leaves the page looking right while its widgets do nothing)."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def finished(page, count: int) -> None:
    page.wait_for_function(
        "n => document.querySelectorAll('.row.assistant').length >= n"
        " && !document.querySelector('.working') && !document.querySelector('#send.stop')",
        arg=count,
    )


# --- classification bulk actions -------------------------------------------------------------


def pick(page, title: str, typed: str, choice: str) -> None:
    """In the picker filter titled `title`: type `typed`, pick `choice`; the list reloads."""
    page.locator(f'details[data-filter-title="{title}"] .select2-selection').click()
    page.locator(".select2-search__field").fill(typed)
    option = page.locator(".select2-results__option", has_text=re.compile(f"^{re.escape(choice)}$"))
    with page.expect_navigation():
        option.click()
    rendered = page.locator(f'details[data-filter-title="{title}"] .select2-selection__rendered')
    assert rendered.inner_text().strip().endswith(choice)


def ask_names(page, count: int):
    """Alice asks the demo model for the names; returns the `count`th answer's
    name column as shown: (cell texts, how many of them are token chips)."""
    page.fill("#text", "SELECT name, city FROM customers ORDER BY id")
    page.press("#text", "Enter")
    finished(page, count)
    cells = page.locator(".row.assistant").nth(count - 1).locator(".text table tbody td:first-child")
    assert cells.count() == 3
    return cells.all_inner_texts(), cells.locator(".pii").count()


def bulk_action(page, changelist: str, column: str, action: str, kind: str = "") -> None:
    """In the changelist: tick `column`'s row, choose `action` (and `kind`), Run."""
    page.goto(changelist)
    row = page.locator(
        "#result_list tbody tr", has=page.locator("td.field-column_name", has_text=re.compile(f"^{column}$"))
    )
    assert row.count() == 1
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", action)
    if kind:
        page.select_option("select[name=pii_kind]", kind)
    with page.expect_navigation():
        page.locator(".actions button[type=submit]").click()
    if action == "set_none":  # widening: its impact page first (tests/test_browser_impact.py)
        with page.expect_navigation():
            page.click("#impact-confirm")
    message = ko("%(count)d column classifications changed; the next query uses them.") % {"count": 1}
    assert page.locator(".messagelist li").inner_text() == message


def kind_shown(page, column: str) -> str:
    row = page.locator(
        "#result_list tbody tr", has=page.locator("td.field-column_name", has_text=re.compile(f"^{column}$"))
    )
    return row.locator("td.field-kind_shown").inner_text()


def test_a_bulk_classification_action_changes_the_next_querys_masking(chat_env, pages, admin_user):
    from governance.services import feature_default_set

    # The offline demo model runs the SQL Alice writes and shows the rows as a table.
    feature_default_set(feature="chat", model=chat_env.models["owlai-offline-demo"])
    classify(chat_env.sales, {"customers": {"id": None, "name": None, "phone": "phone", "city": None}})
    chat = pages.open(chat_env.alice)
    chat.goto(chat_env.url("/"))
    chat.wait_for_selector(".empty")
    shown, chips = ask_names(chat, 1)
    assert (shown, chips) == (NAMES, 0)  # classified "not personal data": in clear

    # Another connection with a column of the same name: the filters tell them apart.
    warehouse = DbConnection.objects.create(name="warehouse", engine="postgresql", dsn_env="OWLAI_TEST_TARGET_DSN")
    classify(warehouse, {"customers": {"name": None}})

    admin = pages.open(admin_user)
    errors = script_errors(admin)
    admin.goto(chat_env.url("/admin/governance/columnclassification/"))
    assert admin.locator("#result_list tbody tr").count() == 5
    pick(admin, ko("DB connection"), "sal", "sales")
    with admin.expect_navigation():
        admin.locator(f'details[data-filter-title="{ko("table")}"] a', has_text="customers").click()
    changelist = admin.url
    assert f"connection_id={chat_env.sales.pk}" in changelist and "table=customers" in changelist
    assert admin.locator("#result_list tbody td.field-column_name").all_inner_texts() == ["city", "id", "name", "phone"]
    assert kind_shown(admin, "name") == ko("Not personal data")
    bulk_action(admin, changelist, "name", "set_kind", "name")
    with translation.override("ko"):
        assert kind_shown(admin, "name") == str(dict(PiiKindChoice.choices)["name"])

    # Alice's next query: the names are token chips, in the answer and its step.
    shown, chips = ask_names(chat, 2)
    assert chips == 3 and all(re.fullmatch(r"\[이름-\d+\]", cell) for cell in shown), shown
    answer = chat.locator(".row.assistant").nth(1)
    assert not any(name in answer.inner_text() for name in NAMES)
    chip = answer.locator(".text .pii").first
    with translation.override("ko"):
        hint = gettext(
            "Masked %(kind)s. Only people whose role may view personal data can reveal it; "
            "ask an administrator to grant you such a role."
        ) % {"kind": gettext("Name")}
    assert chip.get_attribute("title") == hint

    # And back: set to none. A conversation keeps masking the values its
    # vault already holds (they were shown to its model as tokens); a new
    # conversation's query shows them in clear.
    bulk_action(admin, changelist, "name", "set_none")
    assert kind_shown(admin, "name") == ko("Not personal data")
    shown, chips = ask_names(chat, 3)
    assert chips == 3 and all(re.fullmatch(r"\[이름-\d+\]", cell) for cell in shown), shown
    chat.click("#new")
    chat.wait_for_selector(".empty")
    shown, chips = ask_names(chat, 1)
    assert (shown, chips) == (NAMES, 0)

    events = AuditEvent.objects.filter(
        kind=EventKind.CLASSIFICATION_SET, resource_kind=ResourceKind.COLUMN_CLASSIFICATION
    ).order_by("id")
    assert [(e.actor_username, e.details["before"], e.details["after"]) for e in events] == [
        ("compliance", None, "name"),
        ("compliance", "name", None),
    ]
    row = ColumnClassification.objects.get(connection=chat_env.sales, table_name="customers", column_name="name")
    assert (row.pii_kind, row.source, row.state) == ("", "manual", "confirmed")
    assert errors == []


# --- the audit SQL-execution list: range, picker, CSV ---------------------------------------------


def sql_row(user, at: datetime, sql: str, connection=None):
    """An audit row of `user` written at `at` (auto_now_add takes "now")."""
    with mock.patch("django.utils.timezone.now", return_value=at):
        return tool_call_audit_write(
            actor_id=user.pk,
            actor_username=user.username,
            tool="run_sql",
            outcome="success",
            resource_kind="db_connection",
            resource_id=connection.pk if connection else None,
            resource_name=connection.name if connection else "",
            row_count=1,
            sql_text=sql,
            tables=["customers"],
        )


def listed_sql(page) -> list[str]:
    return page.locator("#result_list tbody td.field-short_sql").all_inner_texts()


def test_audit_list_range_filter_user_picker_and_csv_of_the_filtered_rows(chat_env, pages, admin_user):
    from django.contrib.auth import get_user_model

    zone = ZoneInfo(settings.TIME_ZONE)  # the installation's, as the server reads it
    alicia = get_user_model().objects.create_user("alicia", password="pw-alicia-123")
    sales = chat_env.sales
    alice, rita = chat_env.alice, chat_env.rita
    day = datetime(2025, 3, 1, tzinfo=zone)
    in_range = [
        sql_row(alice, day.replace(hour=9, minute=5), "SELECT 'alice morning'", sales),
        # The last minute of the day where the installation is (in UTC it may be another day).
        sql_row(alice, day.replace(hour=23, minute=59, second=30), "SELECT 'alice late'", sales),
    ]
    sql_row(alice, datetime(2025, 3, 2, 0, 0, 30, tzinfo=zone), "SELECT 'alice next day'", sales)
    sql_row(alice, datetime(2025, 2, 28, 23, 59, 0, tzinfo=zone), "SELECT 'alice day before'", sales)
    sql_row(alicia, day.replace(hour=10), "SELECT 'alicia'", sales)
    sql_row(rita, day.replace(hour=11), "SELECT 'rita'", sales)

    page = pages.open(admin_user)
    errors = script_errors(page)
    page.goto(chat_env.url("/admin/audit/sqlexecution/"))
    assert len(listed_sql(page)) == 6
    zone_note = page.locator(".owlai-time-zone").inner_text()
    assert settings.TIME_ZONE in zone_note

    # The date-time range: one calendar day, read in the installation's zone.
    range_filter = page.locator(".admindatefilter form")
    range_filter.locator("input[name=created_at__range__gte_0]").fill("2025-03-01")
    range_filter.locator("input[name=created_at__range__gte_1]").fill("00:00:00")
    range_filter.locator("input[name=created_at__range__lte_0]").fill("2025-03-01")
    range_filter.locator("input[name=created_at__range__lte_1]").fill("23:59:59")
    with page.expect_navigation():
        range_filter.locator("input[type=submit]").click()
    assert sorted(listed_sql(page)) == [
        "SELECT 'alice late'",
        "SELECT 'alice morning'",
        "SELECT 'alicia'",
        "SELECT 'rita'",
    ]

    # The user picker: type part of a name, pick the account.
    # Both accounts whose name holds "ali" are offered; one is picked.
    page.locator(f'details[data-filter-title="{ko("user")}"] .select2-selection').click()
    page.locator(".select2-search__field").fill("ali")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.select2-results__option')].map(o => o.textContent).join('|')"
        " === 'alice|alicia'"
    )
    page.keyboard.press("Escape")
    pick(page, ko("user"), "ali", "alice")
    assert f"user_id={alice.pk}" in page.url and "created_at__range__gte_0=2025-03-01" in page.url
    assert sorted(listed_sql(page)) == ["SELECT 'alice late'", "SELECT 'alice morning'"]
    # Both filters still show what was chosen.
    assert page.locator(".admindatefilter input[name=created_at__range__gte_0]").input_value() == "2025-03-01"
    times = page.locator("#result_list tbody .field-time").all_inner_texts()
    assert sorted(times) == sorted(row.created_at.astimezone(zone).isoformat(timespec="seconds") for row in in_range)

    # CSV of exactly this list.
    with page.expect_download() as download_info:
        page.get_by_role("link", name=ko("Export CSV (at most 5,000 rows)")).click()
    download = download_info.value
    assert download.suggested_filename.startswith("sqlexecution-") and download.suggested_filename.endswith(".csv")
    body = open(download.path(), encoding="utf-8-sig").read()
    header, *rows = list(csv.reader(io.StringIO(body, newline="")))
    offset = day.strftime("%z")
    zone_label = f"{settings.TIME_ZONE}, UTC{offset[:3]}:{offset[3:]}"
    assert header[0] == f"{ko('time')} ({zone_label})"
    assert header[1:3] == [ko("user"), ko("tool")]
    assert sorted((r[0], r[1], r[header.index(ko("SQL"))]) for r in rows) == sorted(
        (row.created_at.astimezone(zone).isoformat(timespec="seconds"), "alice", row.sql_text) for row in in_range
    )
    for r in rows:
        assert re.fullmatch(r"2025-03-01T\d\d:\d\d:\d\d[+-]\d\d:\d\d", r[0]), r[0]
    export = AuditEvent.objects.get(kind=EventKind.CSV_EXPORT)
    assert export.row_count == 2 and export.filters["user_id"] == str(alice.pk)
    assert errors == []
