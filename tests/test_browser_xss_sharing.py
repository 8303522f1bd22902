"""The XSS suite (tests/test_browser_xss.py) on the surfaces above chat: a
shared page and the links page showing hostile model and tool output and a
hostile title, and a hostile feedback comment and attached conversation in
the admin's feedback detail and back in the chat page's feedback form. The
same two checks: the DOM holds nothing active, and nothing ran."""

from __future__ import annotations

import pytest

from chat.models import Conversation, Turn
from feedback.models import AnswerFeedback
from feedback.services import answer_feedback_give
from sharing.services import share_link_create
from tests.support.fake_llm import text, tool_call
from tests.test_browser_xss import AUDIT_DOM, MODEL_PAYLOADS, RUN

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

HOSTILE_SQL = (
    f"SELECT '<img src=x onerror={RUN}>' AS \"<svg onload={RUN}>\", "
    f"'[click](javascript:{RUN})' AS b, '<script>{RUN}</script>' AS c"
)
HOSTILE_COMMENT = f'<script>{RUN}</script><img src=x onerror="{RUN}"> </textarea><svg onload={RUN}>'


def watched(pages, user):
    page = pages.open(user)
    page.requests = []
    page.on("request", lambda r: page.requests.append(r.url))
    return page


def nothing_ran(page, pages) -> None:
    page.wait_for_timeout(300)  # handlers that would fire on load/error/focus
    assert page.evaluate("() => window.__pwned") is None
    assert pages.dialogs == []
    assert not [u for u in page.requests if "evil.example" in u or u.startswith("data:")]


def audit(page, selectors) -> None:
    for selector in selectors:
        assert page.locator(selector).count(), selector
        for index in range(page.locator(selector).count()):
            bad = page.locator(selector).nth(index).evaluate(f"root => ({AUDIT_DOM})(root)")
            assert bad == [], (selector, bad)


def hostile_conversation(chat_env, pages):
    chat_env.fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": HOSTILE_SQL}),
        text("\n\n".join(MODEL_PAYLOADS)),
    ]
    page = watched(pages, chat_env.alice)
    page.goto(chat_env.url("/"))
    page.wait_for_selector(".empty")
    page.fill("#text", f"<img src=x onerror={RUN}> 보여줘")
    page.press("#text", "Enter")
    # The first turn of a module may wait for the worker to come up on a busy machine.
    page.wait_for_selector(".step.outcome-success", timeout=60_000)
    page.wait_for_function(
        "() => !document.querySelector('.working') && !document.querySelector('#send.stop')", timeout=60_000
    )
    conversation = Conversation.objects.get(owner=chat_env.alice)
    return page, conversation, Turn.objects.get(conversation=conversation)


def test_a_shared_page_and_the_links_page_neutralise_hostile_output(chat_env, pages, django_user_model):
    owner, conversation, _turn = hostile_conversation(chat_env, pages)
    link = share_link_create(conversation=conversation, actor=chat_env.alice)
    viewer_user = django_user_model.objects.create_user("bob", password="pw-bob-123")
    viewer = watched(pages, viewer_user)
    viewer.goto(chat_env.url(f"/shared/{link.key}/"))
    viewer.wait_for_selector(".row.assistant .markdown")
    viewer.locator(".step summary").click()
    step = viewer.locator(".step")
    assert f"<svg onload={RUN}>" in step.locator("th").first.inner_text()
    assert viewer.locator(".bubble.user").inner_text() == f"<img src=x onerror={RUN}> 보여줘"
    assert f"<img src=x onerror={RUN}>" in viewer.locator("#shared-title").inner_text()  # the title, as text
    audit(viewer, (".row.assistant .markdown", ".step .step-input", ".step .tool-result", ".bubble.user"))
    assert viewer.locator("#shared-title *").count() == 0
    nothing_ran(viewer, pages)
    owner.goto(chat_env.url("/shared-links/"))
    owner.wait_for_selector(".shared-links")
    assert f"<img src=x onerror={RUN}>" in owner.locator(".shared-links tbody td").first.inner_text()
    assert owner.locator(".shared-links tbody td img, .shared-links tbody td script").count() == 0
    nothing_ran(owner, pages)


def test_a_hostile_feedback_comment_and_attachment_stay_text(chat_env, pages, django_user_model):
    owner, conversation, turn = hostile_conversation(chat_env, pages)
    answer_feedback_give(
        conversation=conversation,
        turn_id=turn.pk,
        rating="down",
        tags=["other"],
        comment=HOSTILE_COMMENT,
        attach_conversation=True,
        actor=chat_env.alice,
    )
    boss = django_user_model.objects.create_superuser("boss", "boss@example.com", "pw-boss-123")
    admin = watched(pages, boss)
    admin.goto(chat_env.url(f"/admin/feedback/answerfeedback/{AnswerFeedback.objects.get().pk}/change/"))
    admin.wait_for_selector(".feedback-conversation")
    assert HOSTILE_COMMENT.strip() in admin.locator("body").inner_text()
    audit(admin, (".feedback-conversation",))
    for field in (".field-comment", ".field-conversation_shown"):
        assert admin.locator(field).count() == 1
        assert admin.locator(f"{field} img, {field} svg, {field} script, {field} textarea").count() == 0
    nothing_ran(admin, pages)
    # Back on the chat page the comment fills the form as a value, never as markup.
    owner.reload()
    owner.wait_for_selector(".feedback-thumb.chosen[data-rating=down]")
    owner.click(".feedback-thumb[data-rating=down]")
    assert owner.input_value(".feedback-form .feedback-comment") == HOSTILE_COMMENT.strip()
    assert owner.locator(".feedback-form img, .feedback-form svg, .feedback-form script").count() == 0
    nothing_ran(owner, pages)
