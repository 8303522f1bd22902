"""Turn throughput through the real production stack: N concurrent
conversations, each running `--turns` turns one after the other, through
websockets (daphne) to Celery worker(s) over Redis, with PostgreSQL, against
the fake OpenAI-compatible model (tests/support/fake_llm.py) answering every
call after `--delay` seconds.

Each conversation first runs one turn that is not measured (the processes'
first turns open pools and start threads; `--no-warm-up` measures them too).
Measured per N: turns/s, and turn latency (send `turn.start` -> receive
`turn.finished`) MINUS the model's time (the delay: one model call per turn),
i.e. the platform's overhead (queueing for a worker slot, database, Redis,
websocket), as p50/p95/p99; the peak number of database connections
(pg_stat_activity) during the run; and how many turns finished.

`--metrics-cost SECONDS` runs each N twice in the same run, without and
with /metrics scraped every SECONDS (as Prometheus would, from loopback), and
reports what the scrapes cost: each scrape's time and size, and the overhead
and CPU per turn with and without them.

Usage: .venv/bin/python bench/load.py [--n 50 200] [--turns 2] [--delay 1.0]
    [--pool threads|prefork] [--workers 2] [--concurrency 32] [--metrics-cost 1] [--smoke]
Creates its own throwaway PostgreSQL database and its own redis-server on a
free port (needs PostgreSQL on 127.0.0.1:5432, or OWLAI_BENCH_PG_ADMIN_URL).
The last line is the headline. Goal: at N = 50 with a 1 s model, p95
overhead <= 500 ms; at N = 200, every turn finishes. `--smoke` runs tiny
sizes in seconds (the test suite runs it so the bench cannot rot); its
figures mean nothing.
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
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[50, 200], help="concurrent conversations (one run each)")
    parser.add_argument("--turns", type=int, default=2, help="turns per conversation, one after the other")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds the model takes per call")
    parser.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=32, help="threads (or children) per worker")
    parser.add_argument("--db-pool", type=int, default=0, help="OWLAI_DB_POOL_SIZE for web and workers (0: off)")
    parser.add_argument("--timeout", type=float, default=120.0, help="a turn not finished by then counts as stuck")
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="measure from the first turn (by default each conversation runs one unmeasured turn first)",
    )
    parser.add_argument(
        "--metrics-cost",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run each N without and with /metrics scraped every SECONDS, and report both",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: proves the bench still runs")
    args = parser.parse_args()
    # Stopped from outside (a test's timeout, Ctrl-C in a terminal sends
    # SIGINT, a supervisor SIGTERM): unwind, so the finally blocks stop the
    # stack's processes and drop the throwaway database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.smoke:
        args.n, args.turns, args.delay, args.workers, args.concurrency = [4], 1, 0.2, 1, 4
        args.timeout = 30.0
        args.metrics_cost = args.metrics_cost or 0.2  # the scraping phase runs too

    import psycopg

    admin_url = os.environ.get("OWLAI_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    bench_db = f"owlai_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{bench_db}"')
    db_url = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgres://") + f"/{bench_db}"
    tmp = Path(tempfile.mkdtemp(prefix="owlai-load-"))
    os.environ.update(
        {
            "DATABASE_URL": db_url,
            # This process never talks to Redis; the stack's processes get their own.
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

    # The model runs in its own process: in this one, the clients' event loop
    # would slow its answers down (one interpreter lock).
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

    from chat.services import conversation_create
    from governance.models import LlmModel
    from governance.services import feature_default_set, install_config_sync
    from owlai.install_config import parse_install_config
    from tests.support.stack import Stack

    call_command("migrate", verbosity=0)
    install_config_sync(config=parse_install_config(config_text))
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
    user = get_user_model().objects.create_user(f"load-{uuid.uuid4().hex[:6]}", is_staff=True)
    web = Client()
    web.force_login(user)
    cookie = web.cookies["sessionid"].value

    # The per-socket turn-start limit (a few per minute) is for people; each
    # client here starts its turns back to back, and the bench measures the
    # platform, not that limit.
    limits = {"OWLAI_WS_TURN_STARTS_PER_MINUTE": "600", "OWLAI_WS_TURN_START_BURST": str(args.turns)}
    limits["OWLAI_DB_POOL_SIZE"] = str(args.db_pool)
    stack = Stack(tmp, {**os.environ, "DATABASE_URL": db_url, "LOG_LEVEL": "WARNING", **limits})
    try:
        stack.start_redis()
        stack.start_web()
        for i in range(args.workers):
            stack.start_worker(args.concurrency, pool=args.pool, name=f"worker{i}")
        stack.start_beat()
        time.sleep(2.0 if args.smoke else 4.0)  # workers connect to the broker
        # The clients run in this process, which holds Django too: its full
        # garbage collections (~0.1 s, all clients paused) would be measured
        # as the platform's latency (owlai.startup).
        from owlai.startup import freeze_startup_objects

        freeze_startup_objects()
        results = []
        for n in args.n:
            # Without scrapes first, then (same processes, new conversations) with them.
            for scrape_every in [0.0, args.metrics_cost] if args.metrics_cost else [0.0]:
                conversations = [conversation_create(owner=user).pk for _ in range(n)]
                pids = {name: proc.pid for name, proc in stack.procs.items()} | {"model": fake.pid}
                results.append(
                    measure(stack.port, cookie, conversations, args, admin_url, bench_db, pids, scrape_every)
                )
    except BaseException:
        print(stack.logs(), file=sys.stderr)
        raise
    finally:
        stack.close()
        fake.terminate()
        fake.wait(10)

    setup = f"{args.pool} pool, {args.workers} worker(s) x {args.concurrency}, model {args.delay:g}s"
    if args.db_pool:
        setup += f", DB pool {args.db_pool}"
    for r in results:
        print(
            f"N={r['n']}: {r['finished']}/{r['expected']} turns finished ({r['completed']} completed), "
            f"{r['rate']:.1f} turns/s, overhead p50 {r['p50']:.0f} ms, p95 {r['p95']:.0f} ms, p99 {r['p99']:.0f} ms, "
            f"(web start p50 {r['web_start_p50']:.0f} / p95 {r['web_start_p95']:.0f} ms, "
            f"waiting for a worker p50 {r['queue_p50']:.0f} / p95 {r['queue_p95']:.0f} ms, "
            f"worker time less the model p50 {r['work_p50']:.0f} / p95 {r['work_p95']:.0f} ms: "
            f"before the call {r['before_p50']:.0f} / {r['before_p95']:.0f}, "
            f"the call less the model {r['call_p50']:.0f} / {r['call_p95']:.0f}, "
            f"after the answer began {r['after_p50']:.0f} / {r['after_p95']:.0f} ms, "
            f"end to client p50 {r['relay_p50']:.0f} / p95 {r['relay_p95']:.0f} ms), "
            f"CPU per turn: web {r['cpu_web_ms']:.0f} ms, workers {r['cpu_workers_ms']:.0f} ms, "
            f"model/redis/beat {r['cpu_other_ms']:.0f} ms, PostgreSQL {r['cpu_db_ms']:.0f} ms, "
            f"clients {r['cpu_client_ms']:.0f} ms, "
            f"peak DB connections {r['peak_db']}{_scrape_note(r)}"
            f"{', refused: ' + ', '.join(r['errors']) if r['errors'] else ''} [{setup}]"
        )
    if args.metrics_cost:
        print(_metrics_cost(results, args.metrics_cost))
    print(
        "headline: "
        + "; ".join(
            f"N={r['n']} {r['rate']:.1f} turns/s, overhead p95 {r['p95']:.0f} ms, "
            f"{r['finished']}/{r['expected']} finished"
            for r in results
        )
        + f" [{setup}] (goal: N=50 p95 <= 500 ms; N=200 none stuck)"
    )


def _scrape_note(r: dict) -> str:
    if not r["scrape_every"]:
        return ", /metrics not scraped"
    return (
        f", /metrics scraped every {r['scrape_every']:g}s: {r['scrapes']} scrapes ({r['scrape_failures']} failed), "
        f"p50 {r['scrape_p50']:.0f} / p95 {r['scrape_p95']:.0f} ms, {r['scrape_bytes']} bytes"
    )


def _metrics_cost(results: list[dict], every: float) -> str:
    """Each N's runs without and with scrapes, side by side."""
    parts = []
    for without, with_ in zip(results[::2], results[1::2], strict=True):
        parts.append(
            f"N={without['n']}: overhead p50 {without['p50']:.0f} -> {with_['p50']:.0f} ms, "
            f"p95 {without['p95']:.0f} -> {with_['p95']:.0f} ms; CPU per turn web {without['cpu_web_ms']:.0f} -> "
            f"{with_['cpu_web_ms']:.0f} ms, PostgreSQL {without['cpu_db_ms']:.0f} -> {with_['cpu_db_ms']:.0f} ms; "
            f"one scrape p50 {with_['scrape_p50']:.0f} / p95 {with_['scrape_p95']:.0f} ms "
            f"({with_['scrapes']} in the run)"
        )
    return f"metrics cost (without -> with /metrics every {every:g}s): " + "; ".join(parts)


class _Scraper:
    """GET /metrics every `every` seconds from loopback (allowed by default:
    OWLAI_OPS_ALLOWED_NETWORKS), timing each answer."""

    def __init__(self, port: int, every: float) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every = every
        self.times: list[float] = []
        self.failures = 0
        self.size = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _Scraper:
        if self.every:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.every:
            self._thread.join()

    def _loop(self) -> None:
        import urllib.request

        while not self._stop.wait(self.every):
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=30) as response:
                    self.size = len(response.read())
                self.times.append((time.perf_counter() - started) * 1000)
            except OSError:
                self.failures += 1

    def figures(self) -> dict:
        times = sorted(self.times) or [float("nan")]
        return {
            "scrape_every": self.every,
            "scrapes": len(self.times),
            "scrape_failures": self.failures,
            "scrape_p50": statistics.median(times),
            "scrape_p95": times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))],
            "scrape_bytes": self.size,
        }


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """CPU time used so far by every PostgreSQL server process on this
    machine that this user may read (the postmaster's children come and go
    with connections: their time is summed while they live)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if "(postgres)" in text or "(postmaster)" in text:
            fields = text.rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(
    port: int,
    cookie: str,
    conversations: list,
    args,
    admin_url: str,
    bench_db: str,
    pids: dict[str, int],
    scrape_every: float = 0.0,
) -> dict:
    peak = [0]
    stop = threading.Event()

    def watch_connections() -> None:
        import psycopg

        with psycopg.connect(admin_url, autocommit=True) as conn:
            while not stop.wait(0.1):
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [bench_db]
                ).fetchone()
                peak[0] = max(peak[0], count - 1)  # less this bench's own session with Django

    if args.warm_up:
        # Not measured: the processes' first turns open their database
        # pools' connections, start the worker threads and fill lazy caches,
        # a cost paid once per process start, not per turn. What is measured
        # is the steady state a deployment runs in.
        warm = argparse.Namespace(**{**vars(args), "turns": 1})
        asyncio.run(_converse_all(port, cookie, conversations, warm))
    from django.utils import timezone

    since = timezone.now()
    watcher = threading.Thread(target=watch_connections, daemon=True)
    watcher.start()
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    db_before, client_before = postgres_cpu_seconds(), time.process_time()
    started = time.monotonic()
    try:
        with _Scraper(port, scrape_every) as scraper:
            outcomes = asyncio.run(_converse_all(port, cookie, conversations, args))
    finally:
        stop.set()
        watcher.join()
    wall = time.monotonic() - started
    # CPU per turn holds on a busy machine, where latencies do not: it says
    # what a turn costs each process, whatever else competes for the cores.
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    db_cpu, client_cpu = postgres_cpu_seconds() - db_before, time.process_time() - client_before
    latencies = [latency for status, latency in outcomes if status is not None and not status.startswith("error:")]
    errors = sorted({status for status, _ in outcomes if status and status.startswith("error:")})
    overheads = sorted(max(0.0, latency - args.delay) * 1000 for latency in latencies) or [float("nan")]

    def pct(p: float) -> float:
        return overheads[min(len(overheads) - 1, int(round(p / 100 * (len(overheads) - 1))))]

    phases = _phases(conversations, args.delay, since)
    turns = max(1, len(latencies))
    web = sum(v for k, v in cpu.items() if k.startswith("web"))
    workers = sum(v for k, v in cpu.items() if k.startswith("worker"))
    return {
        **phases,
        **scraper.figures(),
        "cpu_web_ms": web / turns * 1000,
        "cpu_workers_ms": workers / turns * 1000,
        "cpu_other_ms": (sum(cpu.values()) - web - workers) / turns * 1000,
        # PostgreSQL (every server process: this bench's database is the only busy one)
        # and this process (the clients), which compete for the same cores.
        "cpu_db_ms": db_cpu / turns * 1000,
        "cpu_client_ms": client_cpu / turns * 1000,
        "n": len(conversations),
        "expected": len(conversations) * args.turns,
        "finished": len(latencies),
        "completed": sum(status == "completed" for status, _ in outcomes),
        "rate": len(latencies) / wall,
        "p50": statistics.median(overheads),
        "p95": pct(95),
        "p99": pct(99),
        "peak_db": peak[0],
        "errors": errors,
    }


def _phases(conversations: list, delay: float, since) -> dict:
    """Where the overhead went, from the turns' own timestamps: waiting for a
    worker (created -> claimed) and the worker's own time less the model's
    (claimed -> finished - delay), split at the turn's stored events into
    before the model call (claimed -> `turn.accepted`), the call less the
    model's delay (-> first `message.delta`) and after the answer began
    (-> `turn.finished`); the rest of a client's latency is the web server and
    the socket."""
    from django.db.models import Max, Min, Q

    from chat.models import Turn

    queued, worked, before, call, after, web_start, relay = [], [], [], [], [], [], []
    measured = Turn.objects.filter(conversation_id__in=conversations, created_at__gte=since).annotate(
        accepted=Min("events__created_at", filter=Q(events__type="turn.accepted")),
        first_delta=Min("events__created_at", filter=Q(events__type="message.delta")),
        last_event=Max("events__created_at"),
    )
    rows = measured.values_list(
        "pk", "created_at", "started_at", "finished_at", "accepted", "first_delta", "last_event"
    )
    for pk, created, started, finished, accepted, first_delta, last_event in rows:
        sent_at, started_seen, finished_seen = CLIENT_TIMES.get(pk, (None, None, None))
        if sent_at and started_seen:
            web_start.append((started_seen - sent_at) * 1000)
        if finished_seen and last_event:
            relay.append((finished_seen - last_event.timestamp()) * 1000)
        if started and finished:
            queued.append((started - created).total_seconds() * 1000)
            worked.append(max(0.0, (finished - started).total_seconds() - delay) * 1000)
        if started and accepted and first_delta and last_event:
            before.append((accepted - started).total_seconds() * 1000)
            call.append(max(0.0, (first_delta - accepted).total_seconds() - delay) * 1000)
            after.append((last_event - first_delta).total_seconds() * 1000)

    def p(values: list[float], q: float) -> float:
        values = sorted(values) or [float("nan")]
        return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]

    return {
        "queue_p50": p(queued, 50),
        "queue_p95": p(queued, 95),
        "work_p50": p(worked, 50),
        "work_p95": p(worked, 95),
        "before_p50": p(before, 50),
        "before_p95": p(before, 95),
        "call_p50": p(call, 50),
        "call_p95": p(call, 95),
        "after_p50": p(after, 50),
        "after_p95": p(after, 95),
        "web_start_p50": p(web_start, 50),
        "web_start_p95": p(web_start, 95),
        "relay_p50": p(relay, 50),
        "relay_p95": p(relay, 95),
    }


# Wall-clock times the clients saw, per turn id: sent `turn.start`, got
# `turn.started` (the web process stored and handed over the turn), got the
# turn's end. Same machine, same clock as the database's timestamps.
CLIENT_TIMES: dict[int, tuple[float, float | None, float]] = {}

# A client that hears nothing for this long asks the server for the state.
IDLE_RESYNC_SECONDS = 5.0
_DONE = {"completed", "failed", "rejected"}


def _finished(frame: dict, last_turn: int) -> tuple[int, str] | None:
    """(turn id, status) when `frame` shows a turn after `last_turn` ended:
    its `turn.finished` event, or a `state` frame whose latest turn is done.
    An `error` frame answers the `turn.start` itself (refused, rate limited):
    that turn never started, and counts as not finished."""
    if frame.get("type") == "error":
        return last_turn, f"error:{frame.get('code')}"
    if frame.get("type") == "turn.finished" and (frame.get("turn_id") or 0) > last_turn:
        return frame["turn_id"], frame.get("status")
    turn = frame.get("turn") if frame.get("type") == "state" else None
    if isinstance(turn, dict) and (turn.get("turn_id") or 0) > last_turn and turn.get("status") in _DONE:
        return turn["turn_id"], turn["status"]
    return None


async def _converse_all(port: int, cookie: str, conversations: list, args) -> list[tuple[str | None, float]]:
    results = await asyncio.gather(*(_converse(port, cookie, cid, args) for cid in conversations))
    return [outcome for conversation in results for outcome in conversation]


async def _converse(port: int, cookie: str, conversation_id, args) -> list[tuple[str | None, float]]:
    """One conversation: its turns one after the other, as a user would. A
    turn not finished within --timeout is (None, timeout): stuck."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidMessage, InvalidStatus

    outcomes: list[tuple[str | None, float]] = []
    # As the chat page does: a handshake the server dropped (daphne closes a
    # socket whose consumer has not accepted within its connect timeout, as
    # happens when hundreds connect at once) is tried again after a backoff.
    for attempt in range(6):
        try:
            socket = await connect(
                f"ws://127.0.0.1:{port}/ws/chat/{conversation_id}/",
                additional_headers={"Cookie": f"sessionid={cookie}"},
                origin=f"http://127.0.0.1:{port}",
                open_timeout=60,
                max_size=None,
            )
            break
        except (OSError, EOFError, InvalidMessage, InvalidStatus, TimeoutError):
            if attempt == 5:
                raise
            await asyncio.sleep(0.5 * 2**attempt)
    async with socket as ws:
        # The server's first frame is the conversation's state: a turn in it
        # (the warm-up's) is not one of these.
        first = json.loads(await asyncio.wait_for(ws.recv(), args.timeout))
        turn = first.get("turn") if first.get("type") == "state" else None
        last_turn = (turn or {}).get("turn_id") or 0
        for i in range(args.turns):
            ref = uuid.uuid4().hex
            sent_at = time.time()
            await ws.send(json.dumps({"type": "turn.start", "text": f"고객이 몇 명이야? ({i})", "ref": ref}))
            sent = time.monotonic()
            started_at = None
            try:
                async with asyncio.timeout(args.timeout):
                    while True:
                        try:
                            frame = json.loads(await asyncio.wait_for(ws.recv(), IDLE_RESYNC_SECONDS))
                        except TimeoutError:
                            # Quiet for a while: the last event may have been
                            # dropped; the database says where the turn is.
                            await ws.send(json.dumps({"type": "sync"}))
                            continue
                        if frame.get("type") == "turn.started" and frame.get("ref") == ref:
                            started_at = time.time()
                        finished = _finished(frame, last_turn)
                        if finished:
                            last_turn, status = finished
                            outcomes.append((status, time.monotonic() - sent))
                            CLIENT_TIMES[last_turn] = (sent_at, started_at, time.time())
                            break
            except TimeoutError:
                outcomes.append((None, args.timeout))
                break
    return outcomes


if __name__ == "__main__":
    main()
