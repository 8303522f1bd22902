"""Per-call cost of a connector (MCP) tool call on loopback.

Three figures from the same run against the same server (the SDK test server
tests/support/mcp_server_people.py, streamable HTTP on a free loopback port),
in alternating rounds so none gets the warmer machine:

  bare SDK      `mcp.Client.call_tool` in one event loop, one session
  sessions      governance.connectors.client.ConnectorSessions: what the
                executor holds per turn (sync API over a background event
                loop, deadlines, result conversion), the session reused
                across the turn's calls
  executor      chat.executor.execute_tool_call on `<connector>__echo`
                inside one turn (one ToolSession: the MCP session reused):
                the visibility re-check, the policy, the argument checks,
                the durable attempt and outcome audit rows, the call through
                the turn's sessions, and the shaping of the result (URL
                references, known values, detectors)

The executor figure needs the application database: a throwaway PostgreSQL
database when PostgreSQL is reachable, else a temporary SQLite file.

Usage: .venv/bin/python bench/connector.py [--calls N] [--sqlite] [--smoke]
Prints figures; the last line is the headline: what the executor adds, p50,
over the bare SDK call (goal: <= 3 ms, session reused). `--smoke` runs a few
calls in seconds (the test suite runs it so the bench cannot rot); its
figures mean nothing.
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


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99


def bare_sdk(url: str, calls: int, warmup: int) -> list[float]:
    import anyio
    from mcp import Client

    samples: list[float] = []

    async def run() -> None:
        async with Client(url, cache=None) as client:
            for i in range(warmup + calls):
                started = time.perf_counter()
                await client.call_tool("echo", {"text": f"message {i}"})
                if i >= warmup:
                    samples.append((time.perf_counter() - started) * 1000)

    anyio.run(run)
    return samples


def sessions(url: str, calls: int, warmup: int) -> list[float]:
    from governance.connectors.client import ConnectorSessions, ConnectorTarget

    target = ConnectorTarget(key="bench", name="bench", url=url, call_timeout=10.0, connect_timeout=10.0)
    samples: list[float] = []
    with ConnectorSessions() as turn:
        for i in range(warmup + calls):
            started = time.perf_counter()
            turn.call_tool(target, "echo", {"text": f"message {i}"})
            if i >= warmup:
                samples.append((time.perf_counter() - started) * 1000)
    return samples


class Executor:
    """The executor inside one turn, against the connector `bench` (the test
    server), its `echo` tool allowed; created once per run."""

    def __init__(self, url: str) -> None:
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from chat.context import TurnContext
        from chat.services import conversation_create
        from governance.connectors.services import connector_tool_definition_approve, connector_tools_sync
        from governance.models import Connector, ConnectorTool, ConnectorToolState, Role

        user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:6]}")
        role = Role.objects.create(name=f"bench-{uuid.uuid4().hex[:6]}")
        role.users.add(user)
        connector = Connector.objects.create(
            name="bench", transport="streamable_http", url=url, exposure="internal_only", timeout_seconds=10
        )
        connector_tools_sync(connector=connector)
        # New tools wait for an admin's review of their definitions.
        for tool in ConnectorTool.objects.filter(connector=connector, state=ConnectorToolState.CHANGED):
            connector_tool_definition_approve(tool=tool)
        ConnectorTool.objects.filter(connector=connector, name="echo").update(policy="allow")
        role.connectors.add(connector)
        self.ctx = TurnContext(
            user_id=user.pk,
            username=user.username,
            tier="private",
            model_name="bench",
            provider_name="bench",
            conversation_id=conversation_create(owner=user).pk,
            turn_id=1,
        )

    def __call__(self, url: str, calls: int, warmup: int) -> list[float]:
        from chat.executor import ToolSession, execute_tool_call

        samples: list[float] = []
        with ToolSession(ctx=self.ctx) as session:
            for i in range(warmup + calls):
                arguments = json.dumps({"text": f"message {i}"})
                started = time.perf_counter()
                result = execute_tool_call(session, name="bench__echo", arguments=arguments)
                if i >= warmup:
                    samples.append((time.perf_counter() - started) * 1000)
                if result.outcome != "success":
                    raise RuntimeError(f"the executor refused or failed: {result.content}")
        return samples


def pg_reachable() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--sqlite", action="store_true", help="the embedded SQLite profile for the executor's database")
    parser.add_argument("--smoke", action="store_true", help="a few calls, to check the bench still runs")
    args = parser.parse_args()
    calls, warmup = (20, 3) if args.smoke else (args.calls, 20)

    bench_db = None
    admin_url = os.environ.get("OWLAI_BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    if not args.sqlite and pg_reachable():
        import psycopg

        bench_db = f"owlai_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{bench_db}"')
        server_url = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgres://")
        os.environ["DATABASE_URL"] = f"{server_url}/{bench_db}"
        os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
        os.environ.setdefault("SECRET_KEY", "bench")
    else:
        os.environ.pop("DATABASE_URL", None)
        os.environ.pop("REDIS_URL", None)
        os.environ["OWLAI_SQLITE_PATH"] = str(Path(tempfile.mkdtemp()) / "bench.sqlite3")
    os.environ["DJANGO_SETTINGS_MODULE"] = "owlai.settings"
    os.environ.setdefault("OWLAI_DB_ROLE_CHECK", "0")
    try:
        run(calls, warmup, rounds=1 if args.smoke else 3)
    finally:
        if bench_db:
            from django.db import connections

            connections.close_all()
            import psycopg

            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{bench_db}" WITH (FORCE)')


def run(calls: int, warmup: int, *, rounds: int) -> None:
    import logging

    from tests.support.mcp_servers import http_server

    with http_server("people") as server:
        executor = Executor(server.url)
        logging.getLogger("httpx2").setLevel(logging.WARNING)  # one INFO line per request otherwise
        from django.conf import settings

        engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        print(f"MCP server on {server.url} (pid {server.pid}); {calls} calls each, session reused")
        print(f"app database: {engine}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        results: dict[str, list[float]] = {}
        for label, measure in (("bare SDK", bare_sdk), ("sessions", sessions), ("executor", executor)) * rounds:
            results.setdefault(label, []).extend(measure(server.url, calls // rounds or 1, warmup))
    for label, samples in results.items():
        p50, p99 = percentiles(samples)
        print(f"{label:<10} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms   ({len(samples)} calls)")
    bare50, _ = percentiles(results["bare SDK"])
    sessions50, _ = percentiles(results["sessions"])
    executor50, _ = percentiles(results["executor"])
    print(f"sessions layer adds {sessions50 - bare50:.3f} ms p50 over the bare SDK call")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"headline: the executor adds {executor50 - bare50:.3f} ms p50 over the bare SDK call "
        f"({bare50:.3f} ms; goal <= 3 ms, session reused)"
    )


if __name__ == "__main__":
    main()
