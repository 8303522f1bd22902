"""The agent API in the embedded profile (`make run`: SQLite, the in-memory
layer, turns run in the server's process) with the seeded demo: the README's
openai example runs as written against the offline demo model, and the
facade's answers show personal data as tokens."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support.stack import free_port, wait_for_port
from tests.test_agentapi_e2e import readme_block
from tests.test_embedded_demo import ROOT, embedded_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

MINT = (
    "from django.contrib.auth import get_user_model; from accounts.services import api_token_create; "
    "u = get_user_model().objects.get(username='staff'); "
    "print(api_token_create(user=u, name='script', actor=u, scopes=['agent'])[1])"
)


def manage(env, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_readme_openai_example_runs_against_the_embedded_demo(tmp_path):
    from openai import OpenAI

    env = embedded_env(tmp_path)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "seed_demo")
    key = manage(env, "shell", "-c", MINT).strip().splitlines()[-1]
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
        script = tmp_path / "example.py"
        script.write_text(readme_block("agentapi-openai", "python"))
        run = subprocess.run(
            [sys.executable, str(script)],
            env={**env, "OWLAI_URL": base, "OWLAI_TOKEN": key},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert run.returncode == 0, run.stderr + log.read_text()[-3000:]
        # The demo model ran both queries through the executor and shows the rows.
        assert "| city | count(*) |" in run.stdout
        assert "| count(*) |" in run.stdout.split("| city | count(*) |", 1)[1]

        client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
        answer = client.chat.completions.create(
            model="owlai-offline-demo",
            messages=[{"role": "user", "content": "SELECT name, email FROM customers ORDER BY id LIMIT 1"}],
        )
        shown = answer.choices[0].message.content
        assert re.search(r"\[이름-\d+\]", shown) and re.search(r"\[이메일-\d+\]", shown), shown
        assert "@" not in shown
    finally:
        server.terminate()
        server.wait(timeout=15)
