"""Playbook runs beside chat, through the real production stack (daphne,
Celery workers over Redis, PostgreSQL, beat, the fake OpenAI-compatible
model answering every call after `--delay` seconds).

In one invocation, on one stack: first chat alone (bench/load.py's
measurement: N conversations, `--turns` turns each over the websocket),
then the same chat load again on fresh conversations while `--runs`
playbook runs are started at once through the playbooks API (each run two
agent nodes, the second templated over the first's output: two run-core
turns, two model calls). Reported: chat turn overhead (latency less the
model's time) p50/p95 alone and beside the runs, the difference, and for
the runs how many finished and completed and their duration less their
model time (p50/p95).

Usage: .venv/bin/python bench/playbook_load.py [--n 50] [--runs 50] [--turns 2]
    [--delay 1.0] [--workers 2] [--concurrency 32] [--smoke]
Needs what bench/load.py needs (PostgreSQL on 127.0.0.1:5432 or
OWLAI_BENCH_PG_ADMIN_URL); its own throwaway database and redis-server.
The last line is the headline. Goal: every run and every turn finishes.
`--smoke` runs tiny sizes in seconds (the test suite runs it); its figures
mean nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import load as chat_load  # noqa: E402  (the chat bench's measurement, reused)

NODES = [
    {"key": "first", "kind": "agent", "prompt": "$region 지역 고객이 몇 명이야?"},
    {"key": "second", "kind": "agent", "prompt": "앞의 답을 한 줄로 정리해 줘: $first"},
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50, help="concurrent chat conversations")
    parser.add_argument("--runs", type=int, default=50, help="playbook runs started at once")
    parser.add_argument("--turns", type=int, default=2, help="turns per conversation, one after the other")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds the model takes per call")
    parser.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=32, help="threads (or children) per worker")
    parser.add_argument("--db-pool", type=int, default=0, help="OWLAI_DB_POOL_SIZE for web and workers (0: off)")
    parser.add_argument("--timeout", type=float, default=240.0, help="a turn or run not finished by then is stuck")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: proves the bench still runs")
    args = parser.parse_args()
    args.warm_up = False  # warmed up here, before each measured phase
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.smoke:
        args.n, args.runs, args.turns, args.delay, args.workers, args.concurrency = 3, 3, 1, 0.2, 1, 6
        args.timeout = 60.0

    import psycopg

    admin_url = os.environ.get("OWLAI_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    bench_db = f"owlai_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{bench_db}"')
    db_url = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgres://") + f"/{bench_db}"
    tmp = Path(tempfile.mkdtemp(prefix="owlai-playbook-load-"))
    os.environ.update(
        {
            "DATABASE_URL": db_url,
            "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
            "SECRET_KEY": os.environ.get("SECRET_KEY", "bench"),
            "OWLAI_DB_ROLE_CHECK": "0",
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_SETTINGS_MODULE": "owlai.settings",
        }
    )
    try:
        run(args, tmp, db_url, admin_url, bench_db)
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')


def run(args, tmp: Path, db_url: str, admin_url: str, bench_db: str) -> None:
    import subprocess

    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_llm", "--delay", str(args.delay), "--text", "네, 확인했습니다."],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    base_url = fake.stdout.readline().strip()
    config_text = f"""
[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "{base_url}"
models = ["inhouse-model"]
"""
    config_path = tmp / "owlai.toml"
    config_path.write_text(config_text)
    os.environ["OWLAI_CONFIG"] = str(config_path)

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from accounts.services import api_token_create
    from chat.services import conversation_create
    from governance.models import LlmModel
    from governance.services import feature_default_set, install_config_sync
    from owlai.install_config import parse_install_config
    from playbooks.services import playbook_create
    from tests.support.stack import Stack

    call_command("migrate", verbosity=0)
    install_config_sync(config=parse_install_config(config_text))
    model = LlmModel.objects.select_related("provider").get(name="inhouse-model")
    feature_default_set(feature="chat", model=model)
    user = get_user_model().objects.create_user(f"load-{uuid.uuid4().hex[:6]}", is_staff=True)
    web = Client()
    web.force_login(user)
    cookie = web.cookies["sessionid"].value
    _, key = api_token_create(user=user, name="bench", actor=user, scopes=["agent"])
    # One playbook whose runs may overlap: all of them start at once.
    playbook = playbook_create(
        owner=user,
        name="bench",
        model=model,
        parameters=[{"name": "region", "kind": "text"}],
        nodes=NODES,
        allow_overlap=True,
        actor=user,
    )

    limits = {"OWLAI_WS_TURN_STARTS_PER_MINUTE": "600", "OWLAI_WS_TURN_START_BURST": str(args.turns)}
    limits["OWLAI_DB_POOL_SIZE"] = str(args.db_pool)
    stack = Stack(tmp, {**os.environ, "DATABASE_URL": db_url, "LOG_LEVEL": "WARNING", **limits})
    try:
        stack.start_redis()
        stack.start_web()
        for i in range(args.workers):
            stack.start_worker(args.concurrency, pool=args.pool, name=f"worker{i}")
        stack.start_beat()
        time.sleep(2.0 if args.smoke else 4.0)
        from owlai.startup import freeze_startup_objects

        freeze_startup_objects()
        api = f"http://127.0.0.1:{stack.port}/api/playbooks/{playbook.pk}/runs/"
        pids = {name: proc.pid for name, proc in stack.procs.items()} | {"model": fake.pid}
        # Warm-up (not measured): one chat turn per conversation and a few runs.
        _wait_runs(_start_runs(api, key, min(3, args.runs)), args.timeout)
        alone_conversations = [conversation_create(owner=user).pk for _ in range(args.n)]
        _warm(stack.port, cookie, alone_conversations, args)
        alone = chat_load.measure(stack.port, cookie, alone_conversations, args, admin_url, bench_db, pids)
        mixed_conversations = [conversation_create(owner=user).pk for _ in range(args.n)]
        _warm(stack.port, cookie, mixed_conversations, args)
        started: list = []
        starter = threading.Thread(target=lambda: started.extend(_start_runs(api, key, args.runs)))
        starter.start()  # the runs start while the chat turns are sent
        mixed = chat_load.measure(stack.port, cookie, mixed_conversations, args, admin_url, bench_db, pids)
        starter.join()
        runs = _wait_runs(started, args.timeout)
    except BaseException:
        print(stack.logs(), file=sys.stderr)
        raise
    finally:
        stack.close()
        fake.terminate()
        fake.wait(10)
    report(args, alone, mixed, runs)


def _warm(port: int, cookie: str, conversations: list, args) -> None:
    warm = argparse.Namespace(**{**vars(args), "turns": 1})
    asyncio.run(chat_load._converse_all(port, cookie, conversations, warm))


def _start_runs(url: str, key: str, count: int) -> list:
    """`count` runs started at once through the API (as a script would);
    each answer is the run's id or the refusal."""

    def start(i: int):
        body = json.dumps({"parameters": {"region": f"지역{i}"}}).encode()
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read())["id"]
        except urllib.error.HTTPError as exc:  # counted as not started, with why
            return f"error:HTTP {exc.code}"
        except Exception as exc:
            return f"error:{type(exc).__name__}"

    with ThreadPoolExecutor(max_workers=max(1, count)) as pool:
        return list(pool.map(start, range(count)))


def _wait_runs(started: list, timeout: float) -> list:
    """Until every started run ended (or `timeout`): the runs' rows."""
    from playbooks.models import ACTIVE_RUN_STATUSES, PlaybookRun

    ids = [i for i in started if isinstance(i, int)]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not PlaybookRun.objects.filter(pk__in=ids, status__in=ACTIVE_RUN_STATUSES).exists():
            break
        time.sleep(0.5)
    rows = list(PlaybookRun.objects.filter(pk__in=ids))
    return rows + [i for i in started if not isinstance(i, int)]


def _pct(values: list[float], q: float) -> float:
    values = sorted(values) or [float("nan")]
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def report(args, alone: dict, mixed: dict, runs: list) -> None:
    from playbooks.models import ACTIVE_RUN_STATUSES

    real = [r for r in runs if not isinstance(r, str)]
    refused = sorted({r for r in runs if isinstance(r, str)})
    unfinished = sorted({f"{r.status}: {r.error[:60]}" for r in real if r.status != "completed"})
    ended = [r for r in real if r.status not in ACTIVE_RUN_STATUSES and r.finished_at]
    completed = sum(r.status == "completed" for r in ended)
    model_time = args.delay * len(NODES)
    durations = [max(0.0, (r.finished_at - r.created_at).total_seconds() - model_time) * 1000 for r in ended]
    setup = f"{args.pool} pool, {args.workers} worker(s) x {args.concurrency}, model {args.delay:g}s"
    if args.db_pool:
        setup += f", DB pool {args.db_pool}"
    for label, r in (("chat alone", alone), (f"chat beside {args.runs} playbook runs", mixed)):
        print(
            f"{label}: N={r['n']}: {r['finished']}/{r['expected']} turns finished ({r['completed']} completed), "
            f"{r['rate']:.1f} turns/s, overhead p50 {r['p50']:.0f} ms, p95 {r['p95']:.0f} ms, p99 {r['p99']:.0f} ms, "
            f"waiting for a worker p95 {r['queue_p95']:.0f} ms, peak DB connections {r['peak_db']}"
            f"{', refused: ' + ', '.join(r['errors']) if r['errors'] else ''}"
        )
    print(
        f"playbook runs: {len(ended)}/{len(runs)} ended ({completed} completed, {len(runs) - len(real)} not started), "
        f"{len(NODES)} agent nodes each, duration less model time p50 "
        f"{statistics.median(durations) if durations else float('nan'):.0f} ms, p95 {_pct(durations, 95):.0f} ms"
        f"{', not started: ' + ', '.join(refused) if refused else ''}"
        f"{', not completed: ' + '; '.join(unfinished) if unfinished else ''}"
    )
    print(
        f"headline: chat p95 overhead {alone['p95']:.0f} ms alone, {mixed['p95']:.0f} ms beside "
        f"{args.runs} playbook runs ({mixed['p95'] - alone['p95']:+.0f} ms); turns finished "
        f"{alone['finished']}/{alone['expected']} and {mixed['finished']}/{mixed['expected']}; "
        f"runs completed {completed}/{len(runs)} [{setup}] (goal: every run and turn finishes)"
    )


if __name__ == "__main__":
    main()
