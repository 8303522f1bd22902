"""Executor overhead per SQL call: visibility, read-only analysis, grant check
and the audit write — the customer database execution itself is excluded
(replaced by a stub that returns a fixed result).

Usage: .venv/bin/python bench/executor.py [--calls N] [--sqlite]
Uses a throwaway PostgreSQL database when PostgreSQL is reachable (the
production profile), else a temporary SQLite file. Prints figures; the last
line is the headline (p50 / p99 in ms). Goal: p50 <= 2 ms, p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUERIES = [
    "SELECT count(*) FROM customers",
    "SELECT c.name, sum(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.name",
    "WITH recent AS (SELECT * FROM orders WHERE amount > 1000) SELECT customer_id, count(*) FROM recent GROUP BY 1",
    "SELECT city, count(*) AS n FROM customers WHERE city LIKE '서%' GROUP BY city ORDER BY n DESC LIMIT 10",
]


def pg_reachable() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--sqlite", action="store_true", help="force the embedded SQLite profile")
    parser.add_argument("--profile", action="store_true", help="print where the time goes (cProfile) to stderr")
    args = parser.parse_args()

    bench_db = None
    admin_url = os.environ.get("OWLAI_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    if not args.sqlite and pg_reachable():
        import psycopg

        bench_db = f"owlai_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{bench_db}"')
        os.environ["DATABASE_URL"] = (
            admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgres://") + f"/{bench_db}"
        )
        os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
        os.environ.setdefault("SECRET_KEY", "bench")
    else:
        os.environ.pop("DATABASE_URL", None)
        os.environ.pop("REDIS_URL", None)
        os.environ["OWLAI_SQLITE_PATH"] = str(Path(tempfile.mkdtemp()) / "bench.sqlite3")
    os.environ["DJANGO_SETTINGS_MODULE"] = "owlai.settings"
    try:
        run(args.calls, profile=args.profile)
    finally:
        if bench_db:
            from django.db import connections

            connections.close_all()
            import psycopg

            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')


def run(calls: int, *, profile: bool = False) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    import chat.executor as executor_module
    from chat.context import TurnContext
    from chat.db_exec import QueryResult
    from governance.models import DbConnection, DbGrant, Role

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}")
    connection = DbConnection.objects.create(name="bench", engine="postgresql", dsn_env="OWLAI_BENCH_UNUSED")
    role = Role.objects.create(name=f"bench-{uuid.uuid4().hex[:6]}")
    role.users.add(user)
    DbGrant.objects.create(role=role, connection=connection, whole_database=False, tables=["customers", "orders"])
    os.environ["OWLAI_BENCH_UNUSED"] = "postgresql://unused"

    # Exclude the customer database: the stub returns at once.
    fixed = QueryResult(columns=["n"], rows=[(1,)], truncated=False)
    executor_module.execute_readonly = lambda **kwargs: fixed

    ctx = TurnContext(
        user_id=user.pk,
        username=user.username,
        tier="private",
        model_name="bench",
        provider_name="bench",
        conversation_id=uuid.uuid4(),
        turn_id=1,
    )
    arguments = [json.dumps({"connection": "bench", "sql": q}) for q in QUERIES]
    for i in range(50):  # warm-up: imports, connection, parser caches
        executor_module.execute_tool_call(ctx, name="run_sql", arguments=arguments[i % len(arguments)])

    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    timings = []
    for i in range(calls):
        started = time.perf_counter()
        result = executor_module.execute_tool_call(ctx, name="run_sql", arguments=arguments[i % len(arguments)])
        timings.append((time.perf_counter() - started) * 1000)
        assert result.outcome == "success", result.content
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    timings.sort()
    p50 = statistics.median(timings)
    p99 = timings[int(len(timings) * 0.99) - 1]
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"app database: {engine}")
    for label, median in component_medians(ctx, user.pk, min(calls, 500)):
        print(f"component p50 {label}: {median:.3f} ms")
    print(f"calls: {calls}")
    print(f"mean: {statistics.fmean(timings):.3f} ms, min: {timings[0]:.3f} ms, max: {timings[-1]:.3f} ms")
    print(f"executor overhead per run_sql call: p50 {p50:.3f} ms, p99 {p99:.3f} ms (goal: p50 <= 2 ms, p99 <= 5 ms)")


def component_medians(ctx, user_id: int, calls: int) -> list[tuple[str, float]]:
    """Where the time goes: each step of the executor on its own."""
    from audit.services import tool_call_audit_write
    from governance.sql_guard import analyse_sql
    from governance.visibility import db_access

    steps = {
        "read-only analysis (sqlglot)": lambda i: analyse_sql(QUERIES[i % len(QUERIES)], "postgres"),
        "visibility + grant lookup (1 query)": lambda i: db_access(
            user_id=user_id, tier="private", connection_name="bench"
        ),
        "audit row write (durable commit)": lambda i: tool_call_audit_write(
            actor_id=user_id,
            actor_username=ctx.username,
            tool="run_sql",
            outcome="success",
            row_count=1,
            sql_text=QUERIES[i % len(QUERIES)],
            tables=["customers"],
            conversation_id=ctx.conversation_id,
            turn_id=1,
        ),
    }
    from chat.executor import mask_sql_rows, vault_for
    from governance.models import DbConnection

    connection = DbConnection.objects.get(name="bench")
    steps["result masking (lineage + detectors)"] = lambda i: mask_sql_rows(
        ctx, connection, QUERIES[i % len(QUERIES)], ["n"], [[1]], vault_for(ctx)
    )
    medians = []
    for label, step in steps.items():
        samples = []
        for i in range(calls):
            started = time.perf_counter()
            step(i)
            samples.append((time.perf_counter() - started) * 1000)
        medians.append((label, statistics.median(samples)))
    return medians


if __name__ == "__main__":
    main()
