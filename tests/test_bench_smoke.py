"""Every bench still runs: each is started in its smoke mode (tiny sizes,
seconds), so a bench that stops working fails CI. The figures themselves are
never asserted (they are machine-dependent); only that the run completes and
prints its headline line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# A leading underscore marks a bench's helper module, not a bench.
BENCHES = sorted(path.name for path in (ROOT / "bench").glob("*.py") if not path.name.startswith("_"))

pytestmark = pytest.mark.services


@pytest.mark.timeout(300)
@pytest.mark.parametrize("bench", BENCHES)
def test_bench_runs_in_smoke_mode(bench, require_postgres_app_db):
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    # Its own session: on a timeout the bench gets SIGTERM first, so it can
    # stop the processes it started (bench/load.py runs a whole stack).
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / bench), "--smoke"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        pytest.fail(f"{bench} --smoke did not finish in 240 s:\n{stdout[-3000:]}{stderr[-3000:]}")
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, done.stderr[-3000:]
