"""owlai.startup: the web and worker processes freeze what they hold once
started, so the cyclic collector's full collections no longer walk it (each
walk of ~250,000 objects held the interpreter lock ~110 ms on the benchmark
machine). Checked in fresh interpreters, as the processes start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REPORT = "import gc, json; print(json.dumps({'frozen': gc.get_freeze_count(), 'tracked': len(gc.get_objects())}))"


def run(code: str) -> dict:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "owlai.settings", "OWLAI_DB_ROLE_CHECK": "0"}
    env.setdefault("SECRET_KEY", "startup-objects-test")
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{REPORT}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_web_process_freezes_its_start_up_objects():
    counts = run("import owlai.asgi")
    assert counts["frozen"] > 50_000
    assert counts["tracked"] < counts["frozen"] / 5  # what a full collection still walks


def test_a_worker_freezes_before_its_pool_starts():
    counts = run("import django; django.setup()\nfrom celery.signals import worker_init\nworker_init.send(sender=None)")
    assert counts["frozen"] > 50_000
    assert counts["tracked"] < counts["frozen"] / 5


def test_without_it_nothing_is_frozen():
    counts = run("import django; django.setup()\nimport chat.services")
    assert counts["frozen"] == 0
