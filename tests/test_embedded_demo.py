"""The embedded profile as a newcomer gets it from `make run`: no environment,
migrate + seed_demo, the dev server, log in, chat with the offline demo model
over a real websocket and get rows back."""

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
        import http.cookiejar
        import urllib.request

        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        base = f"http://127.0.0.1:{port}"
        login_page = opener.open(f"{base}/accounts/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page).group(1)
        body = urllib.parse.urlencode(
            {"username": "staff", "password": "staff", "csrfmiddlewaretoken": csrf, "next": "/"}
        )
        request = urllib.request.Request(f"{base}/accounts/login/", data=body.encode(), headers={"Referer": base})
        chat_page = opener.open(request).read().decode()
        assert 'id="chat-config"' in chat_page  # landed on the chat page, logged in
        # Its script and libraries are served from local static files (no CDN).
        for src in re.findall(r'<script src="([^"]+)"', chat_page):
            assert src.startswith("/static/"), src
            assert opener.open(base + src).status == 200
        assert "turn.start" in opener.open(f"{base}/static/chat/chat.js").read().decode()
        cookies = {c.name: c.value for c in jar}
        create = urllib.request.Request(
            f"{base}/api/conversations/",
            data=b"{}",
            method="POST",
            headers={"Content-Type": "application/json", "X-CSRFToken": cookies["csrftoken"], "Referer": base},
        )
        conversation = json.loads(opener.open(create).read())
        models = json.loads(opener.open(f"{base}/api/models/").read())
        assert any(m["offline_demo"] for m in models)

        def ask(text: str) -> list[dict]:
            events = []
            with connect(
                f"ws://127.0.0.1:{port}/ws/chat/{conversation['id']}/",
                additional_headers={"Cookie": f"sessionid={cookies['sessionid']}"},
                origin=base,
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

        events = ask("SELECT city, count(*) AS n FROM customers GROUP BY city")
        finished = next(e for e in events if e["type"] == "tool.finished")
        assert finished["outcome"] == "success" and finished["row_count"] > 1, events
        answer = next(e for e in events if e["type"] == "message.completed")["text"]
        assert "| city | n |" in answer

        events = ask("검색 환불")
        finished = next(e for e in events if e["type"] == "tool.finished")
        assert (finished["tool"], finished["outcome"]) == ("search_documents", "success")
        assert "환불 정책" in next(e for e in events if e["type"] == "message.completed")["text"]
    finally:
        server.terminate()
        server.wait(timeout=15)
