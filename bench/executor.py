"""Executor overhead per SQL call: visibility, read-only analysis, grant check,
the audit write and the result's post-processing (lineage against a schema
with personal-data columns, detectors) — the customer database execution
itself is excluded (replaced by a stub that returns each query's canned
result). A result with personal values, whose masking costs more (vault
lookups per value), is measured and reported on its own line.

Absolute times do not travel between machines, so the headline is a ratio
measured in the same run: the executor's overhead as a multiple of the work
it cannot avoid (the grant lookup round trip and the two durable audit
commits on the same database: the call's attempt, committed before the
customer database is contacted, and its outcome). It also reports the known-value pass (every original the
conversation's vault holds, replaced in the result) at vault sizes 10, 1,000
and 100,000: its cost must stay flat as the vault grows.

Usage: .venv/bin/python bench/executor.py [--calls N] [--sqlite] [--smoke]
Uses a throwaway PostgreSQL database when PostgreSQL is reachable (the
production profile), else a temporary SQLite file. Prints figures; the last
line is the headline. Goal: overhead p50 <= 2x the unavoidable work.
`--smoke` runs tiny sizes in seconds (the test suite runs it so the bench
cannot rot); its figures mean nothing.
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

# The headline mix: analytics over tables that hold personal data (the
# connection's schema is classified below), results without personal values.
# Each query comes with the result the stubbed database returns for it.
QUERIES: list[tuple[str, list[str], list[tuple]]] = [
    ("SELECT count(*) FROM customers", ["count"], [(1204,)]),
    (
        "SELECT c.city, sum(o.amount) FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.city",
        ["city", "sum"],
        [("서울", 1250000), ("부산", 830000), ("대구", 410000), ("인천", 390000), ("광주", 120000)],
    ),
    (
        "WITH recent AS (SELECT * FROM orders WHERE amount > 1000) SELECT customer_id, count(*) FROM recent GROUP BY 1",
        ["customer_id", "count"],
        [(1, 4), (2, 1), (3, 7), (5, 2), (8, 3)],
    ),
    (
        "SELECT city, count(*) AS n FROM customers WHERE city LIKE '서%' GROUP BY city ORDER BY n DESC LIMIT 10",
        ["city", "n"],
        [("서울", 512), ("서귀포", 12)],
    ),
    # Names a PII column (inside COUNT): the full lineage walk runs.
    (
        "SELECT c.city, count(DISTINCT c.phone) AS phones FROM customers c GROUP BY c.city",
        ["city", "phones"],
        [("서울", 498), ("부산", 201), ("대구", 97)],
    ),
]
# Reported on its own line: a result that carries personal values (names,
# masked whole through lineage, each a token from the conversation's vault).
PII_QUERY = (
    "SELECT c.name, count(*) AS refunds FROM customers c JOIN consultations k ON k.customer_id = c.id "
    "WHERE k.category = '환불' GROUP BY c.name HAVING count(*) > 3",
    ["name", "refunds"],
    [("김민준", 5), ("이서연", 4), ("박지후", 6), ("최유나", 4), ("정도윤", 7)],
)
# The analysed schema of the connection (as schema analysis would store it).
SCHEMA = {
    "customers": {"id": "", "name": "name", "phone": "phone", "email": "email", "city": "", "grade": ""},
    "orders": {"id": "", "customer_id": "", "amount": "", "status": "", "created_at": ""},
    "consultations": {"id": "", "customer_id": "", "category": "", "memo": "", "created_at": ""},
}
# Column types as schema analysis stores them, and the text columns it found
# to hold single short words only (`structured`: readable through functions);
# `memo` stays free text. Without types the executor would read them from the
# customer database, which the bench stubs.
TYPES = {"id": "integer", "customer_id": "integer", "amount": "numeric", "created_at": "timestamp"}
STRUCTURED = {"city", "grade", "status", "category"}


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
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: proves the bench still runs")
    args = parser.parse_args()
    if args.smoke:
        args.calls = 40

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
        run(args.calls, profile=args.profile, vault_sizes=(10, 100) if args.smoke else (10, 1_000, 100_000))
    finally:
        if bench_db:
            from django.db import connections

            connections.close_all()
            import psycopg

            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')


def run(calls: int, *, profile: bool = False, vault_sizes: tuple[int, ...] = (10, 1_000, 100_000)) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    import chat.executor as executor_module
    import chat.executor.tools.sql as sql_tool
    from chat.context import TurnContext
    from chat.services import conversation_create
    from governance.models import ColumnClassification, DbConnection, DbGrant, Role
    from governance.schema_analysis import REASONS
    from governance.sql.execute import QueryResult

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}")
    connection = DbConnection.objects.create(name="bench", engine="postgresql", dsn_env="OWLAI_BENCH_UNUSED")
    ColumnClassification.objects.bulk_create(
        ColumnClassification(
            connection=connection,
            table_name=table,
            column_name=column,
            pii_kind=kind,
            source="auto",
            state="confirmed",
            data_type=TYPES.get(column, "text"),
            reason=REASONS["structured"] if column in STRUCTURED else "",
        )
        for table, columns in SCHEMA.items()
        for column, kind in columns.items()
    )
    role = Role.objects.create(name=f"bench-{uuid.uuid4().hex[:6]}")
    role.users.add(user)
    DbGrant.objects.create(
        role=role, connection=connection, whole_database=False, tables=["customers", "orders", "consultations"]
    )
    os.environ["OWLAI_BENCH_UNUSED"] = "postgresql://unused"

    # Exclude the customer database: the stub answers at once with the
    # query's canned result.
    results = {sql: QueryResult(columns=columns, rows=rows, truncated=False) for sql, columns, rows in QUERIES}
    results[PII_QUERY[0]] = QueryResult(columns=PII_QUERY[1], rows=PII_QUERY[2], truncated=False)
    sql_tool.execute_readonly = lambda **kwargs: results[kwargs["sql"]]
    sql_tool.account_risks = lambda **kwargs: []  # the account check queries the customer DB too

    ctx = TurnContext(
        user_id=user.pk,
        username=user.username,
        tier="private",
        model_name="bench",
        provider_name="bench",
        conversation_id=conversation_create(owner=user).pk,
        turn_id=1,
    )
    arguments = [json.dumps({"connection": "bench", "sql": sql}) for sql, _, _ in QUERIES]
    for i in range(50):  # warm-up: imports, connection, parser caches
        executor_module.execute_tool_call(ctx, name="run_sql", arguments=arguments[i % len(arguments)])

    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    timings = timed_calls(executor_module, ctx, arguments, calls)
    if profiler is not None:
        import pstats

        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(int(os.environ.get("BENCH_TOP", "20")))
        if os.environ.get("BENCH_CALLERS"):  # e.g. BENCH_CALLERS=parse: who calls it, how often
            stats.print_callers(os.environ["BENCH_CALLERS"])
        if os.environ.get("BENCH_CALLEES"):  # e.g. BENCH_CALLEES=rows_read_pii: what it calls
            stats.print_callees(os.environ["BENCH_CALLEES"])
    pii_arguments = [json.dumps({"connection": "bench", "sql": PII_QUERY[0]})]
    pii_timings = timed_calls(executor_module, ctx, pii_arguments, max(calls // 4, 100))
    # The same query, but every call's 5 names are new to the conversation:
    # each call allocates 5 vault entries (encrypted) in one batch.
    serial = iter(range(10**9))
    sql_tool.execute_readonly = lambda **kwargs: QueryResult(
        columns=PII_QUERY[1], rows=[(f"고객{next(serial)}", 4) for _ in PII_QUERY[2]], truncated=False
    )
    new_value_timings = timed_calls(executor_module, ctx, pii_arguments, max(calls // 4, 100))
    p50, p99 = percentiles(timings)
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"app database: {engine}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    components = component_medians(ctx, user.pk, min(calls, 500))
    for label, median in components:
        print(f"component p50 {label}: {median:.3f} ms")
    for size, build_ms, refresh_ms, pass_ms in known_value_pass(vault_sizes):
        print(
            f"known-value pass, vault of {size:>7,} values: {pass_ms:.4f} ms per result "
            f"(automaton built once per conversation and process: {build_ms:.1f} ms; refresh query {refresh_ms:.3f} ms)"
        )
    pii_p50, pii_p99 = percentiles(pii_timings)
    print(
        f"with personal values in the result ({len(PII_QUERY[2])} names already in the conversation's vault): "
        f"p50 {pii_p50:.3f} ms, p99 {pii_p99:.3f} ms over {len(pii_timings)} calls"
    )
    new_p50, new_p99 = percentiles(new_value_timings)
    print(
        f"the same with {len(PII_QUERY[2])} names new to the conversation on every call (vault allocation): "
        f"p50 {new_p50:.3f} ms, p99 {new_p99:.3f} ms over {len(new_value_timings)} calls"
    )
    print(f"calls: {calls} ({len(QUERIES)} queries in turn, schema with personal-data columns)")
    print(f"mean: {statistics.fmean(timings):.3f} ms, min: {timings[0]:.3f} ms, max: {timings[-1]:.3f} ms")
    unavoidable = dict(components)[UNAVOIDABLE]
    print(f"executor overhead per run_sql call: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    print(
        f"unavoidable work (grant lookup round trip + durable attempt and outcome commits): p50 {unavoidable:.3f} ms; "
        f"overhead p50 = {p50 / unavoidable:.2f}x, p99 = {p99 / unavoidable:.2f}x the unavoidable work (goal: <= 2x)"
    )


def timed_calls(executor_module, ctx, arguments: list[str], calls: int) -> list[float]:
    timings = []
    for i in range(calls):
        started = time.perf_counter()
        result = executor_module.execute_tool_call(ctx, name="run_sql", arguments=arguments[i % len(arguments)])
        timings.append((time.perf_counter() - started) * 1000)
        assert result.outcome == "success", result.content
    timings.sort()
    return timings


def percentiles(sorted_timings: list[float]) -> tuple[float, float]:
    return statistics.median(sorted_timings), sorted_timings[int(len(sorted_timings) * 0.99) - 1]


UNAVOIDABLE = "unavoidable: grant lookup + durable attempt commit + durable outcome commit"


def known_value_pass(sizes: tuple[int, ...]) -> list[tuple[int, float, float, float]]:
    """(vault size, automaton build ms, refresh query ms, pass ms per result)
    for vaults of random names and phone numbers, over a result of 5 rows x 3
    string cells of which one holds a vaulted name."""
    import random

    from django.contrib.auth import get_user_model

    from chat.services import conversation_create
    from chat.vault import DbVault
    from governance.pii.known_values import KnownValues
    from governance.pii.masking import format_token

    rng = random.Random(7)
    syllables = [chr(c) for c in range(0xAC00, 0xAC00 + 2000)]
    out = []
    for size in sizes:
        triples = []
        seen = set()
        while len(triples) < size:
            if len(triples) % 2:
                value, kind = f"010-{rng.randrange(1000, 10000)}-{rng.randrange(10000):04d}", "phone"
            else:
                value, kind = "".join(rng.choices(syllables, k=3)), "name"
            if value not in seen:
                seen.add(value)
                triples.append((value, kind, format_token(kind, len(triples) + 1)))
        started = time.perf_counter()
        known = KnownValues(triples)
        build_ms = (time.perf_counter() - started) * 1000
        name = triples[0][0]
        cells = [[f"{name} 고객 상담", "서울 강남구", "환불 요청"], ["이번 달 주문", "부산", "배송 지연 문의"]] * 3
        cells = cells[:5]
        samples = []
        for _ in range(2000):
            started = time.perf_counter()
            for row in cells:
                for cell in row:
                    known.replace(cell)
            samples.append((time.perf_counter() - started) * 1000)
        # The per-call refresh of the DB vault's cached matcher (no new rows).
        user = get_user_model().objects.create_user(f"bench-kv-{uuid.uuid4().hex[:6]}")
        vault = DbVault(conversation_create(owner=user).pk)
        vault.known_values()
        refresh = []
        for _ in range(200):
            started = time.perf_counter()
            vault.known_values()
            refresh.append((time.perf_counter() - started) * 1000)
        out.append((size, build_ms, statistics.median(refresh), statistics.median(samples)))
    return out


def component_medians(ctx, user_id: int, calls: int) -> list[tuple[str, float]]:
    """Where the time goes: each step of the executor on its own."""
    from audit.services import tool_call_audit_write, tool_call_outcome_write
    from chat.executor import mask_sql_rows, vault_for
    from governance.sql.guard import analyse_sql
    from governance.visibility import db_access

    def query(i: int) -> tuple[str, list[str], list[tuple]]:
        return QUERIES[i % len(QUERIES)]

    access = db_access(user_id=user_id, tier="private", connection_name="bench")
    assert access is not None
    steps = {
        "read-only analysis (sqlglot)": lambda i: analyse_sql(query(i)[0], "postgres"),
        "visibility + grant lookup (1 query)": lambda i: db_access(
            user_id=user_id, tier="private", connection_name="bench"
        ),
        UNAVOIDABLE: lambda i: (
            db_access(user_id=user_id, tier="private", connection_name="bench"),
            tool_call_outcome_write(
                attempt=tool_call_audit_write(
                    actor_id=user_id,
                    actor_username=ctx.username,
                    tool="run_sql",
                    outcome="started",
                    sql_text=query(i)[0],
                    tables=["customers"],
                    conversation_id=ctx.conversation_id,
                    turn_id=1,
                ),
                outcome="success",
                row_count=1,
            ),
        ),
        "audit row write (durable commit)": lambda i: tool_call_audit_write(
            actor_id=user_id,
            actor_username=ctx.username,
            tool="run_sql",
            outcome="success",
            row_count=1,
            sql_text=query(i)[0],
            tables=["customers"],
            conversation_id=ctx.conversation_id,
            turn_id=1,
        ),
        "result masking (lineage + detectors)": lambda i: mask_sql_rows(
            ctx,
            access.connection,
            query(i)[0],
            query(i)[1],
            [list(row) for row in query(i)[2]],
            vault_for(ctx),
            revision=access.classification_revision,
        ),
    }
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
