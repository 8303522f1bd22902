"""Shared conversations and answer feedback in a real browser (Playwright +
Debian's Chromium) on the production stack: the owner shares from the chat
page, a second member opens the link, is refused a reveal without permission
and allowed with it (one event naming both), the owner revokes and the link
is gone; a viewer continues in a new conversation; an answer gets a thumbs
down with a comment and the conversation, which an admin then reads (view
events for the list and the detail)."""

from __future__ import annotations

import json
import re

import pytest

from audit.models import AuditEvent, EventKind, ResourceKind
from chat.models import Conversation
from feedback.models import AnswerFeedback
from governance.models import Role
from sharing.models import ShareLink
from tests.support.fake_llm import Reply, text, tool_call

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

SQL = "SELECT name, phone FROM customers ORDER BY id"
PHONE = "010-1234-5678"


def answer_with_token(body: dict) -> Reply:
    tool = next(m for m in body["messages"] if m["role"] == "tool")
    return text(f"첫 고객의 연락처는 {json.loads(tool['content'])['rows'][0][1]} 입니다.")


def finished(page, count: int = 1) -> None:
    # Generous: the first turn of a module may wait for the worker on a busy machine.
    page.wait_for_function(
        "n => document.querySelectorAll('.row.assistant').length >= n"
        " && !document.querySelector('.working') && !document.querySelector('#send.stop')",
        arg=count,
        timeout=60_000,
    )


def answered_conversation(chat_env, pages, user):
    chat_env.fake.script = [tool_call("run_sql", {"connection": "sales", "sql": SQL}), answer_with_token]
    page = pages.open(user)
    page.goto(chat_env.url("/"))
    page.wait_for_selector(".empty")
    page.fill("#text", "첫 고객 연락처")
    page.press("#text", "Enter")
    finished(page)
    return page


def share_from_chat_page(page) -> str:
    page.wait_for_selector("#share:not([hidden])")
    page.click("#share")
    page.wait_for_selector("#share-dialog[open] #share-up-to option", state="attached")
    page.click("#share-create")
    page.wait_for_selector("#share-url")
    return page.input_value("#share-url")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="pw-bob-123")


def test_share_open_reveal_by_own_permission_then_revoke(chat_env, pages, bob):
    owner = answered_conversation(chat_env, pages, chat_env.alice)
    url = share_from_chat_page(owner)
    assert re.search(r"/shared/[\w-]+/$", url)
    link = ShareLink.objects.get()
    assert link.owner == chat_env.alice

    viewer = pages.open(bob)
    viewer.goto(url)
    chip = viewer.locator(".row.assistant .text .pii")
    chip.wait_for()
    token = chip.inner_text()
    assert token.startswith("[전화번호-") and PHONE not in viewer.locator("#log").inner_text()
    # Without permission: told why, nothing revealed; the server refuses too, on the record.
    assert not viewer.locator("#shared-notice").is_hidden()
    chip.click()
    viewer.wait_for_selector("#popover:not([hidden])")
    assert "역할" in viewer.locator("#popover").inner_text() and chip.inner_text() == token
    status = viewer.evaluate(
        """async (token) => {
            const csrf = document.querySelector("[name=csrfmiddlewaretoken]").value;
            const r = await fetch(location.pathname.replace("/shared/", "/api/shared/") + "reveal/", {
                method: "POST", credentials: "same-origin",
                headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
                body: JSON.stringify({token}),
            });
            return r.status;
        }""",
        token,
    )
    assert status == 403
    refused = AuditEvent.objects.get(kind=EventKind.PII_REVEAL_REFUSED)
    assert (refused.actor_username, refused.owner_username) == ("bob", "alice")

    # With permission (the viewer's own role, granted now): revealed, one event naming both.
    Role.objects.get(name="revealers").users.add(bob)
    viewer.reload()
    chip = viewer.locator(".row.assistant .text .pii")
    chip.wait_for()
    assert "revealable" in chip.get_attribute("class")
    chip.click()
    viewer.wait_for_selector(".text .pii.revealed")
    assert viewer.locator(".text .pii.revealed").inner_text() == PHONE
    (event,) = AuditEvent.objects.filter(kind=EventKind.PII_REVEAL)
    assert (event.actor_id, event.owner_id) == (bob.pk, chat_env.alice.pk)
    assert event.details["share_link"] == str(link.pk)

    # The owner revokes on "my shared links"; the link is gone for the viewer.
    owner.goto(chat_env.url("/shared-links/"))
    owner.click(f"tr[data-link='{link.pk}'] button[type=submit]")
    owner.wait_for_selector(f"tr[data-link='{link.pk}'].link-revoked")
    gone = viewer.goto(url)
    assert gone.status == 404 and viewer.locator("#shared-gone").is_visible()
    assert viewer.locator(".row.assistant").count() == 0
    assert ShareLink.objects.get().revoked_at is not None


def test_a_viewer_continues_in_a_new_conversation_without_originals_reaching_the_model(chat_env, pages, bob):
    owner = answered_conversation(chat_env, pages, chat_env.alice)
    url = share_from_chat_page(owner)
    viewer = pages.open(bob)
    viewer.goto(url)
    viewer.wait_for_selector(".row.assistant .text .pii")
    viewer.click("#shared-fork")
    viewer.wait_for_url(re.compile(r"/#[0-9a-f-]{36}$"))
    fork = Conversation.objects.get(owner=bob)
    viewer.wait_for_selector(".row.assistant .text .pii")  # the copy, on the viewer's chat page
    sent_before = len(chat_env.fake.requests)
    chat_env.fake.script = [text("이어서 답합니다.")]
    viewer.fill("#text", "그 고객의 다른 정보는?")
    viewer.press("#text", "Enter")
    finished(viewer, 2)
    requests = json.dumps(chat_env.fake.requests[sent_before:], ensure_ascii=False)
    assert "[전화번호-1]" in requests and PHONE not in requests and "010-2222-3333" not in requests
    fork.refresh_from_db()
    assert fork.tier == Conversation.objects.get(owner=chat_env.alice).tier == "private"


def test_feedback_with_comment_and_conversation_then_the_admin_reads_it(chat_env, pages, django_user_model):
    page = answered_conversation(chat_env, pages, chat_env.alice)
    page.wait_for_selector(".row.assistant .feedback-bar")
    page.click(".row.assistant .feedback-thumb[data-rating=down]")
    page.locator(".feedback-form .feedback-tags input[value=wrong_data]").check()
    page.fill(".feedback-form .feedback-comment", "두 번째 고객이 빠졌어요")
    page.locator(".feedback-form .feedback-attach input").check()
    page.click(".feedback-form button[type=submit]")
    page.wait_for_selector(".feedback-thanks")
    assert "chosen" in page.locator(".feedback-thumb[data-rating=down]").get_attribute("class")
    feedback = AnswerFeedback.objects.get()
    assert (feedback.rating, feedback.tags, feedback.attach_conversation) == ("down", ["wrong_data"], True)
    # After a reload the page still shows what was given.
    page.reload()
    page.wait_for_selector(".feedback-thumb.chosen[data-rating=down]")

    admin_user = django_user_model.objects.create_superuser("boss", "boss@example.com", "pw-boss-123")
    admin = pages.open(admin_user)
    admin.goto(chat_env.url("/admin/feedback/answerfeedback/"))
    admin.click("#result_list tbody tr th a")
    admin.wait_for_selector(".feedback-conversation")
    shown = admin.locator(".feedback-conversation").inner_text()
    assert "[전화번호-1]" in shown and PHONE not in shown and SQL in shown
    assert "두 번째 고객이 빠졌어요" in admin.locator("body").inner_text()
    views = list(
        AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW, resource_kind=ResourceKind.ANSWER_FEEDBACK).order_by("id")
    )
    assert [(v.row_count, v.owner_username) for v in views] == [(1, ""), (None, "alice")]
