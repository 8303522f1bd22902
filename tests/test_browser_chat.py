"""The chat page in a real browser (Playwright + Debian's Chromium) on the
production stack: daphne, a Celery worker, PostgreSQL, Redis, the scripted
model server (tests/support/fake_llm.py) and the offline demo model."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import translation
from django.utils.translation import gettext, ngettext

from audit.models import AuditEvent, EventKind, ToolCallAudit
from chat.models import Conversation, Turn, TurnStatus
from governance.refusals import REFUSED_FRAME, Reason, localize
from governance.sql.guard import analyse_sql
from tests.support.fake_llm import Reply, stall, text, tool_call

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
    return in_language("ko", gettext, message)


def in_language(language: str, function, *args):
    with translation.override(language):
        return function(*args)


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
    page.wait_for_function("() => document.querySelectorAll('#model option').length === 3")
    page.wait_for_function("() => document.getElementById('tier').textContent !== ''")
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


# --- tool steps, refusals, errors ----------------------------------------------------

SQL = "SELECT name, phone FROM customers ORDER BY id"


def slow(reply: Reply, seconds: float):
    """A scripted reply that keeps the model call busy for `seconds` first."""

    def answer(body: dict) -> Reply:
        time.sleep(seconds)
        return reply

    return answer


def open_chat(chat_env, pages, user=None, **kwargs):
    page = pages.open(user or chat_env.alice, **kwargs)
    page.goto(chat_env.url("/"))
    page.wait_for_selector(".empty")
    return page


def check_step(page, *, rows: int) -> None:
    step = page.locator(".row.assistant .step")
    assert step.count() == 1
    summary = step.locator("summary").inner_text()
    assert ko("Database query") in summary and "sales" in summary and ko("Succeeded") in summary
    assert in_language("ko", ngettext, "%(count)s row", "%(count)s rows", rows) % {"count": rows} in summary
    assert not step.evaluate("d => d.open")  # collapsed until asked
    step.locator("summary").click()
    assert step.locator(".step-input").inner_text() == SQL
    cells = step.locator(".tool-result tbody tr")
    assert cells.count() == rows
    # Phone numbers come back masked: chips, never the number.
    chips = step.locator(".tool-result .pii").all_inner_texts()
    assert len(chips) == rows and all(c.startswith("[전화번호-") for c in chips)
    assert "010-1234-5678" not in step.inner_text()


def test_a_tool_step_shows_live_and_the_same_after_reload(chat_env, pages):
    chat_env.fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": SQL}),
        slow(text("고객은 **3명**입니다."), 2.0),
    ]
    page = open_chat(chat_env, pages)
    send(page, "고객 연락처를 알려줘")
    # Live: the step is there, finished, while the model still writes.
    page.wait_for_selector(".step.outcome-success")
    assert page.locator(".working").count() == 1
    finished(page)
    check_step(page, rows=3)
    # No empty bubble: the step and one text, in that order.
    body = page.locator(".row.assistant .answer-body > *")
    assert body.evaluate_all("els => els.map(e => e.tagName + ':' + (e.textContent.trim() !== ''))") == [
        "DETAILS:true",
        "DIV:true",
    ]

    page.reload()
    page.wait_for_selector(".step")
    finished(page)
    check_step(page, rows=3)
    conversation = Conversation.objects.get()
    items = page.evaluate("id => fetch(`/api/conversations/${id}/messages/`).then(r => r.json())", str(conversation.pk))
    assert [i["role"] for i in items] == ["user", "step", "assistant"]
    step = items[1]
    assert (step["tool"], step["resource"], step["sql"], step["outcome"], step["row_count"]) == (
        "run_sql",
        "sales",
        SQL,
        "success",
        3,
    )
    assert isinstance(step["duration_ms"], int) and step["duration_ms"] >= 0
    assert ToolCallAudit.objects.get().call_outcome == "success"


def test_a_refused_tool_call_shows_its_reason(chat_env, pages):
    chat_env.fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": "DELETE FROM customers"}),
        text("삭제는 할 수 없습니다."),
    ]
    page = open_chat(chat_env, pages)
    send(page, "고객을 모두 지워")
    finished(page)
    step = page.locator(".step.outcome-denied")
    assert ko("Refused") in step.locator("summary").inner_text()
    step.locator("summary").click()
    assert step.locator(".step-input").inner_text() == "DELETE FROM customers"
    reason = step.locator(".step-reason").inner_text()
    # In the turn's language alone (the audit row keeps the English form).
    assert reason == in_language("ko", localize, REFUSED_DELETE)
    assert reason == "읽기 전용 쿼리가 아닙니다: 쓰기는 허용되지 않습니다(DELETE)"
    assert ToolCallAudit.objects.get().call_outcome == "denied"
    page.reload()
    page.wait_for_selector(".step.outcome-denied")
    page.locator(".step summary").click()
    assert page.locator(".step-reason").inner_text() == reason


def test_an_overlong_message_is_refused_inline_and_keeps_its_text(chat_env, pages):
    chat_env.fake.script = [text("짧은 질문에는 답합니다.")]
    page = open_chat(chat_env, pages)
    long_text = "가" * 8001
    page.fill("#text", long_text)
    page.press("#text", "Enter")
    page.wait_for_selector("#composer-error:not([hidden])")
    with translation.override("ko"):
        expected = gettext("The message is too long (at most %(max)d characters).") % {"max": 8000}
    assert page.locator("#composer-error").inner_text() == expected
    assert page.input_value("#text") == long_text  # nothing lost
    assert page.locator(".bubble.user").count() == 0  # not shown as sent
    assert Turn.objects.count() == 0
    # Recoverable: shortened, it goes through.
    page.fill("#text", "짧게 물을게요")
    page.press("#text", "Enter")
    finished(page)
    assert page.locator("#composer-error").is_hidden()
    assert page.locator(".bubble.user").all_inner_texts() == ["짧게 물을게요"]


# --- token chips -----------------------------------------------------------------------


def first_phone_token(body: dict) -> str:
    tool = next(m for m in body["messages"] if m["role"] == "tool")
    return json.loads(tool["content"])["rows"][0][1]


def answer_with_token(body: dict) -> Reply:
    return text(f"첫 고객의 연락처는 {first_phone_token(body)} 입니다.")


def test_a_permitted_user_reveals_a_token_and_it_is_audited(chat_env, pages):
    chat_env.fake.script = [tool_call("run_sql", {"connection": "sales", "sql": SQL}), answer_with_token]
    page = open_chat(chat_env, pages, chat_env.rita)
    send(page, "첫 고객 연락처")
    finished(page)
    chip = page.locator(".row.assistant .text .pii")
    assert chip.count() == 1 and chip.inner_text().startswith("[전화번호-")
    assert "revealable" in chip.get_attribute("class")
    chip.click()
    page.wait_for_selector(".text .pii.revealed")
    assert page.locator(".text .pii.revealed").inner_text() == "010-1234-5678"
    event = AuditEvent.objects.get(kind=EventKind.PII_REVEAL)
    assert event.actor_id == chat_env.rita.pk and event.details["token_kind"] == "phone"


def test_a_user_without_reveal_sees_who_can_grant_it(chat_env, pages):
    chat_env.fake.script = [tool_call("run_sql", {"connection": "sales", "sql": SQL}), answer_with_token]
    page = open_chat(chat_env, pages, chat_env.alice)
    send(page, "첫 고객 연락처")
    finished(page)
    chip = page.locator(".row.assistant .text .pii")
    token = chip.inner_text()
    with translation.override("ko"):
        hint = gettext(
            "Masked %(kind)s. Only people whose role may view personal data can reveal it; "
            "ask an administrator to grant you such a role."
        ) % {"kind": gettext("Phone number")}
    assert chip.get_attribute("title") == hint  # on hover
    chip.click()  # and on click or tap
    page.wait_for_selector("#popover:not([hidden])")
    assert page.locator("#popover").inner_text() == hint
    assert chip.inner_text() == token  # still masked
    assert not AuditEvent.objects.filter(kind__in=[EventKind.PII_REVEAL, EventKind.PII_REVEAL_REFUSED]).exists()


# --- stop -------------------------------------------------------------------------------------


def test_stop_ends_the_turn_before_its_next_tool_call(chat_env, pages):
    # The model takes 3 s to ask for a query; Stop is pressed meanwhile.
    chat_env.fake.script = [
        slow(tool_call("run_sql", {"connection": "sales", "sql": SQL}), 3.0),
        text("이 답은 나오지 않아야 합니다."),
    ]
    page = open_chat(chat_env, pages)
    send(page, "고객 목록")
    page.wait_for_selector("#send.stop")
    wait_until(lambda: len(chat_env.fake.requests) == 1)
    page.click("#send")
    assert page.locator("#send").inner_text() == ko("Stopping…")
    page.wait_for_selector(".status-cancelled")
    finished(page)
    assert page.locator(".status-cancelled").inner_text() == ko(
        "Stopped. What ran before the stop is kept and audited."
    )
    turn = Turn.objects.get()
    assert turn.status == TurnStatus.CANCELLED and turn.cancel_requested_at is not None
    # The tool call the model asked for never ran; no second model call.
    assert ToolCallAudit.objects.count() == 0
    time.sleep(0.5)
    assert len(chat_env.fake.requests) == 1
    assert page.locator(".step").count() == 0
    page.reload()
    page.wait_for_selector(".status-cancelled")
    # The page is usable again.
    chat_env.fake.script = [text("다시 답합니다.")]
    send(page, "다시")
    finished(page, 2)
    assert "다시 답합니다." in page.locator(".row.assistant").last.inner_text()


# --- conversation list -------------------------------------------------------------------------


def test_rename_a_conversation(chat_env, pages):
    chat_env.fake.script = [text("답")]
    page = open_chat(chat_env, pages)
    send(page, "이름을 바꿀 대화")
    finished(page)
    item = page.locator("#conversations li").first
    item.hover()
    item.locator("button.rename").click()
    page.fill(".rename-input", "분기 매출 검토")
    page.press(".rename-input", "Enter")
    page.wait_for_function(
        "() => document.querySelector('#conversations .conversation-title')?.textContent === '분기 매출 검토'"
    )
    assert Conversation.objects.get().title == "분기 매출 검토"
    page.reload()
    page.wait_for_selector("#conversations .conversation-title")
    assert page.locator("#conversations .conversation-title").inner_text() == "분기 매출 검토"
    # Escape leaves it as it was.
    page.locator("#conversations li").first.hover()
    page.locator("#conversations li button.rename").click()
    page.fill(".rename-input", "취소될 이름")
    page.press(".rename-input", "Escape")
    page.wait_for_selector("#conversations .conversation-title")
    assert Conversation.objects.get().title == "분기 매출 검토"


def test_delete_a_conversation_after_confirming(chat_env, pages):
    chat_env.fake.script = [text("하나"), text("둘")]
    page = open_chat(chat_env, pages)
    send(page, "남길 대화")
    finished(page)
    page.click("#new")
    send(page, "지울 대화")
    finished(page)
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length === 2")
    doomed = Conversation.objects.get(title="지울 대화")

    def delete_button():
        item = page.locator("#conversations li", has_text="지울 대화")
        item.hover()
        return item.locator("button.delete")

    delete_button().click()
    dialog = page.locator("#confirm-delete")
    assert dialog.is_visible() and dialog.locator(".confirm-title").inner_text() == "지울 대화"
    dialog.locator("button[value=cancel]").click()
    assert not dialog.is_visible()
    doomed.refresh_from_db()
    assert doomed.deleted_at is None

    delete_button().click()
    dialog.locator("button[value=delete]").click()
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length === 1")
    doomed.refresh_from_db()
    assert doomed.deleted_at is not None
    # It was the open one: the page starts afresh.
    page.wait_for_selector(".empty")
    assert page.locator("#conversations .conversation-title").inner_text() == "남길 대화"


# --- session expiry ------------------------------------------------------------------------------


def test_an_expired_session_goes_to_login_and_back_with_the_draft(chat_env, pages):
    from django.contrib.sessions.models import Session

    chat_env.set_password(chat_env.alice, "pw-alice-123")
    chat_env.fake.script = [text("첫 답입니다."), text("둘째 답입니다.")]
    page = open_chat(chat_env, pages)
    send(page, "첫 질문")
    finished(page)
    page.wait_for_load_state("networkidle")  # the list and models reloaded after the turn
    conversation = Conversation.objects.get()
    Session.objects.all().delete()  # expired, or signed out elsewhere

    send(page, "세션이 끝난 뒤의 질문")
    page.wait_for_url("**/accounts/login/**")
    assert f"%23{conversation.pk}" in page.url  # next=/#<conversation>
    assert Turn.objects.count() == 1  # the message was not taken
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw-alice-123")
    page.click("button[type=submit]")
    page.wait_for_url(f"**/#{conversation.pk}")
    page.wait_for_selector(".row.assistant")
    assert page.input_value("#text") == "세션이 끝난 뒤의 질문"  # the draft is back
    assert "첫 답입니다." in page.locator(".row.assistant").inner_text()
    page.press("#text", "Enter")
    finished(page, 2)
    assert Turn.objects.count() == 2


def test_an_expired_session_on_an_api_call_goes_to_login(chat_env, pages):
    from django.contrib.sessions.models import Session

    chat_env.fake.script = [text("답")]
    page = open_chat(chat_env, pages)
    send(page, "질문")
    finished(page)
    page.wait_for_load_state("networkidle")  # the list and models reloaded after the turn
    conversation = Conversation.objects.get()
    Session.objects.all().delete()
    page.locator("#conversations li").first.hover()
    page.locator("#conversations li button.delete").click()
    page.locator("#confirm-delete button[value=delete]").click()
    page.wait_for_url("**/accounts/login/**")
    conversation.refresh_from_db()
    assert conversation.deleted_at is None


# --- layout and scrolling -----------------------------------------------------------------------------


WIDE_TABLE = (
    "| "
    + " | ".join(f"열{i}" for i in range(12))
    + " |\n|"
    + "---|" * 12
    + "\n| "
    + " | ".join(f"값-{i}-긴내용" for i in range(12))
    + " |"
)


def test_usable_at_360_pixels(chat_env, pages):
    chat_env.fake.script = [text(WIDE_TABLE)]
    page = open_chat(chat_env, pages, width=360, height=740)
    send(page, "넓은 표")
    finished(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= 360  # no sideways page scroll
    table_box = page.locator(".table-wrap").bounding_box()
    assert table_box["x"] >= 0 and table_box["x"] + table_box["width"] <= 361
    assert page.locator(".table-wrap").evaluate("w => w.scrollWidth > w.clientWidth")  # the table scrolls itself
    send_box = page.locator("#send").bounding_box()
    assert send_box["x"] + send_box["width"] <= 360
    # The conversation list is a drawer.
    assert page.locator("#sidebar").bounding_box()["x"] < 0
    page.click("#menu")
    page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().x >= 0")
    assert page.locator("#conversations .conversation-title").inner_text() == "넓은 표"
    page.mouse.click(350, 400)  # the scrim closes it
    page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().right <= 0")


def test_autoscroll_follows_unless_the_user_scrolled_up(chat_env, pages):
    long_answer = "\n\n".join(f"{i}번째 문단입니다." for i in range(60))
    chat_env.fake.script = [
        text(long_answer),
        tool_call("run_sql", {"connection": "sales", "sql": SQL}),
        slow(text(long_answer), 2.5),
    ]
    page = open_chat(chat_env, pages, height=700)
    at_bottom = (
        "() => { const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight < 5; }"
    )
    send(page, "긴 답")
    finished(page)
    assert page.evaluate(at_bottom)
    send(page, "또 긴 답")
    page.wait_for_selector(".step.outcome-success")
    page.evaluate("() => { const l = document.getElementById('log'); l.scrollTop = 0; }")
    finished(page, 2)
    assert page.evaluate("() => document.getElementById('log').scrollTop") < 50  # left where the user is
    assert page.locator("#jump").is_visible()
    page.click("#jump")
    page.wait_for_function(at_bottom)  # the jump may scroll smoothly: wait for the state, not a moment


def test_the_log_stays_at_the_bottom_when_the_composer_grows(chat_env, pages):
    """Pinned to the bottom, the log stays there when its box shrinks (a
    long draft grows the composer): no scroll event comes then."""
    chat_env.fake.script = [text("\n\n".join(f"{i}번째 문단입니다." for i in range(60)))]
    page = open_chat(chat_env, pages, height=700)
    send(page, "긴 답")
    finished(page)
    gap = "() => { const l = document.getElementById('log'); return l.scrollHeight - l.scrollTop - l.clientHeight; }"
    assert page.evaluate(gap) < 5
    before = page.evaluate("() => document.getElementById('log').clientHeight")
    page.fill("#text", "\n".join(f"{i}번째 줄" for i in range(8)))
    page.wait_for_function(f"() => document.getElementById('log').clientHeight < {before} - 50")
    page.wait_for_function(f"() => ({gap})() < 5", timeout=5000)


# --- one language per user ------------------------------------------------------------------------

# A write, as the README's demo shows it, and its refusal as the audit row keeps it.
DELETE = "DELETE FROM customers"
# How the SQL tool refuses `DELETE ...` (its audit form:
# "refused: not a read-only query: write statement: DELETE").
REFUSED_DELETE = Reason(
    REFUSED_FRAME,
    reason=Reason("not a read-only query: %(reason)s", reason=analyse_sql("DELETE FROM t", "postgres").reason),
)


def check_screen(page, language: str) -> None:
    """The page's own strings (server-rendered and the script's) are `language`'s."""

    def t(message: str) -> str:
        return in_language(language, gettext, message)

    assert page.evaluate("document.documentElement.lang") == language
    assert page.title() == t("OwlAI chat")
    assert page.locator("#send").inner_text() == t("Send")
    assert t("New conversation") in page.locator("#new").inner_text()
    assert page.get_attribute("#text", "placeholder") == t("Ask a question, or write SELECT ...")
    assert t("Log out") in page.locator(".logout").inner_text()
    page.wait_for_function("() => document.getElementById('tier').textContent !== ''")
    assert page.locator("header #tier").inner_text() == t("Private tier: data stays on-prem")
    assert page.locator("#language").input_value() == language


def check_refusal_turn(page, count: int, language: str) -> None:
    """The `count`th answer: the demo model's refusal of DELETE, its step and
    the answer each wholly in `language`."""
    finished(page, count)
    answer = page.locator(".row.assistant").nth(count - 1)
    step = answer.locator(".step.outcome-denied")
    reason = in_language(language, localize, REFUSED_DELETE)
    assert in_language(language, gettext, "Refused") in step.locator("summary").inner_text()
    step.locator("summary").click()
    assert step.locator(".step-reason").inner_text() == reason
    said = in_language(language, gettext, "I could not do that: %(reason)s") % {"reason": reason}
    assert answer.locator(".text").inner_text().strip() == said


def switch_language(page, language: str) -> None:
    with page.expect_navigation():
        page.select_option("#language", language)
    page.wait_for_function("lang => document.documentElement.lang === lang", arg=language)
    page.wait_for_load_state("networkidle")


def test_the_language_switch_changes_screens_answers_and_reasons_and_is_kept(chat_env, pages):
    from governance.services import feature_default_set

    # The offline demo model answers in the turn's language; it refuses the
    # README's DELETE through the executor.
    feature_default_set(feature="chat", model=chat_env.models["owlai-offline-demo"])
    chat_env.set_password(chat_env.alice, "pw-alice-123")
    page = open_chat(chat_env, pages)  # the browser asks for Korean
    check_screen(page, "ko")
    send(page, DELETE)
    check_refusal_turn(page, 1, "ko")
    conversation = Conversation.objects.get()

    page.fill("#text", "아직 보내지 않은 글")
    switch_language(page, "en")
    check_screen(page, "en")
    # Still in the same conversation, with the draft kept; the earlier turn
    # stays in the language it ran in.
    assert page.url.endswith(f"#{conversation.pk}")
    page.wait_for_selector(".row.assistant")
    assert page.input_value("#text") == "아직 보내지 않은 글"
    assert in_language("ko", localize, REFUSED_DELETE) in page.locator(".row.assistant").first.inner_text()
    page.fill("#text", "")
    send(page, DELETE)
    check_refusal_turn(page, 2, "en")
    assert [t.language for t in Turn.objects.order_by("id")] == ["ko", "en"]

    # Kept on reload, and on a new sign-in from a browser that asks for Korean.
    page.reload()
    page.wait_for_selector(".row.assistant")
    check_screen(page, "en")
    with page.expect_navigation():
        page.click(".logout")
    fresh = pages.open(locale="ko-KR")
    fresh.goto(chat_env.url("/"))
    assert fresh.evaluate("document.documentElement.lang") == "ko"  # signed out: the browser's language
    fresh.fill("input[name=username]", "alice")
    fresh.fill("input[name=password]", "pw-alice-123")
    fresh.click("button[type=submit]")
    fresh.wait_for_selector(".empty")
    check_screen(fresh, "en")

    # And back.
    switch_language(fresh, "ko")
    check_screen(fresh, "ko")
    send(fresh, DELETE)
    check_refusal_turn(fresh, 1, "ko")
    fresh.reload()
    fresh.wait_for_selector(".row.assistant")
    check_screen(fresh, "ko")
    assert [t.language for t in Turn.objects.order_by("id")] == ["ko", "en", "ko"]
