"""Every bench still runs: each is started in its smoke mode (tiny sizes,
seconds), so a bench that stops working fails CI. The figures themselves are
never asserted (they are machine-dependent); only that the run completes and
prints its headline line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHES = sorted(path.name for path in (ROOT / "bench").glob("*.py"))

pytestmark = pytest.mark.services


@pytest.mark.parametrize("bench", BENCHES)
def test_bench_runs_in_smoke_mode(bench, require_postgres_app_db):
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / bench), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, done.stderr[-3000:]
