"""The chat page in a real browser (Playwright + Debian's Chromium) on the
production stack: daphne, a Celery worker, PostgreSQL, Redis, the scripted
model server (tests/support/fake_llm.py) and the offline demo model."""

from __future__ import annotations

import json
import re
import time

import pytest
from django.utils import translation
from django.utils.translation import gettext

from audit.models import AuditEvent, EventKind, ToolCallAudit
from chat.models import Conversation, Turn, TurnStatus
from tests.support.browser import browser_stack, chat_env, chromium, pages  # noqa: F401 (fixtures)
from tests.support.fake_llm import stall, text, tool_call

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

TABLE_ANSWER = (
    "고객 현황입니다.\n\n"
    "| 도시 | 고객 수 |\n|---|---|\n| 서울 | 2 |\n| 부산 | 1 |\n\n"
    "- **서울**이 가장 많습니다\n- *부산*은 한 명\n\n"
    "```sql\nSELECT city, count(*) FROM customers GROUP BY city\n```"
)


def ko(message: str) -> str:
    with translation.override("ko"):
        return gettext(message)


def wait_until(check, timeout: float = 15.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def send(page, message: str) -> None:
    page.fill("#text", message)
    page.press("#text", "Enter")


def finished(page, count: int = 1) -> None:
    """`count` answers on the page ended (no working indicator, Send back)."""
    page.wait_for_function(
        "n => document.querySelectorAll('.row.assistant').length >= n"
        " && !document.querySelector('.working') && !document.querySelector('#send.stop')",
        arg=count,
    )


# --- signing in, first conversation, streaming, markdown -----------------------------


def test_login_form_signs_in_and_shows_an_empty_chat(chat_env, pages):
    chat_env.set_password(chat_env.alice, "pw-alice-123")
    page = pages.open()
    page.goto(chat_env.url("/"))
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw-alice-123")
    page.click("button[type=submit]")
    page.wait_for_selector(".empty")
    assert page.locator("#conversations li").count() == 0
    # The picker names each model's tier; the notice sits in the header.
    options = page.eval_on_selector_all("#model option", "os => os.map(o => o.textContent)")
    assert any("In-house model" in o and ko("Private (stays on-prem)") in o for o in options)
    assert any("Cloud model" in o and ko("Public (leaves the network)") in o for o in options)
    assert page.locator("header #tier").inner_text() == ko("Private tier: data stays on-prem")
    assert Conversation.objects.count() == 0  # nothing created by opening the page


def test_first_send_creates_one_titled_conversation_and_streams_a_rendered_table(chat_env, pages):
    chat_env.fake.script = [stall(TABLE_ANSWER, seconds=2.5)]
    page = pages.open(chat_env.alice)
    page.goto(chat_env.url("/"))
    page.wait_for_selector(".empty")
    # Shift+Enter is a new line; Enter sends.
    page.fill("#text", "도시별 고객 수를")
    page.press("#text", "Shift+Enter")
    page.type("#text", "표로 보여줘")
    assert page.input_value("#text") == "도시별 고객 수를\n표로 보여줘"
    assert Conversation.objects.count() == 0
    page.press("#text", "Enter")

    # While the model is still answering: the text so far is rendered, the
    # working indicator shows and Send has become Stop.
    page.wait_for_selector(".row.assistant .markdown table")
    assert page.locator(".working").count() == 1
    assert page.locator("#send.stop").count() == 1
    assert page.input_value("#text") == ""
    finished(page)

    answer = page.locator(".row.assistant").last
    assert answer.locator("table th").all_inner_texts() == ["도시", "고객 수"]
    assert answer.locator("table td").all_inner_texts() == ["서울", "2", "부산", "1"]
    assert answer.locator("li strong").inner_text() == "서울"
    assert answer.locator("li em").inner_text() == "부산"
    assert "GROUP BY city" in answer.locator("pre code").inner_text()
    assert "|" not in answer.locator(".markdown").inner_text().split("```")[0].splitlines()[0]
    # Model and tier above the answer, not under it.
    meta = answer.locator(".meta")
    assert "In-house model" in meta.inner_text()
    assert answer.evaluate("a => a.firstElementChild.classList.contains('meta')")

    conversations = list(Conversation.objects.all())
    assert len(conversations) == 1 and conversations[0].title == "도시별 고객 수를"
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length === 1")
    assert page.locator("#conversations li .conversation-title").inner_text() == "도시별 고객 수를"
    assert page.locator("#conversations li.active").count() == 1
    assert page.url.endswith("#" + str(conversations[0].pk))


def test_new_conversation_button_creates_nothing_until_the_first_send(chat_env, pages):
    chat_env.fake.script = [text("첫 답"), text("둘째 답")]
    page = pages.open(chat_env.alice)
    page.goto(chat_env.url("/"))
    send(page, "첫 질문")
    finished(page)
    for _ in range(3):
        page.click("#new")
    page.wait_for_selector(".empty")
    assert Conversation.objects.count() == 1
    send(page, "둘째 질문")
    finished(page)
    # Newest first, each titled by its first message.
    page.wait_for_function(
        "() => [...document.querySelectorAll('#conversations .conversation-title')].map(a => a.textContent)"
        ".join('|') === '둘째 질문|첫 질문'"
    )
