"""Bounds before fetch (governance/sql/bounds.py, governance/sql/execute.py).

A million-row result against a 200-row cap used to be fetched whole by the
client cursor (+660 MB in the worker), and a 50 MB cell went to the model as
one tool message. Now the streaming cursor reads at most cap + 1 rows, every
cell is cut while it is decoded, with a marker saying how much was cut, and
the model receives the capped result.

The memory tests run the call in a fresh subprocess and read its peak RSS
(VmHWM) before and after the one query: the growth is what the query cost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from governance.sql.bounds import CutCounter, FetchBounds, collect, cut_text, cut_utf8
from governance.sql.execute import execute_readonly
from tests.support.governed import governed_connection

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20

_PROBE = """
import json, sys
from governance.sql.execute import execute_readonly
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
engine, dsn, sql = sys.argv[1:4]
execute_readonly(engine=engine, dsn=dsn, sql="SELECT 1", row_cap=200, timeout_ms=60000)
before = peak()
result = execute_readonly(engine=engine, dsn=dsn, sql=sql, row_cap=200, timeout_ms=60000)
print(json.dumps({
    "growth": peak() - before,
    "rows": len(result.rows),
    "truncated": result.truncated,
    "cut_characters": result.cut_characters,
    "first": str(result.rows[0][0]),
}))
"""


def _probe(engine: str, dsn: str, sql: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, engine, dsn, sql], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


MILLION_ROWS = {
    "postgresql": "SELECT g, md5(g::text) FROM generate_series(1, 1000000) g",
    "mysql": "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 1000000) "
    "SELECT n, md5(n) FROM t",
    "sqlite": "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 1000000) "
    "SELECT n, hex(n) FROM t",
}
# MariaDB's max_allowed_packet (16 MB by default) is the largest cell it sends.
# The last figure: how many copies of the cell the driver itself holds at once
# (libpq: its input buffer and the row; PyMySQL: the packet and its decoding;
# SQLite computes the value in the worker's own process and the sqlite3
# module copies it once).
BIG_CELL = {
    "postgresql": ("SELECT repeat('x', 50000000)", 50_000_000, 2.5),
    "mysql": ("SELECT REPEAT('x', 16000000)", 16_000_000, 3.5),
    "sqlite": ("SELECT printf('%.*c', 50000000, 'x')", 50_000_000, 3.5),
}


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def customer_db(request):
    return request.getfixturevalue(
        {"postgresql": "pg_customer_db", "mysql": "mysql_customer_db"}.get(request.param, "sqlite_customer_db")
    )


def test_a_million_rows_cost_the_worker_no_more_than_the_cap(customer_db):
    probe = _probe(customer_db.engine, customer_db.dsn, MILLION_ROWS[customer_db.engine])
    assert probe["rows"] == 200 and probe["truncated"]
    # The unbounded figure was +660 MB; 200 rows are kilobytes.
    assert probe["growth"] < 30 * MB, probe


def test_a_huge_cell_is_cut_while_fetched(customer_db):
    sql, size, copies = BIG_CELL[customer_db.engine]
    probe = _probe(customer_db.engine, customer_db.dsn, sql)
    assert probe["rows"] == 1 and len(probe["first"]) <= FetchBounds.cell_chars
    assert probe["first"].endswith(f"…[cut: {probe['cut_characters']:,} characters]")
    assert probe["cut_characters"] > size - FetchBounds.cell_chars
    # Only the driver's own buffers hold the cell; no copy reaches shaping.
    assert probe["growth"] < copies * size + 10 * MB, probe


@pytest.mark.django_db
def test_the_model_receives_the_cut_cell_and_the_capped_rows(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, outcome = governed.run("SELECT repeat('ab ', 5000000) AS memo")
    assert outcome == "success", payload
    cell = payload["rows"][0][0]
    assert len(cell) <= FetchBounds.cell_chars and "…[cut: " in cell and payload["cells_cut"] == 1
    assert len(json.dumps(payload, ensure_ascii=False)) < 2 * FetchBounds.cell_chars
    payload, outcome = governed.run("SELECT g FROM generate_series(1, 1000000) g")
    assert outcome == "success", payload
    assert payload["truncated"] is True and payload["row_count"] == governed.connection.row_cap


def test_the_statement_timeout_still_applies_while_streaming(pg_customer_db):
    from governance.sql.execute import QueryError

    with pytest.raises(QueryError) as raised:
        execute_readonly(
            engine="postgresql",
            dsn=pg_customer_db.dsn,
            sql="SELECT g FROM generate_series(1, 100000) g WHERE pg_sleep(0.001) IS NOT NULL ORDER BY g DESC",
            row_cap=10,
            timeout_ms=300,
        )
    assert raised.value.error_class == "57014"  # query_canceled


def test_a_mysql_stream_left_early_leaves_no_statement_running(mysql_customer_db):
    import pymysql

    result = execute_readonly(
        engine="mysql", dsn=mysql_customer_db.dsn, sql=MILLION_ROWS["mysql"], row_cap=5, timeout_ms=60_000
    )
    assert len(result.rows) == 5 and result.truncated
    # The dropped connection ends the statement: no OwlAI statement is left
    # running (the server notices at its next write).
    conn = pymysql.connect(host="127.0.0.1", user="root")
    running = _owlai_statements(conn)
    for _ in range(50):
        if not running:
            break
        time.sleep(0.1)
        running = _owlai_statements(conn)
    conn.close()
    assert running == 0


def _owlai_statements(conn) -> int:
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%%OwlAI generated%%' "
            "AND INFO NOT LIKE '%%PROCESSLIST%%'"
        )
        return cursor.fetchone()[0]


def test_the_result_character_budget_stops_reading():
    rows = ((i, "x" * 1000) for i in range(10_000))
    collected = collect(rows, 2, FetchBounds(row_cap=5000, cell_chars=2000, result_chars=50_000))
    assert collected.truncated and not collected.complete
    assert 40 <= len(collected.rows) <= 50


def test_one_wide_row_never_exceeds_the_budget():
    row = tuple("y" * 5000 for _ in range(100))
    collected = collect([row], 100, FetchBounds(row_cap=10, cell_chars=5000, result_chars=100_000))
    assert sum(len(cell) for cell in collected.rows[0]) <= 100_000
    assert collected.cut.cells == 100


@pytest.mark.parametrize("text", ["가" * 30_000, "x" * 30_000, "é" * 12_000 + "🙂" * 9_000, "ab cd " * 5000])
def test_cut_utf8_agrees_with_cut_text(text):
    a, b = CutCounter(), CutCounter()
    assert cut_utf8(text.encode(), 1000, a) == cut_text(text, 1000, b)
    assert a.characters == b.characters and len(cut_text(text, 1000)) <= 1000
    assert cut_text(cut_text(text, 1000), 1000) == cut_text(text, 1000)  # never cut twice
