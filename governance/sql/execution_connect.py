"""Connecting to a customer database, and the client-side deadline of every
call on it (governance.sql.execute runs the statements).

A customer server can go silent mid-call: a cut network, a firewall that
drops a long-lived connection, a proxy that stops forwarding. The server's
own statement timeout does not help then (its answer never arrives), and a
blocking read waits forever: the tool call never ends, the worker thread
is lost, and the customer's session stays `idle in transaction`, holding its
locks. So every call has three bounds:

- connecting (TCP, TLS, login, session settings) takes at most
  `Limits.connect_seconds` (OWLAI_CUSTOMER_DB_CONNECT_SECONDS);
- a `Deadline` at the statement timeout plus `Limits.margin_seconds`
  (OWLAI_CUSTOMER_DB_MARGIN_SECONDS) shuts the connection's socket down,
  which wakes the thread blocked reading it with an error (the caller then
  reports "no answer within ..." and closes the connection). By then the
  server's statement timeout has already ended the statement itself, so
  there is nothing left to cancel;
- the server ends the session on its own when our goodbye cannot reach it:
  PostgreSQL `idle_in_transaction_session_timeout`, MySQL/MariaDB
  `wait_timeout` and `net_write_timeout`, both sides with TCP keepalives.

A connection that cannot be made raises EngineError with `unreachable`
set: the call failed (the server could not be reached or refused the
session); the platform did not refuse it.
"""

from __future__ import annotations

import math
import socket
import threading
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

APPLICATION_NAME = "owlai-dbexec"
DEADLINE_ERROR_CLASS = "OWLAI_DEADLINE"
UNREACHABLE_ERROR_CLASS = "OWLAI_UNREACHABLE"

# TCP keepalives on our side and (PostgreSQL) on the server's: a peer that
# vanished is noticed after about idle + interval x count seconds of silence.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 5, 2, 3


@dataclass(frozen=True)
class Limits:
    connect_seconds: float = 3.0
    margin_seconds: float = 5.0

    def deadline_seconds(self, timeout_ms: int) -> float:
        return timeout_ms / 1000 + self.margin_seconds


def limits() -> Limits:
    """The configured limits (Django settings when configured: the SQL
    modules also run without Django, e.g. the benches)."""
    from django.conf import settings

    if not settings.configured:
        return Limits()
    return Limits(
        connect_seconds=float(getattr(settings, "OWLAI_CUSTOMER_DB_CONNECT_SECONDS", Limits.connect_seconds)),
        margin_seconds=float(getattr(settings, "OWLAI_CUSTOMER_DB_MARGIN_SECONDS", Limits.margin_seconds)),
    )


class EngineError(Exception):
    """A raw engine error inside the SQL modules; it leaves them only
    scrubbed (governance.sql.execute), unless `ours` (our own words, no
    server text in them). `unreachable`: no session could be made, or the
    server went silent (the call failed; nothing refused it)."""

    def __init__(self, message: str, error_class: str = "", *, unreachable: bool = False, ours: bool = False) -> None:
        super().__init__(message)
        self.message, self.error_class = message, error_class
        self.unreachable, self.ours = unreachable, ours


class Deadline:
    """Shuts a connection's socket down if the block it guards runs past
    `seconds`: a thread blocked reading it wakes with an error. Only the
    socket is shut down, never closed, and never after the block ended: the
    caller closes the connection after the block, so the descriptor cannot
    belong to another connection by then."""

    def __init__(self, seconds: float, fileno: int) -> None:
        self.seconds = seconds
        self.expired = False
        self._fileno = fileno
        self._lock = threading.Lock()
        self._over = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
        with self._lock:  # an expiry in progress finishes before the caller closes
            self._over = True

    def _expire(self) -> None:
        with self._lock:
            if self._over:
                return
            self.expired = True
            shut_down(self._fileno)

    def error(self) -> EngineError:
        return EngineError(
            f"the database did not answer within {self.seconds:g} seconds "
            "(the statement timeout plus a margin); the connection was closed",
            DEADLINE_ERROR_CLASS,
            unreachable=True,  # a server gone silent mid-call: it failed, nothing refused the call
            ours=True,
        )


def shut_down(fileno: int) -> None:
    try:
        # fromfd duplicates the descriptor; shutting the copy down ends the
        # connection for both, and closing the copy leaves the original open.
        with socket.fromfd(fileno, socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def unreachable(seconds: float, error_class: str) -> EngineError:
    """No session could be made. The server's own words are left out (they
    name hosts and accounts); its error class says which failure it was."""
    return EngineError(
        f"the database server could not be reached, or refused the connection, within {seconds:g} seconds",
        error_class or UNREACHABLE_ERROR_CLASS,
        unreachable=True,
        ours=True,
    )


# --- PostgreSQL ---------------------------------------------------------------------


def _pg_option_value(value: str) -> str:
    # libpq `options`: spaces and backslashes in a value are backslash-escaped.
    return value.replace("\\", "\\\\").replace(" ", "\\ ")


def _pg_search_path(schemas: tuple[str, ...]) -> str:
    names = [name for name in schemas if name] or ["public"]
    return ",".join('"' + name.replace('"', '""') + '"' for name in names)


def pg_connect(dsn: str, *, timeout_ms: int, schemas: tuple[str, ...] = (), bounds: Limits | None = None):
    import psycopg

    bounds = bounds or limits()
    options = {
        # Read-only and the timeout are set at session start, before any SQL.
        "default_transaction_read_only": "on",
        "statement_timeout": str(int(timeout_ms)),
        # The server ends a session whose client went silent inside a
        # transaction (our ROLLBACK or goodbye lost with the network).
        "idle_in_transaction_session_timeout": str(int(bounds.margin_seconds * 1000)),
        "tcp_keepalives_idle": str(KEEPALIVE_IDLE),
        "tcp_keepalives_interval": str(KEEPALIVE_INTERVAL),
        "tcp_keepalives_count": str(KEEPALIVE_COUNT),
        # How the guard and the re-identification read and render literals.
        "standard_conforming_strings": "on",
        "backslash_quote": "off",
        # Unqualified names mean the configured schemas' tables (pg_catalog
        # is still searched first: the guard treats pg_* names as catalogs).
        "search_path": _pg_search_path(schemas),
    }
    # libpq counts whole seconds, at least 2.
    connect_timeout = max(2, math.ceil(bounds.connect_seconds))
    try:
        return psycopg.connect(
            dsn,
            application_name=APPLICATION_NAME,
            connect_timeout=connect_timeout,
            keepalives=1,
            keepalives_idle=KEEPALIVE_IDLE,
            keepalives_interval=KEEPALIVE_INTERVAL,
            keepalives_count=KEEPALIVE_COUNT,
            # Data we sent that the server does not acknowledge within the
            # deadline: the kernel gives the connection up.
            tcp_user_timeout=int(bounds.deadline_seconds(timeout_ms) * 1000),
            client_encoding="UTF8",  # the cutting loaders count characters in UTF-8
            options=" ".join(f"-c {key}={_pg_option_value(value)}" for key, value in options.items()),
        )
    except psycopg.Error as exc:
        raise unreachable(connect_timeout, pg_class(exc) or "08000") from exc


def pg_primary(exc: BaseException) -> str:
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    return primary or first_line(exc)


def pg_class(exc: BaseException) -> str:
    return getattr(exc, "sqlstate", None) or ""


# --- MySQL / MariaDB ------------------------------------------------------------------


def mysql_connect(dsn: str, *, timeout_ms: int, init_command: str, bounds: Limits | None = None):
    """A pymysql connection whose whole set-up (TCP, handshake, login,
    `init_command`) is bounded by the connect timeout: the socket is made
    here, under a Deadline, and handed to pymysql."""
    import pymysql

    bounds = bounds or limits()
    parts = urlsplit(dsn)
    host, port = parts.hostname or "127.0.0.1", parts.port or 3306
    deadline = bounds.deadline_seconds(timeout_ms)
    conn = pymysql.connect(
        host=host,
        port=port,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=unquote(parts.path.lstrip("/")) or None,
        program_name=APPLICATION_NAME,
        # Every read waits at most the deadline (the Deadline is the bound;
        # this catches a server that drips).
        read_timeout=deadline,
        write_timeout=deadline,
        charset="utf8mb4",
        autocommit=False,
        init_command=init_command,
        defer_connect=True,
    )
    try:
        sock = socket.create_connection((host, port), timeout=bounds.connect_seconds)
    except OSError as exc:
        raise unreachable(bounds.connect_seconds, "MySQL 2003") from exc
    _keepalive(sock)
    guard = Deadline(bounds.connect_seconds, sock.fileno())
    try:
        with guard:
            conn.connect(sock)
    except pymysql.Error as exc:
        sock.close()
        raise unreachable(bounds.connect_seconds, "" if guard.expired else mysql_class(exc)) from exc
    return conn


def _keepalive(sock: socket.socket) -> None:
    sock.settimeout(None)  # pymysql sets its own per read
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ):
        if hasattr(socket, name):  # Linux names; other systems keep their defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def mysql_message(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    message = str(args[1]) if len(args) >= 2 else ""
    # pymysql raises InterfaceError(0, "") for a connection it already dropped.
    return message or f"{exc.__class__.__name__}: the connection was lost"


def mysql_class(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    return f"MySQL {args[0]}" if args and isinstance(args[0], int) and args[0] else ""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__
