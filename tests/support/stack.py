"""The production stack as processes for reliability tests: an own
redis-server on a free loopback port (so a test can restart it), daphne, a
Celery worker that can be killed and replaced, and beat. Every process is
started here and stopped by its PID (whole process group for the worker)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early:\n{log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"server did not listen on {port}:\n{log.read_text()}")


def scripted_provider(tmp_path: Path, base_url: str, *, tier: str = "private") -> Path:
    """An install config with one OpenAI-compatible provider (the scripted
    model on loopback), synced into the test database and made the chat
    default; returns the config file's path for the processes."""
    from governance.models import LlmModel
    from governance.services import feature_default_set, install_config_sync
    from owlai.install_config import parse_install_config

    config_text = f"""
[[providers]]
name = "onprem"
kind = "openai"
tier = "{tier}"
base_url = "{base_url}"
models = ["inhouse-model"]
"""
    config_path = tmp_path / "owlai.toml"
    config_path.write_text(config_text)
    install_config_sync(config=parse_install_config(config_text))
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
    return config_path


def process_env(config_path: Path, *, db_user: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of web and worker processes connected to the test
    database (as `db_user`, default the test database's user)."""
    from django.conf import settings
    from django.db import connection

    db = settings.DATABASES["default"]
    name = connection.settings_dict["NAME"]
    return {
        **os.environ,
        "DATABASE_URL": f"postgres://{db_user or db['USER']}@{db['HOST']}:{db['PORT']}/{name}",
        "SECRET_KEY": settings.SECRET_KEY,
        "OWLAI_CONFIG": str(config_path),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DB_CONN_MAX_AGE": "0",
        "OWLAI_DB_ROLE_CHECK": "0",
        **extra,
    }


@contextlib.contextmanager
def sentinel_redis(tmp_path: Path):
    """A redis-server and a Sentinel monitoring it (master name "owlai"), on
    free loopback ports; yields the channel layer's Sentinel host entry."""
    master_port, sentinel_port = free_port(), free_port()
    procs = []
    try:
        master_log = tmp_path / "master.log"
        master = subprocess.Popen(
            ["redis-server", "--port", str(master_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=master_log.open("w"),
            stderr=subprocess.STDOUT,
        )
        procs.append(master)
        wait_for_port(master_port, master, master_log)
        config = tmp_path / "sentinel.conf"
        config.write_text(f"port {sentinel_port}\nbind 127.0.0.1\nsentinel monitor owlai 127.0.0.1 {master_port} 1\n")
        sentinel_log = tmp_path / "sentinel.log"
        proc = subprocess.Popen(
            ["redis-server", str(config), "--sentinel"], stdout=sentinel_log.open("w"), stderr=subprocess.STDOUT
        )
        procs.append(proc)
        wait_for_port(sentinel_port, proc, sentinel_log)
        yield {"master_name": "owlai", "sentinels": [("127.0.0.1", sentinel_port)]}
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


class Stack:
    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp = tmp_path
        self.redis_port = free_port()
        self.port = free_port()
        self.env = {
            **env,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "OWLAI_CHANNEL_PREFIX": f"owlai-rel-{uuid.uuid4().hex[:8]}",
            "OWLAI_CELERY_QUEUE": f"owlai-rel-{uuid.uuid4().hex[:8]}",
        }
        self.procs: dict[str, subprocess.Popen] = {}
        self._n = 0

    def _start(self, name: str, argv: list[str], **kwargs) -> subprocess.Popen:
        self._n += 1
        log = self.tmp / f"{name}-{self._n}.log"
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        proc.log = log  # type: ignore[attr-defined]
        self.procs[name] = proc
        return proc

    def start_redis(self) -> None:
        proc = self._start(
            "redis",
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
        )
        wait_for_port(self.redis_port, proc, proc.log)

    def start_web(self, app: str = "owlai.asgi:application") -> None:
        proc = self._start("web", [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(self.port), app])
        wait_for_port(self.port, proc, proc.log)

    def start_worker(self, concurrency: int = 2, *, pool: str = "prefork", name: str = "worker") -> None:
        """A Celery worker; `pool` "threads" is the production choice (README),
        "prefork" the default here. Several workers: give each its own `name`."""
        self._start(
            name,
            [
                str(BIN / "celery"),
                "-A",
                "owlai",
                "worker",
                "-P",
                pool,
                "-c",
                str(concurrency),
                "-n",
                f"{name}-{uuid.uuid4().hex[:6]}@%h",
                "-Q",
                self.env["OWLAI_CELERY_QUEUE"],
                "-l",
                "info",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
        )

    def start_beat(self) -> None:
        self._start(
            "beat",
            [
                str(BIN / "celery"),
                "-A",
                "owlai",
                "beat",
                "-l",
                "info",
                "-s",
                str(self.tmp / "beat-schedule"),
                "--max-interval",
                "1",
            ],
        )

    def kill(self, name: str) -> None:
        """kill -9 of the process and everything it started (pool children)."""
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def restart_redis(self, down_seconds: float = 1.0) -> None:
        self.kill("redis")
        time.sleep(down_seconds)
        self.start_redis()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-4000:]}" for p in sorted(self.tmp.glob("*.log")))

    @contextlib.contextmanager
    def running(self, *, concurrency: int = 2, pool: str = "prefork"):
        """Redis, web, one worker and beat for the duration of the block;
        the processes' logs are printed when the block fails, and every
        process is stopped after it."""
        try:
            self.start_redis()
            self.start_web()
            self.start_worker(concurrency, pool=pool)
            self.start_beat()
            yield self
        except BaseException:
            print(self.logs())
            raise
        finally:
            self.close()

    def close(self) -> None:
        for name in ["web", *(n for n in self.procs if n.startswith("worker")), "beat"]:
            if name in self.procs:
                self.stop(name)
        if "redis" in self.procs:
            self.kill("redis")
