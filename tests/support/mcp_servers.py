"""Real MCP servers for tests, written with the SDK (scripts beside this file):

    people       personal data in text, structured content, an embedded resource
    tool_list    its tool list comes from a state file (changes between syncs)
    description  one tool whose description comes from a state file
    hang         `hang` never answers; `--silent` never answers the handshake
    crash        `crash` kills the server process mid-call

Started on loopback over streamable HTTP (a free port, stopped by PID), or
run by the connector itself as a stdio subprocess through an allowlisted
install-config command (`stdio_commands`).

    with http_server("people") as server:
        server.url   # http://127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.customer_dbs import port_open
from tests.support.stack import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
SERVERS = ("people", "tool_list", "description", "hang", "crash")


def module(kind: str) -> str:
    if kind not in SERVERS:
        raise ValueError(f"no test MCP server {kind!r}")
    return f"tests.support.mcp_server_{kind}"


def _environment() -> dict[str, str]:
    # The scripts import tests.support: the repository root on the path.
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@dataclass
class HttpServer:
    process: subprocess.Popen
    port: int
    state: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def pid(self) -> int:
        return self.process.pid

    def set_state(self, value: dict) -> None:
        assert self.state is not None, "started without a state file"
        write_state(self.state, value)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """By PID (its own process group): SIGTERM, then SIGKILL."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def write_state(path: Path, value: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value), encoding="utf-8")
    tmp.replace(path)  # atomic: the server never reads half a file


def start_http_server(kind: str, *, state: Path | None = None, timeout: float = 60.0) -> HttpServer:
    port = free_port()
    args = [sys.executable, "-m", module(kind), "--http", str(port)]
    if state is not None:
        args += ["--state", str(state)]
    process = subprocess.Popen(
        args,
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = HttpServer(process, port, state)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"MCP test server {kind} exited with {process.returncode}")
        if port_open("127.0.0.1", port):
            return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"MCP test server {kind} did not listen on {port} within {timeout} s")


@contextlib.contextmanager
def http_server(kind: str, *, state: Path | None = None) -> Iterator[HttpServer]:
    server = start_http_server(kind, state=state)
    try:
        yield server
    finally:
        server.stop()


def stdio_command_toml(name: str, kind: str, *extra: str) -> str:
    """An install-config [[connector_commands]] entry running a test server."""
    args = ["-m", module(kind), *extra]
    return (
        "\n[[connector_commands]]\n"
        f"name = {json.dumps(name)}\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = {json.dumps(args)}\n"
        f"cwd = {json.dumps(str(ROOT))}\n"
    )
