"""The compliance officer's day in a real browser (tests/support/browser.py):
the demo `auditor` signs in on the login page, narrows the SQL list by time
range, user, connection and outcome with the pickers, exports the CSV,
opens a detail, and is refused every governance change form; the events
list reads at 1366 px (every column and the filters on screen)."""

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

from audit.events import audit_event_write
from audit.models import AuditEvent, EventKind
from audit.services import tool_call_audit_write

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
def auditor(chat_env):
    """The demo auditor, as seed_demo creates it."""
    from django.contrib.auth import get_user_model

    from governance.management.commands.seed_demo import Command

    assert Command()._auditor() is True
    user = get_user_model().objects.get(username="auditor")
    chat_env.set_password(user, "auditor")
    return user


def sql_row(user, at: datetime, sql: str, connection, outcome: str = "denied"):
    with mock.patch("django.utils.timezone.now", return_value=at):
        return tool_call_audit_write(
            actor_id=user.pk,
            actor_username=user.username,
            tool="run_sql",
            outcome=outcome,
            resource_kind="db_connection",
            resource_id=connection.pk,
            resource_name=connection.name,
            row_count=0,
            sql_text=sql,
            tables=["customers"],
        )


def sign_in(page, url: str, username: str, password: str) -> None:
    page.goto(url)
    assert "/login/" in page.url
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.locator("#content-main form [type=submit], form [type=submit]").first.click()


def pick(page, title: str, typed: str, choice: str) -> None:
    page.locator(f'details[data-filter-title="{title}"] .select2-selection').click()
    page.locator(".select2-search__field").fill(typed)
    option = page.locator(".select2-results__option", has_text=re.compile(f"^{re.escape(choice)}$"))
    with page.expect_navigation():
        option.click()
    rendered = page.locator(f'details[data-filter-title="{title}"] .select2-selection__rendered')
    assert rendered.inner_text().strip().endswith(choice)


def listed_sql(page) -> list[str]:
    return page.locator("#result_list tbody td.field-short_sql").all_inner_texts()


def test_the_demo_auditor_filters_with_the_pickers_exports_and_reads_but_changes_nothing(chat_env, pages, auditor):
    from governance.models import DbConnection

    zone = ZoneInfo(settings.TIME_ZONE)
    sales = chat_env.sales
    hr = DbConnection.objects.create(name="hr", engine="postgresql", dsn_env="OWLAI_TEST_TARGET_DSN")
    alice, rita = chat_env.alice, chat_env.rita
    day = datetime(2025, 3, 1, tzinfo=zone)
    wanted = sql_row(alice, day.replace(hour=9), "SELECT 'alice denied on sales'", sales)
    sql_row(alice, day.replace(hour=10), "SELECT 'alice success'", sales, outcome="success")
    sql_row(alice, day.replace(hour=11), "SELECT 'alice on hr'", hr)
    sql_row(rita, day.replace(hour=12), "SELECT 'rita'", sales)
    sql_row(alice, datetime(2025, 3, 2, 9, tzinfo=zone), "SELECT 'alice next day'", sales)

    page = pages.open(None)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, chat_env.url("/admin/audit/sqlexecution/"), "auditor", "auditor")
    assert page.url.endswith("/admin/audit/sqlexecution/")
    assert len(listed_sql(page)) == 5

    form = page.locator(".admindatefilter form")
    form.locator("input[name=created_at__range__gte_0]").fill("2025-03-01")
    form.locator("input[name=created_at__range__gte_1]").fill("00:00:00")
    form.locator("input[name=created_at__range__lte_0]").fill("2025-03-01")
    form.locator("input[name=created_at__range__lte_1]").fill("23:59:59")
    with page.expect_navigation():
        form.locator("input[type=submit]").click()
    assert len(listed_sql(page)) == 4

    # The pickers: the auditor has no right on the users' or connections' screens.
    pick(page, ko("user"), "ali", "alice")
    assert sorted(listed_sql(page)) == [
        "SELECT 'alice denied on sales'",
        "SELECT 'alice on hr'",
        "SELECT 'alice success'",
    ]
    pick(page, ko("DB connection"), "sal", "sales")
    assert sorted(listed_sql(page)) == ["SELECT 'alice denied on sales'", "SELECT 'alice success'"]
    outcome = page.locator(f'details[data-filter-title="{ko("outcome")}"] a', has_text=re.compile(f"^{ko('Denied')}$"))
    with page.expect_navigation():
        outcome.click()
    assert listed_sql(page) == ["SELECT 'alice denied on sales'"]
    assert f"user_id={alice.pk}" in page.url and f"connection_id={sales.pk}" in page.url
    assert "outcome__exact=denied" in page.url and "created_at__range__gte_0=2025-03-01" in page.url

    with page.expect_download() as download_info:
        page.get_by_role("link", name=ko("Export CSV (at most 5,000 rows)")).click()
    body = open(download_info.value.path(), encoding="utf-8-sig").read()
    header, *rows = list(csv.reader(io.StringIO(body, newline="")))
    assert [r[header.index(ko("SQL"))] for r in rows] == ["SELECT 'alice denied on sales'"]
    assert rows[0][header.index(ko("outcome"))] == ko("Denied")
    export = AuditEvent.objects.get(kind=EventKind.CSV_EXPORT)
    assert export.actor_username == "auditor" and export.row_count == 1

    with page.expect_navigation():
        page.locator("#result_list tbody tr th a, #result_list tbody tr td a").first.click()
    assert f"/admin/audit/sqlexecution/{wanted.pk}/change/" in page.url
    assert "SELECT 'alice denied on sales'" in page.locator("#content").inner_text()
    assert page.locator("input[type=submit][name=_save]").count() == 0  # read only
    detail = AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW, resource_id=str(wanted.pk)).get()
    assert detail.actor_username == "auditor" and detail.owner_username == "alice"

    # Governance: no change form opens, and the admin index offers none.
    for path in (
        f"/admin/governance/dbconnection/{sales.pk}/change/",
        "/admin/governance/dbconnection/add/",
        "/admin/governance/role/add/",
        "/admin/governance/columnclassification/",
        "/admin/governance/llmmodel/",
        f"/admin/auth/user/{alice.pk}/change/",
        "/admin/auth/group/add/",
        "/admin/accounts/apitoken/add/",
    ):
        response = page.goto(chat_env.url(path))
        assert response.status == 403, (path, response.status)
    page.goto(chat_env.url("/admin/"))
    links = page.locator("#content-main a").evaluate_all("els => els.map(a => a.getAttribute('href'))")
    assert links and all(href.startswith("/admin/audit/") for href in links), links
    assert errors == []


def test_the_events_list_keeps_every_column_and_the_filters_on_screen_at_1366_px(chat_env, pages, auditor):
    alice = chat_env.alice
    for n in range(12):
        audit_event_write(
            kind=EventKind.ADMIN_VIEW if n % 2 else EventKind.CSV_EXPORT,
            actor=alice,
            resource_kind="conversation",
            # Long values without a space (ids, addresses) must not push the filters off-screen.
            resource_id=f"5f0c2a9e-7d41-4c8b-9a3e-{n:012d}",
            owner_id=chat_env.rita.pk,
            owner_username="rita",
            row_count=n,
            filters={"user_id": "7", "outcome__exact": "denied"},
            details={
                "filter_labels": {"사용자": "alice", "결과": "거부됨", "기간": "최근 30일", "검색": "x" * 60},
                "name": "고객_상담_이력_전체_내보내기_요청_" * 2,
            },
        )
    page = pages.open(auditor, width=1366, height=768)
    page.goto(chat_env.url("/admin/audit/auditevent/"))
    boxes = page.evaluate(
        """() => {
          const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.right, r.width, r.height]; };
          // Lines of text in a cell: the distinct tops of its text's boxes (a
          // cell's own height is its row's).
          const lines = el => {
            const tops = new Set();
            const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
              if (!node.textContent.trim()) continue;
              const range = document.createRange();
              range.selectNodeContents(node);
              for (const r of range.getClientRects()) if (r.width > 0) tops.add(Math.round(r.top));
            }
            return tops.size;
          };
          const cell = el => ({cls: el.className, text: el.innerText.trim(), box: box(el), lines: lines(el)});
          return {
            viewport: document.documentElement.clientWidth,
            headers: [...document.querySelectorAll('#result_list thead th')]
              .map(th => ({...cell(th), lines: lines(th.querySelector('.text') || th)})),
            cells: [...document.querySelectorAll('#result_list tbody tr:first-child > *')].map(cell),
            filter: box(document.querySelector('#changelist-filter')),
          };
        }"""
    )
    width = boxes["viewport"]
    filter_left = boxes["filter"][0]
    assert len(boxes["headers"]) >= 8
    for header in boxes["headers"]:
        left, right, _w, _h = header["box"]
        assert left >= 0 and right <= filter_left, header
        assert header["lines"] <= 1, header  # a title broken letter by letter is unreadable
    shown = {c["cls"]: c for c in boxes["cells"]}
    for cell in boxes["cells"]:
        left, right, _w, _h = cell["box"]
        assert left >= 0 and right <= filter_left, cell
    assert shown["field-time"]["lines"] == 1, shown
    # "관리자 화면 열람", "CSV 내보내기": whole words, not one syllable per line.
    assert shown["field-kind_shown"]["lines"] <= 2, shown
    assert shown["field-actor_username"]["lines"] == 1, shown
    left, right, w, _h = boxes["filter"]
    assert w > 150 and left >= 0 and right <= width + 1, boxes["filter"]


def test_the_login_page_has_the_products_look_and_switches_language(chat_env, pages):
    page = pages.open(None)
    response = page.goto(chat_env.url("/accounts/login/"))
    assert response.status == 200
    assert page.locator("h1").inner_text() == ko("Log in")
    # Styled: the product's stylesheet applied (the card, the accent button), the icon shown.
    button = page.locator("form.login button[type=submit]")
    assert button.evaluate("b => getComputedStyle(b).backgroundColor") == "rgb(47, 91, 211)"
    assert page.locator(".brand img").evaluate("img => img.naturalWidth") > 0
    assert page.locator("form.language-switcher .switch").is_hidden()  # the script submits on change
    with page.expect_navigation():
        page.select_option("form.language-switcher select", "en")
    assert page.locator("h1").inner_text() == "Log in"
    assert page.evaluate("document.documentElement.lang") == "en"
    favicon = page.goto(chat_env.url("/favicon.ico"))
    assert favicon.status == 200 and "svg" in favicon.headers["content-type"]
