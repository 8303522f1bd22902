"""Per-call cost of a connector (MCP) tool call on loopback.

Two figures from the same run against the same server (the SDK test server
tests/support/mcp_server_people.py, streamable HTTP on a free loopback port):

  bare SDK      `mcp.Client.call_tool` in one event loop, one session
  sessions      governance.connectors.client.ConnectorSessions: what the
                executor holds per turn (sync API over a background event
                loop, deadlines, result conversion), the session reused
                across the turn's calls

The executor-side figure (the staged pipeline around the call: visibility
re-check, policy gate, audit rows, result shaping) is added beside these
once the pipeline lands; its goal is <= 3 ms p50 added over the bare call.

Usage: .venv/bin/python bench/connector.py [--calls N] [--smoke]
Prints figures; the last line is the headline (the sessions layer's p50
overhead over the bare SDK call). `--smoke` runs a few calls in seconds (the
test suite runs it so the bench cannot rot); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--smoke", action="store_true", help="a few calls, to check the bench still runs")
    args = parser.parse_args()
    calls, warmup = (20, 3) if args.smoke else (args.calls, 20)

    from tests.support.mcp_servers import http_server

    with http_server("people") as server:
        print(f"MCP server on {server.url} (pid {server.pid}); {calls} calls each, session reused")
        results = {}
        # Alternating rounds, so neither side gets the warmer machine.
        rounds = 1 if args.smoke else 3
        for label, run in (("bare SDK", bare_sdk), ("sessions", sessions)) * rounds:
            results.setdefault(label, []).extend(run(server.url, calls // rounds or 1, warmup))
    for label, samples in results.items():
        p50, p99 = percentiles(samples)
        print(f"{label:<10} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms   ({len(samples)} calls)")
    print("executor   (added with the staged tool pipeline)")
    bare50, _ = percentiles(results["bare SDK"])
    ours50, _ = percentiles(results["sessions"])
    print(f"headline: sessions layer adds {ours50 - bare50:.3f} ms p50 over the bare SDK call ({bare50:.3f} ms)")


if __name__ == "__main__":
    main()
