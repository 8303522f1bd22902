"""Audit admin screens on a big table: the SQL execution history changelist,
its filters and searches, and the capped CSV export, over 1,000,000 tool-call
records.

Usage: .venv/bin/python bench/audit_admin.py [--rows N] [--repeat N] [--no-experiments]
Needs PostgreSQL (127.0.0.1:5432, or OWLAI_BENCH_PG_ADMIN_URL) and Redis. Creates
a throwaway database, fills audit_toolcallaudit with COPY (fixed seed), requests
the admin pages through django.test.Client as a superuser (every list view also
writes its AuditEvent, as in production), prints the median / min / max per
request, EXPLAIN (ANALYZE, BUFFERS) summaries of the SQL behind each, and then
(unless --no-experiments) the same figures with candidate fixes applied inside
the throwaway database / process only. Drops the database at the end.
Goals: first page <= 200 ms, searches <= 500 ms, 5,000-row export <= 1 s.
The last line is the headline (baseline medians, schema as migrated).
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import os
import random
import re
import socket
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEED = 20240501
USERS = 50
RARE_TOKEN = "refund_2024_audit"
VERY_RARE_TOKEN = "payroll_check_0925"  # appended to 0.01% of run_sql rows
VERY_RARE_SHARE = 0.0001
NO_MATCH_TOKEN = "refund_2031_audit"  # same trigrams but one, in no row
EXPORT_CAP = 5000

LIST_URL = "/admin/audit/sqlexecution/"
EXPORT_URL = "/admin/audit/sqlexecution/export/"
# (key, label, url, goal in ms)
SCENARIOS = [
    ("page", "first page", LIST_URL, 200),
    ("filter", "filter user07+denied+365d", LIST_URL + "?user=user07&outcome=denied&period=365d", 500),
    ("q_rare", f"search q={RARE_TOKEN} (rare)", LIST_URL + f"?q={RARE_TOKEN}", 500),
    ("q_common", "search q=customers (common)", LIST_URL + "?q=customers", 500),
    ("q_very_rare", f"search q={VERY_RARE_TOKEN} (very rare, extra)", LIST_URL + f"?q={VERY_RARE_TOKEN}", 500),
    ("q_none", f"search q={NO_MATCH_TOKEN} (no match, extra)", LIST_URL + f"?q={NO_MATCH_TOKEN}", 500),
    ("export", "CSV export outcome=success", EXPORT_URL + "?outcome=success", 1000),
]

# Table name -> weight (how often analysts touch it) and a few columns.
TABLES: dict[str, tuple[int, list[str]]] = {
    "customers": (30, ["name", "city", "segment", "joined_at", "grade"]),
    "orders": (26, ["customer_id", "amount", "status", "ordered_at", "channel"]),
    "order_items": (10, ["order_id", "product_id", "quantity", "unit_price"]),
    "consultations": (8, ["customer_id", "counselor", "topic", "started_at", "duration_min"]),
    "salaries": (3, ["employee_id", "base_pay", "bonus", "paid_at"]),
    "products": (14, ["name", "category", "price", "launched_at"]),
    "refunds": (6, ["order_id", "amount", "reason", "refunded_at", "batch"]),
    "payments": (9, ["order_id", "method", "amount", "paid_at"]),
    "invoices": (5, ["customer_id", "total", "issued_at", "due_at"]),
    "employees": (5, ["name", "department_id", "hired_at", "title"]),
    "departments": (3, ["name", "head_id", "cost_center"]),
    "suppliers": (3, ["name", "country", "rating"]),
    "inventory": (6, ["product_id", "warehouse_id", "on_hand", "counted_at"]),
    "shipments": (6, ["order_id", "carrier", "shipped_at", "delivered_at"]),
    "returns": (3, ["order_id", "reason", "returned_at"]),
    "campaigns": (3, ["name", "channel", "budget", "started_at"]),
    "leads": (3, ["campaign_id", "source", "score", "created_at"]),
    "contracts": (2, ["customer_id", "value", "signed_at", "ends_at"]),
    "subscriptions": (4, ["customer_id", "plan", "started_at", "cancelled_at"]),
    "tickets": (5, ["customer_id", "priority", "opened_at", "closed_at"]),
    "branches": (2, ["name", "region_id", "opened_at"]),
    "regions": (2, ["name", "manager_id"]),
    "stores": (3, ["name", "branch_id", "area_m2"]),
    "sales_daily": (7, ["store_id", "sales_date", "revenue", "visitors"]),
    "coupons": (2, ["code", "discount", "expires_at"]),
    "reviews": (3, ["product_id", "rating", "written_at"]),
    "warehouses": (2, ["name", "city", "capacity"]),
    "accounts": (2, ["customer_id", "balance", "opened_at"]),
    "transactions": (4, ["account_id", "amount", "booked_at", "kind"]),
    "budgets": (2, ["department_id", "year", "amount"]),
}
CONNECTIONS = [
    "erp-main",
    "crm",
    "dw-sales",
    "hr",
    "billing",
    "support",
    "marketing",
    "logistics",
    "finance-ro",
    "store-pos",
]


def pg_reachable() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000, help="tool-call records to load")
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per scenario (after 1 warm-up)")
    parser.add_argument("--no-experiments", action="store_true", help="baseline only, no candidate fixes")
    parser.add_argument(
        "--profile", metavar="SCENARIO", choices=[key for key, *_rest in SCENARIOS], help="cProfile one request"
    )
    args = parser.parse_args()
    if args.repeat < 5:
        parser.error("--repeat must be at least 5")
    if not pg_reachable():
        sys.exit("PostgreSQL is not reachable at 127.0.0.1:5432: this bench needs the production profile")

    import psycopg

    admin_url = os.environ.get("OWLAI_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    bench_db = f"owlai_bench_audit_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{bench_db}"')
    os.environ["DATABASE_URL"] = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgres://") + f"/{bench_db}"
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    os.environ.setdefault("SECRET_KEY", "bench")
    os.environ["OWLAI_DB_ROLE_CHECK"] = "0"  # the bench connects as a superuser
    os.environ["DJANGO_SETTINGS_MODULE"] = "owlai.settings"
    try:
        run(args.rows, args.repeat, experiments=not args.no_experiments, profile=args.profile)
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: BLE001 - dropping the database matters more
            pass
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')
        print(f"dropped database {bench_db}", file=sys.stderr)


# --- data ------------------------------------------------------------------


class SqlMaker:
    """Varied, realistic read-only SELECTs and the tables they read."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.names = list(TABLES)
        self.weights = [TABLES[name][0] for name in self.names]

    def _tables(self, n: int) -> list[str]:
        chosen: list[str] = []
        while len(chosen) < n:
            name = self.rng.choices(self.names, self.weights)[0]
            if name not in chosen:
                chosen.append(name)
        return chosen

    def _date(self) -> str:
        return f"2024-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"

    def _col(self, table: str) -> str:
        return self.rng.choice(TABLES[table][1])

    def make(self, rare: bool) -> tuple[str, list[str]]:
        rng = self.rng
        kind = rng.randrange(8)
        if kind == 0:
            (t,) = self._tables(1)
            sql = f"SELECT count(*) AS n FROM {t} WHERE {self._col(t)} IS NOT NULL AND id > {rng.randint(1, 99999)}"
            tables = [t]
        elif kind == 1:
            (t,) = self._tables(1)
            c1, c2 = self._col(t), self._col(t)
            limit = rng.choice((10, 20, 50, 100))
            sql = (
                f"SELECT id, {c1}, {c2} FROM {t} WHERE {c1} = {rng.randint(1, 99999)} ORDER BY {c2} DESC LIMIT {limit}"
            )
            tables = [t]
        elif kind == 2:
            a, b = self._tables(2)
            c = self._col(a)
            sql = (
                f"SELECT a.{c}, sum(b.id) AS total FROM {a} a JOIN {b} b ON b.{a.rstrip('s')}_id = a.id "
                f"WHERE a.id > {rng.randint(1, 5000)} GROUP BY a.{c} "
                f"ORDER BY total DESC LIMIT {rng.choice((10, 20, 50))}"
            )
            tables = [a, b]
        elif kind == 3:
            a, b, c = self._tables(3)
            d1 = self._date()
            sql = (
                f"WITH recent AS (SELECT * FROM {b} WHERE {self._col(b)} >= '{d1}')\n"
                f"SELECT x.{self._col(a)}, count(*) AS n, avg(r.id) AS avg_id\n"
                f"FROM {a} x JOIN recent r ON r.{a.rstrip('s')}_id = x.id\n"
                f"LEFT JOIN {c} z ON z.id = r.{c.rstrip('s')}_id\n"
                f"GROUP BY 1 HAVING count(*) > {rng.randint(1, 50)} ORDER BY n DESC LIMIT 100"
            )
            tables = [a, b, c]
        elif kind == 4:
            (t,) = self._tables(1)
            status = rng.choice(("'open', 'pending'", "'paid'", "'cancelled', 'refunded'", "'active'"))
            sql = f"SELECT * FROM {t} WHERE status IN ({status}) LIMIT 100"
            tables = [t]
        elif kind == 5:
            (t,) = self._tables(1)
            c = self._col(t)
            sql = (
                f"SELECT date_trunc('month', created_at) AS month, count(*), sum({c}) FROM {t} "
                f"WHERE created_at BETWEEN '{self._date()}' AND '{self._date()}' GROUP BY 1 ORDER BY 1"
            )
            tables = [t]
        elif kind == 6:
            a, b = self._tables(2)
            sql = (
                f"SELECT {a}.{self._col(a)}, {b}.{self._col(b)} FROM {a} JOIN {b} ON {b}.id = {a}.id "
                f"WHERE {a}.id IN (SELECT id FROM {a} ORDER BY id DESC LIMIT {rng.randint(10, 500)})"
            )
            tables = [a, b]
        else:
            (t,) = self._tables(1)
            c = self._col(t)
            city = rng.choice(("서울", "부산", "대구", "인천", "광주", "대전"))
            sql = f"SELECT {c}, count(*) AS n FROM {t} WHERE city LIKE '{city}%' GROUP BY {c} ORDER BY n DESC LIMIT 10"
            tables = [t]
        if rare:
            sql += f" /* {RARE_TOKEN} */" if rng.random() < 0.5 else f" UNION ALL SELECT NULL, '{RARE_TOKEN}'"
            if "refunds" not in tables:
                sql = f"SELECT batch FROM refunds WHERE batch = '{RARE_TOKEN}' AND id IN ({sql})"
                tables = ["refunds", *tables]
        return sql[:400], tables


# Distinct statements the rows draw from: analysts rerun and tweak the same
# queries. Statements are written in Python (fixed seed) and COPY'd into a
# pool; the million rows are then generated server-side by one INSERT ...
# SELECT over generate_series (setseed: the same data every run), which takes
# seconds where a per-row Python loop takes most of a minute.
SQL_POOL = 40_000
RARE_POOL = 200
RARE_SHARE = 0.001
USER_SLOTS = 1000  # weighted user pick: an equi-join on floor(random() * slots)

INSERT_ROWS = f"""
INSERT INTO audit_toolcallaudit (
    created_at, actor_id, actor_username, tool, resource_kind, resource_id, resource_name, outcome, reason,
    row_count, sql_text, sql_truncated, tables, origin, origin_ref, conversation_id, turn_id, duration_ms)
SELECT
    now() - interval '1095 days' * (1 - r.g::float8 / %(rows)s) + interval '1 second' * floor(r.r9 * 30),
    u.actor_id, u.username,
    CASE WHEN r.is_sql THEN 'run_sql' ELSE 'search_documents' END,
    CASE WHEN r.is_sql THEN 'db_connection' ELSE 'document_collection' END,
    CASE WHEN r.is_sql THEN 1 + floor(r.r2 * 10) ELSE 1 + floor(r.r2 * 5) END,
    CASE WHEN r.is_sql THEN (%(connections)s::text[])[1 + floor(r.r2 * 10)::int]
         ELSE (ARRAY['manuals', 'policies', 'contracts-docs', 'faq', 'minutes'])[1 + floor(r.r2 * 5)::int] END,
    CASE WHEN r.r4 < 0.85 THEN 'success' WHEN r.r4 < 0.95 THEN 'denied' ELSE 'failed' END,
    CASE WHEN r.r4 < 0.85 THEN ''
         WHEN r.r4 < 0.95 THEN (ARRAY[
             'table ' || coalesce(p.first_table, 'documents') || ' is not granted to your roles',
             'statement is not read-only', 'connection is not visible to you'])[1 + floor(r.r5 * 3)::int]
         ELSE (ARRAY[
             'statement timeout (30 s)', 'column does not exist', 'connection refused'])[1 + floor(r.r5 * 3)::int]
    END,
    CASE WHEN r.r4 < 0.85 THEN floor(r.r6 * 5000)::int END,
    CASE WHEN r.r10 < {VERY_RARE_SHARE} THEN left(p.sql_text, 370) || ' /* {VERY_RARE_TOKEN} */'
         ELSE coalesce(p.sql_text, '') END,
    false, coalesce(p.tables, '[]'::jsonb),
    CASE WHEN r.r7 < 0.05 THEN 'playbook' ELSE 'chat' END,
    CASE WHEN r.r7 < 0.05 THEN 'pb-' || (1 + floor(r.r8 * 40)) ELSE '' END,
    md5(u.username || '/' || (r.g / 6))::uuid, 1 + r.g %% 6,
    round(exp(3.5 + (r.r6 + r.r8 + r.r9 - 1.5) * 2)::numeric, 1)
FROM (
    SELECT g, random() < 0.9 AS is_sql, random() < {RARE_SHARE} AS rare, floor(random() * {USER_SLOTS})::int AS slot,
           random() AS r2, random() AS r3, random() AS r4, random() AS r5, random() AS r6, random() AS r7,
           random() AS r8, random() AS r9, random() AS r10
    FROM generate_series(1, %(rows)s) AS g
) AS r
JOIN bench_user_slots u ON u.slot = r.slot
LEFT JOIN bench_sql_pool p ON r.is_sql AND p.rare = r.rare
    AND p.n = floor(r.r3 * CASE WHEN r.rare THEN {RARE_POOL} ELSE {SQL_POOL} END)::int
ORDER BY r.g
"""


def fill_pools(cursor, first_actor_id: int) -> None:
    rng = random.Random(SEED)
    maker = SqlMaker(rng)
    cursor.execute(
        "CREATE TEMP TABLE bench_sql_pool (n int, rare bool, sql_text text, tables jsonb, first_table text, "
        "PRIMARY KEY (rare, n))"
    )
    with cursor.copy("COPY bench_sql_pool (n, rare, sql_text, tables, first_table) FROM STDIN") as copy:
        for rare, size in ((False, SQL_POOL), (True, RARE_POOL)):
            for n in range(size):
                sql, tables = maker.make(rare=rare)
                copy.write_row((n, rare, sql, json.dumps(tables), tables[0]))
    # A few heavy users, a long tail: user i gets slots in proportion to its weight.
    weights = [1.0 / (1 + i % 17) for i in range(USERS)]
    bounds = [round(b * USER_SLOTS / sum(weights)) for b in itertools.accumulate(weights)]
    cursor.execute("CREATE TEMP TABLE bench_user_slots (slot int PRIMARY KEY, actor_id bigint, username text)")
    with cursor.copy("COPY bench_user_slots FROM STDIN") as copy:
        user = 0
        for slot in range(USER_SLOTS):
            while slot >= bounds[user]:
                user += 1
            copy.write_row((slot, first_actor_id + user, f"user{user + 1:02d}"))
    cursor.execute("ANALYZE bench_sql_pool")
    cursor.execute("ANALYZE bench_user_slots")


def load(rows: int, first_actor_id: int) -> None:
    """Insert the records with the table's secondary indexes dropped, then
    rebuild them with their migrated definitions (much faster than keeping a
    trigram GIN index up to date row by row)."""
    from django.db import connection

    connection.ensure_connection()
    raw = connection.connection  # the psycopg connection behind Django's (autocommit)
    with raw.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'audit_toolcallaudit' "
            "AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = 'audit_toolcallaudit'::regclass)"
        )
        indexes = cursor.fetchall()
        for name, _definition in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        started = time.perf_counter()
        fill_pools(cursor, first_actor_id)
        pooled = time.perf_counter() - started
        started = time.perf_counter()
        cursor.execute("SET work_mem = '256MB'")
        cursor.execute("SELECT setseed(0.4242)")
        cursor.execute(INSERT_ROWS, {"rows": rows, "connections": CONNECTIONS})
        cursor.execute("RESET work_mem")
        inserted = time.perf_counter() - started
        cursor.execute("DROP TABLE bench_sql_pool, bench_user_slots")
        timings = []
        cursor.execute("SET maintenance_work_mem = '1GB'")
        for name, definition in indexes:
            started = time.perf_counter()
            cursor.execute(definition)
            timings.append(f"{name} {time.perf_counter() - started:.1f} s")
        cursor.execute("RESET maintenance_work_mem")
        started = time.perf_counter()
        cursor.execute("VACUUM ANALYZE audit_toolcallaudit")
        vacuumed = time.perf_counter() - started
        cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('audit_toolcallaudit'))")
        size = cursor.fetchone()[0]
    print(
        f"load: {SQL_POOL + RARE_POOL:,} statements written {pooled:.1f} s; {rows:,} rows inserted {inserted:.1f} s; "
        f"VACUUM ANALYZE {vacuumed:.1f} s; table + indexes {size}"
    )
    print(f"load: indexes rebuilt as migrated: {', '.join(timings)}")


def describe_data() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE tool = 'run_sql'), count(*) FILTER (WHERE outcome = 'success'), "
            "count(*) FILTER (WHERE outcome = 'denied'), count(*) FILTER (WHERE outcome = 'failed'), "
            "min(length(sql_text)) FILTER (WHERE tool = 'run_sql'), max(length(sql_text)), "
            "round(avg(length(sql_text)) FILTER (WHERE tool = 'run_sql')), min(created_at), max(created_at) "
            "FROM audit_toolcallaudit"
        )
        run_sql, success, denied, failed, min_len, max_len, avg_len, oldest, newest = cursor.fetchone()
        cursor.execute(
            "SELECT count(*) FILTER (WHERE UPPER(sql_text) LIKE %s), count(*) FILTER (WHERE UPPER(sql_text) LIKE %s), "
            "count(*) FILTER (WHERE UPPER(sql_text) LIKE '%%CUSTOMERS%%'), "
            "count(*) FILTER (WHERE tables @> '[\"customers\"]'::jsonb), "
            "count(*) FILTER (WHERE actor_username = 'user07' AND outcome = 'denied' "
            "AND created_at >= now() - interval '365 days') "
            "FROM audit_toolcallaudit WHERE tool = 'run_sql'",
            [f"%{RARE_TOKEN.upper()}%", f"%{VERY_RARE_TOKEN.upper()}%"],
        )
        rare, very_rare, common_text, common_tables, user07 = cursor.fetchone()
    print(
        f"data: run_sql {run_sql:,}; success {success:,} / denied {denied:,} / failed {failed:,}; "
        f"sql_text {min_len}-{max_len} chars (avg {avg_len}); {oldest:%Y-%m-%d} .. {newest:%Y-%m-%d}"
    )
    print(
        f"data: matches among run_sql rows: {RARE_TOKEN!r} {rare:,}; {VERY_RARE_TOKEN!r} {very_rare:,}; "
        f"'customers' {common_text:,} in text / {common_tables:,} in tables; user07+denied+365d {user07:,}"
    )


# --- measuring -------------------------------------------------------------


class Recorder:
    """Every statement a request runs, with its parameters and time (an
    execute wrapper: CaptureQueriesContext loses them when request_started
    resets connection.queries)."""

    def __init__(self) -> None:
        self.queries: list[tuple[str, object, float]] = []

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.queries.append((sql, params, (time.perf_counter() - started) * 1000))


def request(client, url: str, key: str) -> bytes:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    if key == "export":
        body = b"".join(response.streaming_content)
        response.close()
        return body
    return response.content


def check(key: str, body: bytes) -> str:
    if key == "export":
        rows = list(csv.reader(io.StringIO(body.decode("utf-8-sig"), newline="")))
        data, note = rows[1:-1], rows[-1]
        assert len(data) == EXPORT_CAP, len(data)
        assert note and note[0].startswith("# export cut"), note
        return f"{len(data):,} data rows + cut note, {len(body) / 1e6:.1f} MB"
    rows = body.count(b'class="field-created_at')
    assert rows > 0 or key == "q_none", key
    assert rows == 0 or key != "q_none", key
    return f"{rows} rows on the page"


def summarise_plan(lines: list[str]) -> tuple[str, str, str]:
    """Top node, the scan nodes (rows out / removed by filter or recheck), execution time."""
    nodes: list[list[str]] = []
    for line in lines[1:]:
        text = line.strip()
        if text.startswith("->"):
            nodes.append([text[2:].strip()])
        elif nodes:
            nodes[-1].append(text)
    scans = []
    for node, *details in nodes:
        if "Scan" not in node:
            continue
        name = node.split("  (")[0]
        estimate = re.search(r"cost=[\d.]+\.\.[\d.]+ rows=(\d+)", node)
        actual = re.search(r"actual time=[\d.]+\.\.([\d.]+) rows=(\d+) loops=(\d+)", node)
        note = f" rows={actual.group(2)}" if actual else ""
        note += f" (est {estimate.group(1)})" if estimate else ""
        for detail in details:
            if detail.startswith(("Rows Removed by Filter", "Rows Removed by Index Recheck", "Heap Blocks")):
                note += f", {detail}"
        scans.append(name + note)
    execution = next((line.strip() for line in lines if line.startswith("Execution Time")), "")
    return lines[0].split("  (")[0], "; ".join(scans), execution


def query_kind(sql: str) -> str:
    upper = sql.upper()
    if upper.startswith("SELECT COUNT(*)"):
        return "COUNT (capped)" if "LIMIT" in upper else "COUNT"
    if 'AS "A"' in upper and upper.endswith("LIMIT 1"):
        return "EXISTS"
    if upper.endswith("LIMIT 5001"):
        return "export rows"
    if upper.endswith("LIMIT 50"):
        return "page rows"
    return "other"


def explain(recorded: list[tuple[str, object, float]]) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) the SELECTs on the audit table of one request."""
    from django.db import connection

    out = []
    for sql, params, elapsed in recorded:
        if not sql.upper().startswith("SELECT") or "audit_toolcallaudit" not in sql:
            continue
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            lines = [row[0] for row in cursor.fetchall()]
        top, scans, execution = summarise_plan(lines)
        out.append(
            f"    {query_kind(sql):<14} {elapsed:8.1f} ms in request | {top.split('  (')[0]} | {scans} | {execution}"
        )
    return out


def measure(client, repeat: int, *, with_explain: bool) -> dict[str, list[float]]:
    from django.db import connection

    results: dict[str, list[float]] = {}
    for key, label, url, goal in SCENARIOS:
        recorder = Recorder()
        with connection.execute_wrapper(recorder):  # the warm-up
            body = request(client, url, key)
        what = check(key, body)
        timings = []
        for _ in range(repeat):
            started = time.perf_counter()
            request(client, url, key)
            timings.append((time.perf_counter() - started) * 1000)
        results[key] = timings
        median = statistics.median(timings)
        verdict = "ok" if median <= goal else "MISSED"
        db_ms = sum(elapsed for _sql, _params, elapsed in recorder.queries)
        event_ms = sum(e for sql, _p, e in recorder.queries if sql.startswith('INSERT INTO "audit_auditevent"'))
        print(
            f"{label}: median {median:.1f} ms (min {min(timings):.1f}, max {max(timings):.1f}) "
            f"goal <= {goal} ms {verdict} [{what}; warm-up: {len(recorder.queries)} queries, "
            f"{db_ms:.1f} ms in SQL, of which AuditEvent INSERT {event_ms:.1f} ms]"
        )
        if with_explain:
            for line in explain(recorder.queries):
                print(line)
    return results


# --- candidate fixes (throwaway database / this process only) -------------


def experiment(client, repeat: int, title: str, apply: Callable[[], None]) -> dict[str, list[float]]:
    print(f"\n== with fix: {title}")
    apply()
    return measure(client, repeat, with_explain=True)


def ddl(*statements: str) -> Callable[[], None]:
    def apply() -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            for statement in statements:
                started = time.perf_counter()
                cursor.execute(statement)
                print(f"  {statement} ({time.perf_counter() - started:.1f} s)")
        # No ANALYZE: the other statistics stay as in the baseline, so plans compare.

    return apply


def profile_request(client, key: str) -> None:
    import cProfile
    import pstats

    url = next(url for k, _label, url, _goal in SCENARIOS if k == key)
    profiler = cProfile.Profile()
    profiler.enable()
    request(client, url, key)
    profiler.disable()
    print(f"cProfile of one {key} request (baseline schema):", file=sys.stderr)
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(15)


def run(rows: int, repeat: int, *, experiments: bool, profile: str | None = None) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("migrate", verbosity=0)
    # The viewer first: the audited actors get ids that are not the viewer's.
    admin_user = get_user_model().objects.create_superuser("bench-admin", "bench@example.com", "unused")
    load(rows, first_actor_id=admin_user.pk + 100)
    describe_data()
    print(f"PostgreSQL: {connection.cursor().connection.info.server_version}; {repeat} timed requests + 1 warm-up each")

    client = Client(HTTP_HOST="localhost")
    client.force_login(admin_user)

    print("\n== baseline (schema as migrated)")
    baseline = measure(client, repeat, with_explain=True)
    if profile:
        profile_request(client, profile)
    fixed = run_experiments(client, repeat) if experiments else {}
    for title, figures in fixed.items():
        medians = ", ".join(f"{key} {statistics.median(figures[key]):.0f}" for key, *_rest in SCENARIOS)
        print(f"with fix ({title}), median ms: {medians}")

    medians = ", ".join(f"{key} {statistics.median(baseline[key]):.0f}" for key, *_rest in SCENARIOS)
    missed = [key for key, _label, _url, goal in SCENARIOS if statistics.median(baseline[key]) > goal]
    print(
        f"audit admin over {rows:,} records, median ms: {medians} "
        f"(goals page 200, searches 500, export 1000; {'missed: ' + ', '.join(missed) if missed else 'all met'})"
    )


def capped_count_paginator(cap: int):
    """The candidate code fix: count at most `cap` + 1 rows (LIMIT inside the
    COUNT), so the changelist (and the export, which builds a changelist)
    never counts a million rows. The page would show "10,000+" results."""
    from django.core.paginator import Paginator
    from django.utils.functional import cached_property

    class CappedCountPaginator(Paginator):
        @cached_property
        def count(self) -> int:
            return self.object_list[: cap + 1].count()

    return CappedCountPaginator


def run_experiments(client, repeat: int) -> dict[str, dict[str, list[float]]]:
    from django.contrib import admin

    from audit.models import SqlExecution

    model_admin = admin.site._registry[SqlExecution]
    results = {}

    def cap_counts() -> None:
        model_admin.paginator = capped_count_paginator(10_000)
        print("  SqlExecutionAdmin.paginator = paginator whose count is queryset[:10001].count() (this process only)")

    results["capped COUNT"] = experiment(client, repeat, "capped COUNT in the changelist paginator", cap_counts)
    results["capped COUNT + username index"] = experiment(
        client,
        repeat,
        "capped COUNT + index on (actor_username, created_at DESC)",
        ddl("CREATE INDEX audit_tc_username_time ON audit_toolcallaudit (actor_username, created_at DESC)"),
    )
    return results


if __name__ == "__main__":
    main()
