"""Approvals on the chat page in a real browser (Playwright + Debian's
Chromium) on the production stack (daphne, a threads-pool Celery worker,
beat for the expiry job, PostgreSQL, Redis), the scripted model server and
the real people MCP server, run by the worker as a stdio subprocess for the
`desk` connector whose `echo` tool requires approval.

The request shows inline at its step (tool, connector, the arguments with
tokens as chips, a countdown, three buttons); an answer goes over the
socket and the outcome replaces the buttons; a reload while waiting shows
it again from the `state` frame; nobody answering shows it expired."""

from __future__ import annotations

import json
import re

import pytest
from django.utils import translation
from django.utils.translation import gettext

from audit.models import AuditEvent
from chat.models import ToolApproval, Turn, TurnStatus
from tests.support.browser import browser_stack_running
from tests.support.connector_world import ALL_MODELS, add_connector, set_policy
from tests.support.fake_llm import text, tool_call
from tests.support.mcp_servers import stdio_command_toml

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

MAIL = "desk__echo"
# Long enough for every answer a test gives, short enough to watch one expire.
APPROVAL_SECONDS = 20
CONNECTOR_CONFIG = stdio_command_toml("people", "people") + 'env = ["OWLAI_TEST_MCP_RECORD"]\n'


def ko(message: str) -> str:
    with translation.override("ko"):
        return gettext(message)


@pytest.fixture(scope="module")
def record_path(tmp_path_factory):
    return tmp_path_factory.mktemp("desk-record") / "desk.jsonl"


@pytest.fixture(scope="module")
def browser_stack(tmp_path_factory, django_db_setup, pg_customer_db, record_path):
    """The page's stack with the people server as a connector command, short
    approvals and beat (the expiry job every second)."""
    with browser_stack_running(
        tmp_path_factory.mktemp("browser-approvals"),
        pg_customer_db,
        extra_config=CONNECTOR_CONFIG,
        beat=True,
        OWLAI_APPROVAL_SECONDS=str(APPROVAL_SECONDS),
        OWLAI_APPROVAL_SWEEP_SECONDS="1",
        OWLAI_TEST_MCP_RECORD=str(record_path),
    ) as stack:
        yield stack


@pytest.fixture
def desk(chat_env, settings, record_path, monkeypatch, tmp_path):
    """`desk` (open to every model) for alice's role; its `echo` requires approval."""
    from governance.models import Role
    from owlai.install_config import parse_install_config

    # The tool-list sync here starts the server too (the worker's has its own record).
    monkeypatch.setenv("OWLAI_TEST_MCP_RECORD", str(tmp_path / "sync.jsonl"))
    settings.OWLAI_INSTALL = parse_install_config(chat_env.stack.config_text)
    record_path.unlink(missing_ok=True)
    team = Role.objects.get(name="sales-team")
    connector = add_connector("desk", command="people", roles=[team], exposure=ALL_MODELS, summary="상담 데스크")
    set_policy(connector, "echo", "require_approval")
    return connector


def received(record_path) -> list[str]:
    if not record_path.exists():
        return []
    return [json.loads(line)["text"] for line in record_path.read_text(encoding="utf-8").splitlines()]


def open_chat(chat_env, pages, **kwargs):
    page = pages.open(chat_env.alice, **kwargs)
    page.goto(chat_env.url("/"))
    page.wait_for_selector(".empty")
    return page


def send(page, message: str) -> None:
    page.fill("#text", message)
    page.press("#text", "Enter")


def finished(page, count: int = 1) -> None:
    page.wait_for_function(
        "n => document.querySelectorAll('.row.assistant').length >= n"
        " && !document.querySelector('.working') && !document.querySelector('#send.stop')",
        arg=count,
    )


def pending_panel(page):
    page.wait_for_selector(".approval.pending")
    return page.locator(".approval.pending")


def seconds_left(panel) -> int:
    shown = panel.locator(".approval-countdown").inner_text()
    match = re.search(r"(\d+):(\d\d)", shown)
    assert match, shown
    return int(match.group(1)) * 60 + int(match.group(2))


def answer(panel, label: str) -> None:
    panel.get_by_role("button", name=label, exact=True).click()


def approval_kinds() -> list[str]:
    return list(AuditEvent.objects.filter(kind__startswith="approval_").order_by("id").values_list("kind", flat=True))


def test_approve_from_the_keyboard_and_the_turn_goes_on(chat_env, pages, desk, record_path):
    hostile = "<img src=x onerror=document.title=1>"
    # The model writes a token it was given and a destination of its own.
    arguments = {"text": f"보고서 [전화번호-1] {hostile}", "to": "drop@exfil.example"}
    chat_env.fake.script = [tool_call(MAIL, arguments), text("보고서를 보냈습니다.")]
    page = open_chat(chat_env, pages)
    send(page, "보고서를 보내 줘")
    panel = pending_panel(page)

    # At the step of the call, with tool, connector and the arguments as text
    # as the model wrote them: the token a chip, the destination as written,
    # the markup shown, never parsed.
    step = page.locator(".row.assistant .step")
    assert step.count() == 1 and MAIL in step.locator("summary").inner_text()
    assert step.evaluate("d => d.nextElementSibling.classList.contains('approval')")
    assert panel.locator(".approval-title").inner_text() == ko("Approve this call?")
    assert (
        ko("%(tool)s of %(connector)s wants to run with these arguments:")
        % {
            "tool": MAIL,
            "connector": "desk",
        }
        == panel.locator(".approval-what").inner_text()
    )
    args = panel.locator(".approval-args")
    chip = args.locator(".pii")
    assert chip.count() == 1 and chip.inner_text().startswith("[전화번호-")
    assert "drop@exfil.example" in args.inner_text()
    assert hostile in args.inner_text() and args.locator("img").count() == 0
    assert page.title() != "1"
    assert panel.locator(".approval-manage").get_attribute("href") == "/always-allowed/"
    assert page.locator(".working").count() == 0  # waiting for the user, not the model
    assert page.locator("#send.stop").count() == 1  # Stop still ends the turn

    # A live countdown from the expiry.
    first = seconds_left(panel)
    assert 0 < first <= APPROVAL_SECONDS
    assert ko("Expires in %(time)s").split("%(time)s")[0] in panel.locator(".approval-countdown").inner_text()
    page.wait_for_function(
        "s => { const m = document.querySelector('.approval-countdown').textContent.match(/(\\d+):(\\d\\d)/);"
        " return m && (+m[1] * 60 + +m[2]) < s; }",
        arg=first,
    )
    labels = panel.locator(".approval-answer").all_inner_texts()
    assert labels == [ko("Approve"), ko("Always allow"), ko("Deny")]

    # Keyboard: Tab reaches the buttons; Enter answers.
    panel.get_by_role("button", name=ko("Approve"), exact=True).focus()
    page.keyboard.press("Enter")
    page.wait_for_selector(".approval.decided.decision-approved")
    finished(page)
    decided = page.locator(".approval.decided")
    assert decided.locator(".approval-outcome").inner_text() == ko("Approved")
    assert decided.locator(".approval-answer").count() == 0
    assert page.locator(".step.outcome-success").count() == 1
    assert "보고서를 보냈습니다." in page.locator(".row.assistant .markdown").last.inner_text()
    assert len(received(record_path)) == 1  # it ran once, after the approval
    assert approval_kinds() == ["approval_approved"]

    # The same after a reload (the state frame replays the turn's events).
    page.reload()
    page.wait_for_selector(".approval.decided.decision-approved")
    assert page.locator(".approval-answer").count() == 0


def test_deny_refuses_the_call_and_the_turn_goes_on(chat_env, pages, desk, record_path):
    chat_env.fake.script = [tool_call(MAIL, {"text": "보내지 마"}), text("보내지 않았습니다.")]
    page = open_chat(chat_env, pages)
    send(page, "메일 보내 줘")
    answer(pending_panel(page), ko("Deny"))
    page.wait_for_selector(".approval.decided.decision-denied")
    finished(page)
    assert page.locator(".approval-outcome").inner_text() == ko("Denied")
    step = page.locator(".step.outcome-denied")
    assert step.count() == 1 and ko("Refused") in step.locator("summary").inner_text()
    step.locator("summary").click()
    assert ko("the user denied this call") in step.locator(".step-reason").inner_text()
    assert "보내지 않았습니다." in page.locator(".row.assistant .markdown").last.inner_text()
    assert received(record_path) == []
    # The model was told the call was refused.
    told = [m["content"] for m in chat_env.fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert told and ko("the user denied this call") in told[-1]


def test_always_allow_then_the_next_call_runs_without_asking(chat_env, pages, desk, record_path):
    chat_env.fake.script = [
        tool_call(MAIL, {"text": "첫째"}),
        text("보냈습니다."),
        tool_call(MAIL, {"text": "둘째"}),
        text("또 보냈습니다."),
    ]
    page = open_chat(chat_env, pages, width=360, height=740)
    send(page, "첫째 보내 줘")
    panel = pending_panel(page)
    # Usable at 360 px: the panel and its buttons inside the viewport.
    for box in [panel.bounding_box()] + [b.bounding_box() for b in panel.locator(".approval-answer").all()]:
        assert box["x"] >= 0 and box["x"] + box["width"] <= 361, box
    answer(panel, ko("Always allow"))
    page.wait_for_selector(".approval.decided.decision-always_allowed")
    finished(page)
    assert page.locator(".approval-outcome").inner_text() == ko("Always allowed")

    send(page, "둘째도 보내 줘")
    page.wait_for_selector(".approval.decided.decision-auto_approved")
    finished(page, 2)
    second = page.locator(".row.assistant").last
    assert second.locator(".approval-answer").count() == 0 and second.locator(".approval.pending").count() == 0
    assert second.locator(".approval-outcome").inner_text() == ko("Approved automatically (always allowed)")
    assert second.locator(".step.outcome-success").count() == 1
    assert received(record_path) == ["첫째", "둘째"]
    assert approval_kinds() == ["approval_always_allowed", "approval_auto_approved"]
    assert ToolApproval.objects.count() == 1  # nobody was asked the second time

    # After a reload the earlier turn (from the timeline) keeps its outcome too.
    page.reload()
    page.wait_for_selector(".approval.decided.decision-auto_approved")
    outcomes = page.locator(".approval-outcome").all_inner_texts()
    assert outcomes == [ko("Always allowed"), ko("Approved automatically (always allowed)")]


def test_a_reload_while_waiting_shows_the_request_again_and_it_can_be_answered(chat_env, pages, desk, record_path):
    chat_env.fake.script = [tool_call(MAIL, {"text": "새로고침 후에"}), text("보냈습니다.")]
    page = open_chat(chat_env, pages)
    send(page, "보내 줘")
    before = seconds_left(pending_panel(page))
    page.wait_for_timeout(1500)
    page.reload()
    panel = pending_panel(page)  # from the state frame
    assert Turn.objects.get().status == TurnStatus.WAITING_APPROVAL
    assert panel.locator(".approval-args").inner_text().find("새로고침 후에") >= 0
    # Counted afresh from the expiry, not restarted from the first frame.
    assert seconds_left(panel) < before
    assert page.locator("#send.stop").count() == 1
    answer(panel, ko("Approve"))
    page.wait_for_selector(".approval.decided.decision-approved")
    finished(page)
    assert received(record_path) == ["새로고침 후에"]


def test_an_unanswered_request_expires(chat_env, pages, desk, record_path):
    chat_env.fake.script = [tool_call(MAIL, {"text": "아무도 안 봄"}), text("답이 없어 보내지 않았습니다.")]
    page = open_chat(chat_env, pages)
    send(page, "보내 줘")
    panel = pending_panel(page)
    # The countdown runs down to the expiry, then the expiry job's outcome
    # replaces the buttons (it may come before the page's own count ends).
    assert seconds_left(panel) > 5
    page.wait_for_function(
        "() => { const p = document.querySelector('.approval'); if (!p) return false;"
        " if (!p.classList.contains('pending')) return true;"
        " const m = p.querySelector('.approval-countdown').textContent.match(/(\\d+):(\\d\\d)/);"
        " return !m || (+m[1] * 60 + +m[2]) <= 2; }",
        timeout=(APPROVAL_SECONDS + 5) * 1000,
    )
    page.wait_for_selector(".approval.decided.decision-expired", timeout=20_000)
    finished(page)
    assert page.locator(".approval-outcome").inner_text() == ko("Expired: nobody answered in time")
    assert page.locator(".step.outcome-denied").count() == 1
    assert received(record_path) == []
    assert approval_kinds() == ["approval_expired"]


def test_an_answer_the_server_refuses_shows_inline(chat_env, pages, desk, record_path):
    chat_env.fake.script = [tool_call(MAIL, {"text": "다른 곳에서 답함"}), text("보내지 않았습니다.")]
    page = open_chat(chat_env, pages)
    send(page, "보내 줘")
    panel = pending_panel(page)
    # Answered elsewhere meanwhile (another tab, the API): this page's answer is refused.
    approval = ToolApproval.objects.get()
    ToolApproval.objects.filter(pk=approval.pk).update(status="denied")
    answer(panel, ko("Approve"))
    error = page.locator(".approval-error")
    error.wait_for()
    assert error.inner_text() == ko("This approval request was already answered.")
    assert error.get_attribute("role") == "alert"
    assert received(record_path) == []
