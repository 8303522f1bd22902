"""Playbooks in a real browser (Playwright + Debian's Chromium) on the
production stack (daphne, a Celery worker, Redis, the scripted model
server): a question answered in chat is saved as a playbook, its
parameters are edited (a bad one is refused with the service's words),
it runs and the run page follows its progress without a reload, woken by
the run's websocket alone (the fallback poll is set to an hour here: every
update after the first read comes from a frame), the run detail shows the
masked output as token chips; a reveal without the
permission shows the refusal and writes no reveal, with it the value shows
and exactly one reveal event names the run's conversation. A run whose
step is refused fails on the page, live, with the step's value-free reason.
The editor's steps are reordered from the keyboard and saved; a step moved
above the output it uses is refused on save."""

from __future__ import annotations

import json

import pytest

from audit.models import AuditEvent, EventKind
from chat.models import Turn
from governance.models import Role
from playbooks.models import Playbook, PlaybookRun
from playbooks.services import playbook_create
from tests.support.browser import browser_stack_running
from tests.support.fake_llm import Reply, text, tool_call

pytestmark = [
    pytest.mark.browser,
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

SQL = "SELECT name, phone FROM customers ORDER BY id"
PHONE = "010-1234-5678"
# The run page's fallback poll, in seconds: longer than any test here, so
# the page shows a change only when the run's websocket woke it.
NO_POLL = 3600


@pytest.fixture(scope="module")
def browser_stack(tmp_path_factory, django_db_setup, pg_customer_db):
    with browser_stack_running(
        tmp_path_factory.mktemp("browser-playbooks"), pg_customer_db, OWLAI_PLAYBOOK_RUN_POLL_SECONDS=str(NO_POLL)
    ) as stack:
        yield stack


class RunWatch:
    """What the page reads and hears: its reads of the run API and the
    frames of the run's websocket."""

    def __init__(self, page) -> None:
        self.reads: list[str] = []
        self.frames: list[dict] = []
        page.on("request", self._request)
        page.on("websocket", self._socket)

    def _request(self, request) -> None:
        if "/api/playbook-runs/" in request.url and request.method == "GET":
            self.reads.append(request.url)

    def _socket(self, socket) -> None:
        if "/ws/playbook-runs/" in socket.url:
            socket.on("framereceived", lambda payload: self.frames.append(json.loads(payload)))

    def types(self) -> list[str]:
        return [f["type"] for f in self.frames]


def woken_reads_only(watch: RunWatch) -> None:
    """One read of the run on load, then at most one per frame that says
    the run may have changed (a read under way takes the next frame's
    along): no poll in between. No frame carries a value."""
    wakers = [t for t in watch.types() if t in ("run.changed", "turn.finished", "approval.requested")]
    assert 2 <= len(watch.reads) <= 1 + len(wakers), (watch.reads, watch.types())
    assert PHONE not in json.dumps(watch.frames, ensure_ascii=False)


def answer_with_token(body: dict) -> Reply:
    tool = [m for m in body["messages"] if m["role"] == "tool"][-1]
    return text(f"첫 고객의 연락처는 {json.loads(tool['content'])['rows'][0][1]} 입니다.")


def ask_in_chat(chat_env, pages, user):
    chat_env.fake.script = [tool_call("run_sql", {"connection": "sales", "sql": SQL}), answer_with_token]
    page = pages.open(user)
    page.goto(chat_env.url("/"))
    page.wait_for_selector(".empty")
    page.fill("#text", "첫 고객 연락처")
    page.press("#text", "Enter")
    page.wait_for_function(
        "() => document.querySelectorAll('.row.assistant').length >= 1"
        " && !document.querySelector('.working') && !document.querySelector('#send.stop')",
        timeout=60_000,
    )
    return page


def save_as_playbook(page, chat_env) -> Playbook:
    # From the answer's actions on the chat page: the playbook list opens
    # with that turn's question picked.
    page.click(".row.assistant .save-playbook")
    page.wait_for_selector("#from-turn-question option[value]", state="attached")
    turn = page.input_value("#from-turn-question")
    assert turn == str(Turn.objects.get().pk)
    page.fill("#from-turn-name", "첫 고객 연락처 확인")
    page.click("#from-turn button[type=submit]")
    page.wait_for_selector("#editor .pb-node-edit")
    playbook = Playbook.objects.get()
    assert playbook.name == "첫 고객 연락처 확인" and playbook.owner == chat_env.alice
    assert playbook.tier == "private" and playbook.nodes[0]["prompt"] == "첫 고객 연락처"
    return playbook


def add_parameter(page, name: str, kind: str = "text") -> None:
    page.click("#editor button:has-text('매개변수 추가')")
    row = page.locator("#editor .pb-parameter").last
    row.locator("[data-field=name]").fill(name)
    row.locator("[data-field=label]").fill("지역")
    row.locator("[data-field=kind]").select_option(kind)


def test_save_edit_run_watch_and_reveal(chat_env, pages):
    page = ask_in_chat(chat_env, pages, chat_env.alice)
    playbook = save_as_playbook(page, chat_env)

    # A bad parameter name is refused with the service's words; nothing changes.
    add_parameter(page, "Bad Name")
    page.click("#editor-save")
    page.wait_for_selector("#editor-error:not([hidden])")
    assert "Bad Name" in page.inner_text("#editor-error")
    playbook.refresh_from_db()
    assert playbook.parameters == []

    # A good one, used by the step's prompt.
    page.locator("#editor .pb-parameter").last.locator("[data-field=name]").fill("region")
    page.locator("#editor [data-field=prompt]").fill("$region 지역의 첫 고객 연락처")
    page.click("#editor-save")
    page.wait_for_selector("#run-form input[name=region]")
    playbook.refresh_from_db()
    assert [p["name"] for p in playbook.parameters] == ["region"]
    assert playbook.nodes[0]["prompt"] == "$region 지역의 첫 고객 연락처"

    # A required parameter left empty: the run is refused before it starts.
    page.click("#run-now")
    page.wait_for_selector("#run-error")
    assert "지역" in page.inner_text("#run-error")
    assert not PlaybookRun.objects.exists()

    # Run; the page shows it running, the step's tool call, then done,
    # without a reload and with no poll: the run's socket wakes it.
    chat_env.fake.delay = 1.5  # a slow model: the run is seen while it runs
    chat_env.fake.script = [tool_call("run_sql", {"connection": "sales", "sql": SQL}), answer_with_token]
    watch = RunWatch(page)
    page.fill("#run-form input[name=region]", "서울")
    page.click("#run-now")
    page.wait_for_selector("#run-nodes")
    assert page.evaluate("() => JSON.parse(document.getElementById('run-config').textContent).pollSeconds") == NO_POLL
    page.wait_for_selector("#run-status[data-status=running]", timeout=30_000)
    page.evaluate("() => { window.__sameDocument = true; }")
    page.wait_for_selector(".pb-node[data-status=running] .pb-activity code:text-is('run_sql')", timeout=30_000)
    page.wait_for_selector("#run-status[data-status=completed]", timeout=60_000)
    assert page.evaluate("() => window.__sameDocument === true")  # followed live, not reloaded
    assert page.locator(".pb-activity").count() == 0  # a running step's calls only; the record is the output
    # (The run's last frame may come after the page read the end and closed
    # its socket: the step's `turn.finished` wakes it as well.)
    assert "run.changed" in watch.types() and "tool.finished" in watch.types()
    woken_reads_only(watch)
    run = PlaybookRun.objects.get()
    assert run.status == "completed" and run.parameters == {"region": "서울"}
    assert any("서울 지역의 첫 고객 연락처" in json.dumps(r, ensure_ascii=False) for r in chat_env.fake.requests)

    # The run detail after a reload: the same, the output as a locked chip.
    page.reload()
    page.wait_for_selector("#run-status[data-status=completed]")
    chip = page.locator("#run-nodes .pb-output .pii").first
    chip.wait_for()
    assert PHONE not in page.content()
    assert "locked" in chip.get_attribute("class")
    chip.click()
    page.wait_for_selector("#popover:not([hidden])")
    assert "역할" in page.inner_text("#popover")  # who may reveal, as the chat page says
    assert page.locator("#run-nodes .pii.revealed").count() == 0
    assert not AuditEvent.objects.filter(kind=EventKind.PII_REVEAL).exists()

    # With the permission the value shows and one reveal is on the record.
    Role.objects.get(name="revealers").users.add(chat_env.alice)
    page.reload()
    chip = page.locator("#run-nodes .pb-output .pii.revealable").first
    chip.wait_for()
    chip.click()
    page.wait_for_selector("#run-nodes .pii.revealed")
    assert PHONE in page.inner_text("#run-nodes")
    reveals = AuditEvent.objects.filter(kind=EventKind.PII_REVEAL)
    assert reveals.count() == 1
    assert reveals.get().resource_id == str(run.conversation_id)

    # Re-run with the same parameters: a new run, the same values.
    chat_env.fake.delay = 0.0
    chat_env.fake.script = [tool_call("run_sql", {"connection": "sales", "sql": SQL}), answer_with_token]
    page.click("#run-again")
    page.wait_for_selector("#run-status[data-status=completed]", timeout=60_000)
    again = PlaybookRun.objects.exclude(pk=run.pk).get()
    assert again.rerun_of_id == run.pk and again.parameters == {"region": "서울"}


def test_a_refused_step_fails_the_run_live_with_a_value_free_reason(chat_env, pages):
    playbook = playbook_create(
        owner=chat_env.alice,
        name="고객 삭제",
        model=chat_env.models["inhouse-model"],
        parameters=[{"name": "phone", "kind": "text", "label": "전화"}],
        nodes=[
            {"key": "intro", "kind": "agent", "prompt": "인사해 주세요"},
            {
                "key": "erase",
                "kind": "tool",
                "tool": "run_sql",
                "arguments": {"connection": "sales", "sql": "DELETE FROM customers WHERE phone = '$phone'"},
            },
        ],
        actor=chat_env.alice,
    )
    chat_env.fake.delay = 1.5  # the first step is still running when the page opens
    chat_env.fake.script = [text("안녕하세요.")]
    page = pages.open(chat_env.alice)
    page.goto(chat_env.url(f"/playbooks/{playbook.pk}/"))
    watch = RunWatch(page)
    page.fill("#run-form input[name=phone]", PHONE)
    page.click("#run-now")
    page.wait_for_selector("#run-status[data-status=running]", timeout=30_000)
    page.evaluate("() => { window.__sameDocument = true; }")
    page.wait_for_selector("#run-status[data-status=failed]", timeout=60_000)
    assert page.evaluate("() => window.__sameDocument === true")
    failed = page.locator('.pb-node[data-status="failed"]')
    assert failed.get_attribute("data-index") == "1"
    reason = page.inner_text("#run-reason")
    assert "erase" in reason and reason == PlaybookRun.objects.get().error
    assert PHONE not in reason and PHONE not in failed.inner_text() and PHONE not in page.content()
    woken_reads_only(watch)
    # After a reload: the same.
    page.reload()
    page.wait_for_selector("#run-status[data-status=failed]")
    assert page.inner_text("#run-reason") == reason


def editor_keys(page) -> list[str]:
    return page.eval_on_selector_all("#editor .pb-node-edit [data-field=key]", "boxes => boxes.map(b => b.value)")


def test_steps_are_reordered_with_the_keyboard_saved_and_a_later_reference_refused(chat_env, pages):
    playbook = playbook_create(
        owner=chat_env.alice,
        name="순서 바꾸기",
        model=chat_env.models["inhouse-model"],
        parameters=[],
        nodes=[
            {"key": "greet", "kind": "agent", "prompt": "인사해 주세요"},
            {"key": "names", "kind": "agent", "prompt": "고객 이름 목록"},
            {"key": "summary", "kind": "agent", "prompt": "요약: $names"},
        ],
        actor=chat_env.alice,
    )
    page = pages.open(chat_env.alice)
    page.goto(chat_env.url(f"/playbooks/{playbook.pk}/"))
    page.wait_for_selector("#editor .pb-node-edit")
    rows = page.locator("#editor .pb-node-edit")
    first_down = rows.nth(0).locator("[data-move=down]")
    # Real buttons with translated names that say which step they move;
    # the moves that cannot be made are disabled.
    assert first_down.evaluate("b => b.tagName") == "BUTTON" and first_down.get_attribute("type") == "button"
    assert first_down.inner_text() == "아래로" and first_down.get_attribute("aria-label") == "1단계를 아래로 옮기기"
    assert rows.nth(0).locator("[data-move=up]").is_disabled()
    assert rows.nth(2).locator("[data-move=down]").is_disabled()
    assert rows.nth(2).locator(".pb-step-number").inner_text() == "3단계"

    # The keyboard alone: the focus stays with the moved step's button.
    first_down.focus()
    page.keyboard.press("Enter")
    assert editor_keys(page) == ["names", "greet", "summary"]
    focused = "() => document.activeElement.closest('.pb-node-edit').querySelector('[data-field=key]').value"
    assert page.evaluate(focused) == "greet"
    assert page.evaluate("() => document.activeElement.dataset.move") == "down"
    page.keyboard.press("Space")
    assert editor_keys(page) == ["names", "summary", "greet"]
    # At the bottom its down button is disabled: the focus went to its up button.
    assert page.evaluate(focused) == "greet" and page.evaluate("() => document.activeElement.dataset.move") == "up"
    assert page.inner_text("#editor-note") == "greet 단계가 이제 3단계입니다."
    assert rows.nth(2).locator("[data-move=up]").get_attribute("aria-label") == "3단계를 위로 옮기기"

    with page.expect_navigation():
        page.click("#editor-save")
    page.wait_for_selector("#editor .pb-node-edit")
    assert editor_keys(page) == ["names", "summary", "greet"]  # after the reload: as saved
    playbook.refresh_from_db()
    assert [n["key"] for n in playbook.nodes] == ["names", "summary", "greet"]
    assert playbook.nodes[1]["prompt"] == "요약: $names"  # the steps moved whole

    # The summary moved above the step whose output it uses: refused on
    # save with the service's words, nothing stored.
    page.locator("#editor .pb-node-edit").nth(1).locator("[data-move=up]").click()
    assert editor_keys(page) == ["summary", "names", "greet"]
    page.click("#editor-save")
    page.wait_for_selector("#editor-error:not([hidden])")
    assert "1단계가 2단계(names)의 출력을 쓰지만" in page.inner_text("#editor-error")
    playbook.refresh_from_db()
    assert [n["key"] for n in playbook.nodes] == ["names", "summary", "greet"]
