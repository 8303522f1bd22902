"""The chat page's everyday conveniences in a real browser (Playwright +
Debian's Chromium, production stack as in tests/test_browser_chat.py):
regenerate and edit (new audited turns, the earlier version kept), copy a
message and a code block, highlighted code, search with its shortcut, date
groups, timestamps, export, dark mode; and each formerly broken behaviour
(rate limit, popover, code-block title, address bar / Back, "1 rows")."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from chat.models import Conversation, Message, MessageRole, Turn, TurnEvent, TurnStatus
from chat.services import conversation_create
from tests.support.fake_llm import text, tool_call
from tests.test_browser_chat import finished, ko, open_chat, send, wait_until

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


def user_messages(request_body: dict) -> list[str]:
    return [m["content"] for m in request_body["messages"] if m["role"] == "user"]


def stored_conversation(owner, title: str, *, question: str, answer: str, days_ago: int = 0) -> Conversation:
    conversation = conversation_create(owner=owner, title=title)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED, tier="private")
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.USER, content=question)
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.ASSISTANT, content=answer)
    # The latest turn is shown from its events (as the worker stored them).
    for seq, (kind, payload) in enumerate(
        [
            ("turn.accepted", {"model": "onprem/inhouse-model", "tier": "private"}),
            ("message.completed", {"text": answer}),
            ("turn.finished", {"status": "completed"}),
        ],
        start=1,
    ):
        TurnEvent.objects.create(turn=turn, seq=seq, type=kind, payload=payload)
    # updated_at is auto_now: set it past save().
    when = timezone.now() - timedelta(days=days_ago)
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=when, tier="private")
    Turn.objects.filter(pk=turn.pk).update(finished_at=when, last_seq=3)
    return conversation


# --- regenerate and edit ---------------------------------------------------------------


def test_regenerate_runs_a_new_turn_and_keeps_the_earlier_answer(chat_env, pages):
    chat_env.fake.script = [text("첫 번째 답"), text("두 번째 답")]
    page = open_chat(chat_env, pages)
    send(page, "요약해 줘")
    finished(page)
    page.locator(".row.assistant.latest .action.regenerate").click()
    page.wait_for_function("() => document.querySelectorAll('.earlier-version .row.assistant').length === 1")
    finished(page, 2)

    earlier = page.locator(".earlier-version")
    assert "첫 번째 답" in earlier.text_content()  # folded: there, not open
    assert page.locator("#log > .row.assistant").inner_text().count("두 번째 답") == 1
    assert page.locator("#log > .row.user .bubble").inner_text() == "요약해 줘"
    first, second = Turn.objects.order_by("id")
    assert second.supersedes_id == first.pk and second.status == TurnStatus.COMPLETED
    # The model saw the question once: the earlier version left the history.
    assert user_messages(chat_env.fake.requests[1]) == ["요약해 줘"]

    page.reload()
    page.wait_for_selector(".earlier-version")
    finished(page, 2)
    assert not page.locator(".earlier-version").evaluate("d => d.open")  # folded
    assert page.locator("#log > .row.assistant").inner_text().count("두 번째 답") == 1
    assert page.locator("#log > .row.assistant.latest .action.regenerate").is_visible()


def test_edit_and_resend_replaces_the_message_and_keeps_the_earlier_version(chat_env, pages):
    chat_env.fake.script = [text("서울 답"), text("부산 답")]
    page = open_chat(chat_env, pages)
    send(page, "서울 고객 수는?")
    finished(page)
    page.locator(".row.user.latest .action.edit").click()
    page.fill(".edit-text", "부산 고객 수는?")
    page.locator(".edit-send").click()
    page.wait_for_function("() => document.querySelectorAll('.earlier-version .row.user').length === 1")
    finished(page, 2)

    assert page.locator(".earlier-version .bubble.user").text_content() == "서울 고객 수는?"
    assert page.locator("#log > .row.user .bubble").inner_text() == "부산 고객 수는?"
    first, second = Turn.objects.order_by("id")
    assert second.supersedes_id == first.pk
    assert second.messages.get(role="user").content == "부산 고객 수는?"
    assert user_messages(chat_env.fake.requests[1]) == ["부산 고객 수는?"]
    # Only the latest message is editable.
    assert page.locator(".earlier-version .action.edit").is_hidden()


# --- copy, highlighting -------------------------------------------------------------------

CODE_ANSWER = "쿼리입니다.\n\n```sql\nSELECT city, count(*) FROM customers GROUP BY city\n```"


def test_copy_a_message_and_a_code_block_and_code_is_highlighted(chat_env, pages):
    chat_env.fake.script = [text(CODE_ANSWER)]
    page = open_chat(chat_env, pages)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat_env.url(""))
    send(page, "도시별 고객 수 쿼리")
    finished(page)

    code = page.locator(".row.assistant pre code")
    assert code.locator(".hljs-keyword").first.inner_text() == "SELECT"
    page.locator(".row.assistant pre").hover()
    page.locator(".row.assistant .copy-code").click()
    clipboard = wait_until(lambda: page.evaluate("navigator.clipboard.readText()"))
    assert clipboard == "SELECT city, count(*) FROM customers GROUP BY city\n"
    assert page.locator(".row.assistant .copy-code").inner_text() == ko("Copied")

    page.locator(".row.assistant .actions .copy").click()
    page.wait_for_function("() => navigator.clipboard.readText().then(t => t.startsWith('쿼리입니다.'))")
    assert page.evaluate("navigator.clipboard.readText()") == CODE_ANSWER  # the markdown as written
    page.locator(".row.user .actions .copy").click()
    page.wait_for_function("() => navigator.clipboard.readText().then(t => t === '도시별 고객 수 쿼리')")


# --- search, date groups, timestamps, export ----------------------------------------------


def test_search_with_its_shortcut_and_date_groups(chat_env, pages):
    stored_conversation(chat_env.alice, "매출 보고", question="이번 달 매출", answer="1억입니다.")
    stored_conversation(chat_env.alice, "고객 목록", question="고객 명단", answer="세 명", days_ago=1)
    stored_conversation(chat_env.alice, "오래된 대화", question="재고 현황", answer="창고에 있습니다.", days_ago=45)
    page = open_chat(chat_env, pages)
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length === 3")
    labels = page.locator("#conversations .group-label").all_inner_texts()
    assert labels[:2] == [ko("Today"), ko("Yesterday")] and len(labels) == 3

    page.locator("#text").click()
    page.keyboard.press("Control+k")
    assert page.evaluate("() => document.activeElement.id") == "search"
    page.keyboard.type("고객")
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length === 1")
    assert page.locator("#conversations .conversation-title").inner_text() == "고객 목록"
    page.fill("#search", "창고")  # in a message, not the title
    page.wait_for_function(
        "() => [...document.querySelectorAll('#conversations .conversation-title')].map(a => a.textContent)"
        ".join('|') === '오래된 대화'"
    )
    page.fill("#search", "없는 말")
    page.wait_for_selector("#conversations .no-matches")
    page.press("#search", "Escape")
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length === 3")


def test_timestamps_and_export_as_markdown_and_json(chat_env, pages):
    conversation = stored_conversation(
        chat_env.alice, "연락처", question="김 고객 번호", answer="번호는 [전화번호-1]입니다.", days_ago=3
    )
    page = pages.open(chat_env.alice)
    page.goto(chat_env.url(f"/#{conversation.pk}"))
    page.wait_for_selector(".row.assistant .pii")
    stamps = page.locator("#log time.stamp")
    assert stamps.count() == 2  # when it was asked, when it was answered
    asked = stamps.first.get_attribute("datetime")
    sent = datetime.fromisoformat(asked.replace("Z", "+00:00"))
    assert abs((sent - Turn.objects.get().created_at).total_seconds()) < 1

    page.locator("#export summary").click()
    with page.expect_download() as markdown:
        page.locator("#export-md").click()
    body = open(markdown.value.path(), encoding="utf-8").read()
    assert body.startswith("# 연락처\n") and "[전화번호-1]" in body and "김 고객 번호" in body
    page.locator("#export summary").click()
    with page.expect_download() as exported:
        page.locator("#export-json").click()
    data = json.loads(open(exported.value.path(), encoding="utf-8").read())
    assert data["masked"] is True and [i["role"] for i in data["items"]] == ["user", "assistant"]
    assert "[전화번호-1]" in data["items"][1]["content"]


# --- dark mode --------------------------------------------------------------------------------


def background(page) -> str:
    return page.evaluate("() => getComputedStyle(document.body).backgroundColor")


def test_dark_mode_follows_the_system_and_the_toggle_overrides_it(chat_env, pages):
    page = open_chat(chat_env, pages)
    light = background(page)
    page.emulate_media(color_scheme="dark")
    dark = background(page)
    assert light == "rgb(255, 255, 255)" and dark != light
    assert page.locator("#theme").inner_text() == ko("Theme: system")
    page.locator("#theme").click()  # system -> light
    assert background(page) == light and page.locator("#theme").inner_text() == ko("Theme: light")
    page.reload()
    page.wait_for_selector(".empty")
    assert background(page) == light  # kept across a reload
    page.locator("#theme").click()  # light -> dark
    page.emulate_media(color_scheme="light")
    assert background(page) == dark and page.locator("#theme").inner_text() == ko("Theme: dark")


# --- formerly broken ----------------------------------------------------------------------------


def test_a_fast_person_sends_five_messages_in_a_row_without_a_refusal(chat_env, pages):
    chat_env.fake.script = [text(f"답 {n}") for n in range(5)]
    page = open_chat(chat_env, pages)
    for n in range(5):
        send(page, f"질문 {n}")
        finished(page, n + 1)
    assert page.locator("#composer-error").is_hidden()
    assert Turn.objects.filter(status=TurnStatus.COMPLETED).count() == 5


LONG_ANSWER = "번호는 [전화번호-1]입니다.\n\n" + "\n\n".join(f"{n}번째 줄" for n in range(80))


def test_the_token_popover_follows_its_chip_when_the_log_scrolls(chat_env, pages):
    chat_env.fake.script = [text(LONG_ANSWER)]
    page = open_chat(chat_env, pages, height=700)
    send(page, "번호")
    finished(page)
    page.evaluate("() => { const log = document.getElementById('log'); log.scrollTop = 0; }")
    chip = page.locator(".row.assistant .pii").first
    chip.click()  # alice may not reveal: the popover says why
    page.wait_for_selector("#popover:not([hidden])")

    def gap() -> float:
        return page.evaluate(
            "() => document.getElementById('popover').getBoundingClientRect().top"
            " - document.querySelector('.row.assistant .pii').getBoundingClientRect().bottom"
        )

    before = gap()
    page.evaluate("() => { document.getElementById('log').scrollTop = 40; }")
    page.wait_for_function("() => document.getElementById('log').scrollTop === 40")
    page.wait_for_timeout(100)
    assert abs(gap() - before) < 1  # moved with its chip
    page.evaluate("() => { const log = document.getElementById('log'); log.scrollTop = log.scrollHeight; }")
    page.wait_for_selector("#popover[hidden]", state="attached")  # chip out of view: gone


def test_a_first_message_in_a_code_block_is_titled_by_its_code(chat_env, pages):
    chat_env.fake.script = [text("실행했습니다.")]
    page = open_chat(chat_env, pages)
    page.fill("#text", "```sql\nSELECT name FROM customers\n```")
    page.press("#text", "Enter")
    finished(page)
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length === 1")
    assert page.locator("#conversations .conversation-title").inner_text() == "SELECT name FROM customers"
    assert Conversation.objects.get().title == "SELECT name FROM customers"


def test_the_address_bar_and_back_open_the_conversation_they_name(chat_env, pages):
    a = stored_conversation(chat_env.alice, "대화 A", question="A의 질문", answer="A의 답")
    b = stored_conversation(chat_env.alice, "대화 B", question="B의 질문", answer="B의 답")
    chat_env.fake.script = [text("B에 온 답")]
    page = pages.open(chat_env.alice)
    page.goto(chat_env.url(f"/#{a.pk}"))
    page.wait_for_selector("text=A의 답")
    page.evaluate(f"() => {{ location.hash = '#{b.pk}'; }}")  # typed into the address bar
    page.wait_for_selector("text=B의 답")
    assert "A의 답" not in page.locator("#log").inner_text()
    assert page.locator("#conversations li.active .conversation-title").inner_text() == "대화 B"
    page.wait_for_function("() => !document.querySelector('#reconnecting:not([hidden])')")
    page.wait_for_timeout(300)  # B's socket is up
    send(page, "B에 보내는 질문")
    finished(page, 2)
    asked = Message.objects.get(role=MessageRole.USER, content="B에 보내는 질문")
    assert asked.conversation_id == b.pk  # not A's

    page.go_back()
    page.wait_for_selector("text=A의 답")
    assert page.url.endswith(f"#{a.pk}")
    assert "B에 온 답" not in page.locator("#log").inner_text()
    page.go_forward()
    page.wait_for_selector("text=B에 온 답")


def test_the_english_page_says_1_row(chat_env, pages):
    chat_env.fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": "SELECT name FROM customers ORDER BY id LIMIT 1"}),
        text("One customer."),
    ]
    page = open_chat(chat_env, pages, locale="en-US")
    send(page, "one customer")
    finished(page)
    summary = page.locator(".step summary").inner_text()
    assert "1 row" in summary.splitlines() and "1 rows" not in summary
