"""The embedded profile as a newcomer gets it from `make run`: no environment,
migrate + seed_demo, the dev server, log in, chat with the offline demo model
over a real websocket: the README's examples work as written there (rows, a
refusal, a search), names are masked from the first query, the README's
reveal user may reveal and the other may not, and the language switch
changes the answers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.support.stack import free_port, wait_for_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


def embedded_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "OWLAI_", "SECRET_KEY"))
    }
    env["OWLAI_VAR_DIR"] = str(tmp_path / "var")
    return env


def readme_examples() -> tuple[str, str, str]:
    """The SQL example, the refusal example and the search example of README's set-up section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sql = re.search(r"send SQL, for example\s*```\s*\n(.+?)\n```", readme, re.DOTALL).group(1).strip()
    refusal = re.search(r"Try `([^`]+)` to see a refusal", readme).group(1)
    search = re.search(r"try `(검색 [^`]+)` in the chat", readme).group(1)
    return sql, refusal, search


def answer_of(events: list[dict]) -> str:
    return next(e for e in events if e["type"] == "message.completed")["text"]


class Browser:
    """A signed-in browser session against the dev server, with one conversation."""

    def __init__(self, base: str, username: str) -> None:
        import http.cookiejar
        import urllib.request

        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        login_page = self.opener.open(f"{base}/accounts/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page).group(1)
        chat_page = self.post_form(
            "/accounts/login/", {"username": username, "password": username, "csrfmiddlewaretoken": csrf, "next": "/"}
        )
        assert 'id="chat-config"' in chat_page  # landed on the chat page, logged in
        # Its script and libraries are served from local static files (no CDN).
        for src in re.findall(r'<script src="([^"]+)"', chat_page):
            assert src.startswith("/static/"), src
            assert self.opener.open(base + src).status == 200
        assert "turn.start" in self.opener.open(f"{base}/static/chat/chat.js").read().decode()
        self.conversation = self.post_json("/api/conversations/", {})["body"]["id"]

    def cookies(self) -> dict[str, str]:
        return {c.name: c.value for c in self.jar}

    def post_form(self, path: str, fields: dict) -> str:
        import urllib.parse
        import urllib.request

        fields = {"csrfmiddlewaretoken": self.cookies().get("csrftoken", ""), **fields}
        body = urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(f"{self.base}{path}", data=body, headers={"Referer": self.base})
        return self.opener.open(request).read().decode()

    def get_json(self, path: str):
        return json.loads(self.opener.open(f"{self.base}{path}").read())

    def post_json(self, path: str, payload: dict) -> dict:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(
            f"{self.base}{path}",
            data=json.dumps(payload).encode(),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-CSRFToken": self.cookies()["csrftoken"],
                "Referer": self.base,
            },
        )
        try:
            response = self.opener.open(request)
        except urllib.error.HTTPError as error:
            return {"status": error.code, "body": json.loads(error.read() or b"null")}
        return {"status": response.status, "body": json.loads(response.read())}

    def ask(self, text: str) -> list[dict]:
        port = self.base.rsplit(":", 1)[1]
        cookie = "; ".join(f"{name}={value}" for name, value in self.cookies().items())
        events = []
        with connect(
            f"ws://127.0.0.1:{port}/ws/chat/{self.conversation}/",
            additional_headers={"Cookie": cookie},
            origin=self.base,
        ) as ws:
            ws.send(json.dumps({"type": "turn.start", "text": text}))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                event = json.loads(ws.recv(timeout=30))
                if event["type"] != "state":  # the stored conversation, sent on connect
                    events.append(event)
                if events and events[-1]["type"] == "turn.finished":
                    break
        assert events[-1]["type"] == "turn.finished" and events[-1]["status"] == "completed", events
        return events


def test_make_run_profile_serves_a_working_demo(tmp_path):
    env = embedded_env(tmp_path)
    for command in (["migrate", "--noinput", "-v", "0"], ["seed_demo"]):
        result = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr
    port = free_port()
    log = tmp_path / "server.log"
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--insecure", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, server, log, timeout=60)
        base = f"http://127.0.0.1:{port}"
        staff = Browser(base, "staff")
        models = staff.get_json("/api/models/")
        assert any(m["offline_demo"] for m in models)

        # The README's examples, as written there.
        sql_example, refusal_example, search_example = readme_examples()
        events = staff.ask(sql_example)
        finished = next(e for e in events if e["type"] == "tool.finished")
        assert finished["outcome"] == "success" and finished["row_count"] > 1, events
        assert "| city | count(*) |" in answer_of(events)

        events = staff.ask(refusal_example)
        finished = next(e for e in events if e["type"] == "tool.finished")
        assert finished["outcome"] == "denied", events
        assert "쓰기는 허용되지 않습니다(DELETE)" in answer_of(events)  # Korean by default, in one language

        events = staff.ask(search_example)
        finished = next(e for e in events if e["type"] == "tool.finished")
        assert (finished["tool"], finished["outcome"]) == ("search_documents", "success")
        assert "환불 정책" in answer_of(events)

        # seed_demo analysed the schema: names are tokens from the first query.
        first_name = answer_of(staff.ask("SELECT name FROM customers ORDER BY id LIMIT 1")).splitlines()[2]
        token = re.search(r"\[이름-\d+\]", first_name).group(0)
        refused = staff.post_json(f"/api/conversations/{staff.conversation}/reveal/", {"token": token})
        assert refused["status"] == 403

        # manager may reveal (README's user table).
        manager = Browser(base, "manager")
        first_name = answer_of(manager.ask("SELECT name FROM customers ORDER BY id LIMIT 1")).splitlines()[2]
        token = re.search(r"\[이름-\d+\]", first_name).group(0)
        revealed = manager.post_json(f"/api/conversations/{manager.conversation}/reveal/", {"token": token})
        assert revealed["status"] == 200 and re.fullmatch(r"[가-힣]{2,4}", revealed["body"]["original"]), revealed

        # The switcher: English answers and reasons from then on.
        staff.post_form("/i18n/setlang/", {"language": "en", "next": "/"})
        assert "writing is not allowed (DELETE)" in answer_of(staff.ask(refusal_example))
    finally:
        server.terminate()
        server.wait(timeout=15)
