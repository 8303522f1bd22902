"""A loopback TCP proxy process that can break the network between the app
and a database, so fault tests never touch the machine's shared servers.

    python -m tests.support.fault_proxy LISTEN_PORT TARGET_HOST TARGET_PORT CONTROL_PORT

Commands, one line each on the control port (answered "ok"):

    pass         forward everything (the start)
    cut          reset every open connection (a restart's, a failover's)
    refuse N     cut, and refuse new connections for N seconds (a server down)
    blackhole    stop forwarding on every connection, open and new, keeping
                 them open (a network that went silent: nothing arrives,
                 nothing is refused)
    count        how many connections are open ("ok N")
    watch TEXT   count from now on how often TEXT goes to the server
    seen         that count ("ok N"): how many times a statement was sent

`FaultProxy` starts it (own process, stopped by its PID) and sends commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


class _Proxy:
    def __init__(self, listen: int, host: str, port: int) -> None:
        self.listen, self.target = listen, (host, port)
        self.silent = False
        self.pattern, self.seen = b"", 0
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.AbstractServer | None = None
        self.cuts = asyncio.Event()  # set (and replaced) by every cut

    async def open(self) -> None:
        self.server = await asyncio.start_server(self.accept, "127.0.0.1", self.listen, reuse_address=True)

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        try:
            if self.silent:
                await self.drain_forever(reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self.writers.add(up_writer)
            try:
                await asyncio.gather(self.pipe(reader, up_writer, upstream=True), self.pipe(up_reader, writer))
            finally:
                self.writers.discard(up_writer)
                up_writer.close()
        finally:
            self.writers.discard(writer)
            writer.close()

    async def pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream=False) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                if self.silent:
                    continue  # lost on the way: read (TCP acknowledges it) and dropped
                if upstream and self.pattern:
                    self.seen += data.count(self.pattern)
                writer.write(data)
                await writer.drain()
        if self.silent:
            await self.cuts.wait()  # a silent network carries no goodbye either
            return
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()

    async def drain_forever(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError):
            while await reader.read(65536):
                pass

    def cut(self) -> None:
        for writer in list(self.writers):
            writer.transport.abort()  # a reset, both sides
        self.writers.clear()
        self.cuts.set()
        self.cuts = asyncio.Event()

    async def refuse(self, seconds: float) -> None:
        self.server.close()
        self.cut()
        await self.server.wait_closed()
        await asyncio.sleep(seconds)
        await self.open()

    async def command(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := (await reader.readline()).decode().strip():
            name, _, arg = line.partition(" ")
            answer = "ok"
            if name == "pass":
                self.silent = False
            elif name == "cut":
                self.cut()
            elif name == "refuse":
                self.cut()
                asyncio.get_running_loop().create_task(self.refuse(float(arg)))
            elif name == "blackhole":
                self.silent = True
            elif name == "count":
                answer = f"ok {len(self.writers)}"
            elif name == "watch":
                self.pattern, self.seen = arg.encode(), 0
            elif name == "seen":
                answer = f"ok {self.seen}"
            else:
                answer = f"error unknown command {name}"
            writer.write(f"{answer}\n".encode())
            await writer.drain()
        writer.close()


async def _main(listen: int, host: str, port: int, control: int) -> None:
    proxy = _Proxy(listen, host, port)
    await proxy.open()
    commands = await asyncio.start_server(proxy.command, "127.0.0.1", control, reuse_address=True)
    async with commands:
        await commands.serve_forever()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FaultProxy:
    """The proxy as a process in front of `host:port`; `port` is where to
    connect instead."""

    def __init__(self, host: str, port: int, log: Path) -> None:
        self.port, self.control = _free_port(), _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fault_proxy", str(self.port), host, str(port), str(self.control)],
            cwd=ROOT,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                self.send("count")
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"the fault proxy exited:\n{log.read_text()}") from None
                time.sleep(0.1)
        raise AssertionError(f"the fault proxy did not start:\n{log.read_text()}")

    def send(self, command: str) -> str:
        with socket.create_connection(("127.0.0.1", self.control), timeout=5) as sock:
            sock.sendall(f"{command}\n".encode())
            answer = sock.makefile().readline().strip()
        if not answer.startswith("ok"):
            raise AssertionError(f"fault proxy: {command!r} -> {answer!r}")
        return answer

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


if __name__ == "__main__":
    listen_port, target_host, target_port, control_port = sys.argv[1:5]
    asyncio.run(_main(int(listen_port), target_host, int(target_port), int(control_port)))
