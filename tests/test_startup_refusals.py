"""Every entry point refuses to start on a retention below the legal floor
(and with a database role that could rewrite the audit trail); the default
configuration starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SHORT = """
[observability]
accessLogRetentionDays = 30

[[providers]]
name = "offline-demo"
kind = "offline-demo"
tier = "private"
models = ["owlai-offline-demo"]
"""
# The production profile refuses the demo model unless the config allows it.
PRODUCTION_DEMO = """
[[providers]]
name = "offline-demo"
kind = "offline-demo"
tier = "private"
allow_in_production = true
models = ["owlai-offline-demo"]
"""


def embedded_env(tmp_path: Path, config: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "OWLAI_"))}
    env["OWLAI_VAR_DIR"] = str(tmp_path / "var")
    env["PYTHONUNBUFFERED"] = "1"  # the worker's log is read while it runs
    if config is not None:
        path = tmp_path / "owlai.toml"
        path.write_text(config)
        env["OWLAI_CONFIG"] = str(path)
    return env


def run(args: list[str], env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


ENTRY_POINTS = {
    "manage.py check": [sys.executable, "manage.py", "check"],
    "ASGI app": [sys.executable, "-c", "import owlai.asgi"],
    "Celery worker": [
        str(BIN / "celery"),
        "-A",
        "owlai",
        "worker",
        "-P",
        "solo",
        "-l",
        "info",
        "--without-mingle",
        "--without-gossip",
    ],
}


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_short_retention_refuses_every_entry_point(tmp_path, entry_point):
    result = run(ENTRY_POINTS[entry_point], embedded_env(tmp_path, SHORT), timeout=60)
    assert result.returncode != 0
    assert "accessLogRetentionDays = 30" in result.stderr + result.stdout


@pytest.mark.parametrize("entry_point", ["manage.py check", "ASGI app"])
def test_default_config_starts(tmp_path, entry_point):
    result = run(ENTRY_POINTS[entry_point], embedded_env(tmp_path, None))
    assert result.returncode == 0, result.stderr


def test_default_config_worker_starts(tmp_path):
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        ENTRY_POINTS["Celery worker"],
        cwd=ROOT,
        env=embedded_env(tmp_path, None),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "ready" not in log.read_text():
            assert worker.poll() is None, log.read_text()
            time.sleep(0.3)
        assert "ready" in log.read_text(), log.read_text()
    finally:
        worker.terminate()
        worker.wait(timeout=20)


@pytest.mark.services
@pytest.mark.parametrize("entry_point", ["ASGI app", "Celery worker"])
def test_superuser_role_refuses_web_and_worker(tmp_path, entry_point, require_postgres_app_db, require_redis):
    """Connected as the PostgreSQL superuser (who could rewrite the audit
    trail), production entry points refuse to start."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    env = embedded_env(tmp_path, PRODUCTION_DEMO)
    env.update(
        # Any database will do: the check looks at the role, not the data.
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/postgres",
        REDIS_URL=settings.REDIS_URL,
        SECRET_KEY="x",
        OWLAI_DB_ROLE_CHECK="1",
    )
    result = run(ENTRY_POINTS[entry_point], env, timeout=60)
    assert result.returncode != 0
    assert "superuser" in (result.stderr + result.stdout).lower()
