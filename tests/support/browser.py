"""Browser tests: Playwright driving Debian's Chromium against the production
stack (daphne with the page's static files, a Celery worker with the
threads pool, an own redis-server, the test PostgreSQL database), with the
scripted model server and the offline demo model answering.

Playwright's own browser download cannot work on these machines; the
Chromium of Debian's `chromium` package is launched instead (`make
browser-deps` installs it, with the CJK fonts). Without it (or without
Playwright) the tests skip, and with OWLAI_REQUIRE_SERVICES=1 (CI) a skip is
a failure (they are marked `e2e`).

On a failure each page's screenshot and HTML are saved under
var/test-artifacts/browser/ (git-ignored); OWLAI_BROWSER_SCREENSHOTS=always
saves them for passing tests too.

    def test_x(chat_env, pages):
        page = pages.open(chat_env.alice)
        page.goto(chat_env.url("/"))
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.customer_dbs import port_open
from tests.support.fake_llm import FakeLLMServer
from tests.support.stack import ROOT, Stack, process_env

CHROMIUM = os.environ.get("OWLAI_CHROMIUM", shutil.which("chromium") or "/usr/bin/chromium")
ARTIFACTS = ROOT / "var" / "test-artifacts" / "browser"

CONFIG = """
[[providers]]
name = "offline-demo"
kind = "offline-demo"
tier = "private"
allow_in_production = true
models = [{{ name = "owlai-offline-demo", label = "Offline demo model" }}]

[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "{base_url}"
models = [{{ name = "inhouse-model", label = "In-house model" }}]

[[providers]]
name = "cloud"
kind = "openai"
tier = "public"
base_url = "{base_url}"
models = [{{ name = "cloud-model", label = "Cloud model" }}]
"""


@dataclass
class BrowserStack:
    base_url: str
    fake: FakeLLMServer
    config_text: str
    stack: Stack

    def url(self, path: str) -> str:
        return self.base_url + path


ASYNC_UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium per test module; each test gets fresh contexts.

    Playwright's sync API keeps an asyncio loop registered as running in the
    test's thread between its calls, and Django then refuses every ORM call
    of the test (and of the database teardown) as "from an async context"
    although none runs inside that loop. The check is lifted while the
    browser is up, for this module only: Playwright stops at its end, so the
    rest of the suite keeps the check."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements-dev.txt)")
    if not (CHROMIUM and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"Chromium not found at {CHROMIUM} (run `make browser-deps`)")
    before = os.environ.get(ASYNC_UNSAFE)
    os.environ[ASYNC_UNSAFE] = "true"
    try:
        with sync_api.sync_playwright() as playwright:
            # Root on CI machines: Chromium's sandbox needs an unprivileged user.
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if before is None:
            os.environ.pop(ASYNC_UNSAFE, None)
        else:
            os.environ[ASYNC_UNSAFE] = before


@contextlib.contextmanager
def browser_stack_running(tmp: Path, pg_customer_db, *, extra_config: str = "", beat: bool = False, **env_extra: str):
    """The page's stack for a test module: the scripted model server, the
    install config (`CONFIG` plus `extra_config`), redis, daphne with the
    static files, a threads-pool worker (and beat when asked)."""
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("needs DATABASE_URL pointing at PostgreSQL (run `make test`)")
    if not port_open("127.0.0.1", 6379) or not shutil.which("redis-server"):
        pytest.skip("needs redis-server (run `make test`)")
    fake = FakeLLMServer().__enter__()
    config_text = CONFIG.format(base_url=fake.base_url) + extra_config
    config_path = tmp / "owlai.toml"
    config_path.write_text(config_text)
    env = process_env(
        config_path,
        OWLAI_TEST_TARGET_DSN=pg_customer_db.dsn,
        LOG_LEVEL="WARNING",
        # The page asks for the state after 5 quiet seconds; keep deltas prompt.
        OWLAI_DELTA_COALESCE_SECONDS="0.02",
        **env_extra,
    )
    env.pop(ASYNC_UNSAFE, None)  # the servers keep Django's check
    stack = Stack(tmp, env)
    try:
        stack.start_redis()
        stack.start_web("tests.support.asgi_static:application")
        stack.start_worker(2, pool="threads")
        if beat:
            stack.start_beat()
        yield BrowserStack(f"http://127.0.0.1:{stack.port}", fake, config_text, stack)
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()
        fake.__exit__(None, None, None)


@pytest.fixture(scope="module")
def browser_stack(request, tmp_path_factory, django_db_setup, pg_customer_db):
    with browser_stack_running(tmp_path_factory.mktemp("browser-stack"), pg_customer_db) as stack:
        yield stack


@dataclass
class ChatEnv:
    """Per test: the install config synced, a `sales` connection on the
    customer database, `alice` (may query, may not reveal) and `rita` (may
    query and reveal)."""

    stack: BrowserStack
    alice: object
    rita: object
    sales: object
    fake: FakeLLMServer
    models: dict = field(default_factory=dict)

    def url(self, path: str = "/") -> str:
        return self.stack.url(path)

    def set_password(self, user, password: str) -> None:
        """A password the server processes can check: the test process hashes
        with MD5 only (tests/conftest.py), which the servers do not accept."""
        from django.contrib.auth.hashers import PBKDF2PasswordHasher

        user.password = PBKDF2PasswordHasher().encode(password, PBKDF2PasswordHasher().salt(), iterations=1000)
        user.save(update_fields=["password"])


@pytest.fixture
def chat_env(browser_stack, transactional_db, django_user_model):
    from governance.models import DbConnection, DbGrant, LlmModel, Role
    from governance.services import feature_default_set, install_config_sync
    from owlai.install_config import parse_install_config

    install_config_sync(config=parse_install_config(browser_stack.config_text))
    models = {m.name: m for m in LlmModel.objects.all()}
    feature_default_set(feature="chat", model=models["inhouse-model"])
    sales = DbConnection.objects.create(
        name="sales", engine="postgresql", dsn_env="OWLAI_TEST_TARGET_DSN", business_summary="고객과 주문"
    )
    alice = django_user_model.objects.create_user("alice", password="pw-alice-123")
    rita = django_user_model.objects.create_user("rita", password="pw-rita-123")
    team = Role.objects.create(name="sales-team")
    team.users.add(alice)
    DbGrant.objects.create(role=team, connection=sales, whole_database=True)
    revealers = Role.objects.create(name="revealers", can_view_raw_pii=True)
    revealers.users.add(rita)
    DbGrant.objects.create(role=revealers, connection=sales, whole_database=True)
    fake = browser_stack.fake
    fake.script, fake.delay = [], 0.0
    fake.requests.clear()
    yield ChatEnv(browser_stack, alice, rita, sales, fake, models)
    fake.script, fake.delay = [], 0.0


class Pages:
    def __init__(self, chromium, stack: BrowserStack) -> None:
        self.chromium = chromium
        self.stack = stack
        self.contexts: list = []
        self.pages: list = []
        self.dialogs: list[str] = []  # alert/confirm/prompt texts: none is expected

    def open(self, user=None, *, width: int = 1280, height: int = 860, locale: str = "ko-KR"):
        """A new browser context (own cookies), signed in as `user` unless None."""
        context = self.chromium.new_context(viewport={"width": width, "height": height}, locale=locale)
        context.set_default_timeout(15_000)
        self.contexts.append(context)
        if user is not None:
            self.sign_in(context, user)
        page = context.new_page()
        page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.pages.append(page)
        return page

    def sign_in(self, context, user) -> None:
        from django.test import Client

        client = Client()
        client.force_login(user)
        cookie = client.cookies["sessionid"].value
        context.add_cookies([{"name": "sessionid", "value": cookie, "url": self.stack.base_url}])

    def save_artifacts(self, name: str) -> list[Path]:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^\w.-]+", "_", name)[:120]
        saved = []
        for n, page in enumerate(self.pages):
            try:
                shot = ARTIFACTS / f"{safe}-{n}.png"
                page.screenshot(path=str(shot), full_page=True)
                html = ARTIFACTS / f"{safe}-{n}.html"
                html.write_text(page.content(), encoding="utf-8")
                saved += [shot, html]
            except Exception as exc:  # a closed page: nothing to keep
                print(f"could not save page {n}: {exc}")
        return saved

    def close(self) -> None:
        for context in self.contexts:
            context.close()


@pytest.fixture
def pages(request, chromium, browser_stack):
    """Opens pages; on a failure saves their screenshots and HTML."""
    opened = Pages(chromium, browser_stack)
    yield opened
    report = getattr(request.node, "rep_call", None)
    # OWLAI_BROWSER_SCREENSHOTS=always keeps them for passing tests too (to look at the page).
    if (report is not None and report.failed) or os.environ.get("OWLAI_BROWSER_SCREENSHOTS") == "always":
        saved = opened.save_artifacts(request.node.nodeid)
        print("browser artifacts:", *saved, sep="\n  ")
        print(browser_stack.stack.logs())
    opened.close()
