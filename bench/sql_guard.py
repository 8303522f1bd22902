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


def _median(fn, sql: str, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(sql)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    for name, sql in SHAPES.items():
        guard = _median(lambda s: analyse_sql(s, "postgres"), sql)
        bind = _median(bind_postgres, sql)
        print(f"{name:32} {len(sql):>7} chars  guard {guard * 1000:7.1f} ms  bind {bind * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
