"""Guard and binder speed on long statements (~100,000 characters).

    .venv/bin/python bench/sql_guard.py

Prints, per statement shape, the median time of analyse_sql (the judgment the
model waits for; goal < 0.2 s) and of bind_postgres (the rewrite before a
PostgreSQL statement runs).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from governance.sql.binding import bind_postgres  # noqa: E402
from governance.sql.dialects import parsed  # noqa: E402
from governance.sql.guard import analyse_sql  # noqa: E402

SHAPES = {
    "or-chain of BETWEEN / =": "SELECT id FROM customers WHERE "
    + " OR ".join(f"(name = 'n{i}' AND amount BETWEEN {i} AND {i + 5})" for i in range(2000)),
    "wide select of calls and ||": "SELECT "
    + ", ".join(f"lower(upper(name)) || {i}" for i in range(4000))
    + " FROM customers",
    "long IN list": "SELECT id FROM customers WHERE id IN (" + ", ".join(str(i) for i in range(16000)) + ")",
    "nested CASE": "SELECT "
    + ", ".join(f"CASE amount WHEN {i} THEN nullif(city, 'x') ELSE coalesce(note, '-') END" for i in range(1300))
    + " FROM orders",
}


def _medians(sql: str, runs: int = 5) -> tuple[float, float]:
    """(guard, bind) medians, each run as a tool call meets them: the guard
    first reads a text the process has not parsed yet (the parse cache is
    emptied), the binder then gets its copy of the guard's parse."""
    guard, bind = [], []
    for _ in range(runs):
        parsed.cache_clear()
        start = time.perf_counter()
        analyse_sql(sql, "postgres")
        guard.append(time.perf_counter() - start)
        start = time.perf_counter()
        bind_postgres(sql)
        bind.append(time.perf_counter() - start)
    return statistics.median(guard), statistics.median(bind)


def main() -> None:
    for name, sql in SHAPES.items():
        guard, bind = _medians(sql)
        print(f"{name:32} {len(sql):>7} chars  guard {guard * 1000:7.1f} ms  bind {bind * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
