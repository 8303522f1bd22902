"""The execution layer: run one already-checked query on a customer database.

This is the second read-only layer. Whatever the parser missed, the session
here cannot write: PostgreSQL and MySQL run the statement in a READ ONLY
transaction that is always rolled back; SQLite opens the file read-only with
`query_only`. Every statement carries the DBA marker comment and the
connection names itself `owlai-dbexec` so DBAs can find OwlAI's sessions.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

SQL_MARKER = "/* OwlAI generated */"
APPLICATION_NAME = "owlai-dbexec"


class QueryError(Exception):
    """The database refused or failed the query (timeout, error, read-only violation)."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than the row cap allowed


def marked_sql(sql: str) -> str:
    return f"{SQL_MARKER}\n{sql.strip().rstrip(';').rstrip()}"


def execute_readonly(*, engine: str, dsn: str, sql: str, row_cap: int, timeout_ms: int) -> QueryResult:
    runner = {"postgresql": _run_postgresql, "mysql": _run_mysql, "sqlite": _run_sqlite}.get(engine)
    if runner is None:
        raise QueryError(f"unsupported engine: {engine}")
    return runner(dsn=dsn, sql=marked_sql(sql), row_cap=row_cap, timeout_ms=timeout_ms)


def _fetch_capped(cursor: Any, row_cap: int) -> QueryResult:
    columns = [d[0] for d in (cursor.description or [])]
    rows = [tuple(r) for r in cursor.fetchmany(row_cap + 1)] if cursor.description else []
    return QueryResult(columns=columns, rows=rows[:row_cap], truncated=len(rows) > row_cap)


def _run_postgresql(*, dsn: str, sql: str, row_cap: int, timeout_ms: int) -> QueryResult:
    import psycopg

    try:
        conn = psycopg.connect(
            dsn,
            application_name=APPLICATION_NAME,
            connect_timeout=max(1, min(10, timeout_ms // 1000 or 1)),
            # Read-only and the timeout are set at session start, before any SQL.
            options=f"-c default_transaction_read_only=on -c statement_timeout={int(timeout_ms)}",
        )
    except psycopg.Error as exc:
        raise QueryError(f"connection failed: {_first_line(exc)}") from exc
    try:
        conn.read_only = True
        with conn.transaction(force_rollback=True), conn.cursor() as cursor:
            cursor.execute(sql, prepare=False)
            return _fetch_capped(cursor, row_cap)
    except psycopg.Error as exc:
        raise QueryError(_first_line(exc)) from exc
    finally:
        conn.close()


def _run_mysql(*, dsn: str, sql: str, row_cap: int, timeout_ms: int) -> QueryResult:
    import pymysql

    parts = urlsplit(dsn)
    try:
        conn = pymysql.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            database=unquote(parts.path.lstrip("/")) or None,
            program_name=APPLICATION_NAME,
            connect_timeout=10,
            read_timeout=max(1, timeout_ms // 1000 + 5),
            charset="utf8mb4",
            autocommit=False,
        )
    except pymysql.Error as exc:
        raise QueryError(f"connection failed: {exc}") from exc
    try:
        with conn.cursor() as cursor:
            # MySQL knows max_execution_time (ms), MariaDB max_statement_time (s);
            # set whichever the server has, so the timeout holds on both.
            _set_mysql_timeout(cursor, timeout_ms)
            # Under ANSI_QUOTES (alone or in the ANSI mode) "x" is an
            # identifier; sqlglot's MySQL dialect, which the guard and the
            # lineage read the SQL with, takes it for a string. Switch it off
            # so the server reads the query as they did.
            cursor.execute(
                "SET SESSION sql_mode = TRIM(BOTH ',' FROM REPLACE(REPLACE("
                "CONCAT(',', @@SESSION.sql_mode, ','), ',ANSI_QUOTES,', ','), ',ANSI,', ','))"
            )
            cursor.execute("START TRANSACTION READ ONLY")
            try:
                cursor.execute(sql)
                return _fetch_capped(cursor, row_cap)
            finally:
                conn.rollback()
    except pymysql.Error as exc:
        raise QueryError(str(exc)) from exc
    finally:
        conn.close()


def _set_mysql_timeout(cursor: Any, timeout_ms: int) -> None:
    import pymysql

    try:
        cursor.execute("SET SESSION max_statement_time = %s", (timeout_ms / 1000,))
    except pymysql.Error:
        cursor.execute("SET SESSION max_execution_time = %s", (int(timeout_ms),))


def _sqlite_path(dsn: str) -> str:
    # SQLAlchemy-style URLs: sqlite:////abs/path (absolute), sqlite:///rel/path.
    if dsn.startswith("sqlite:///"):
        return unquote(dsn[len("sqlite:///") :])
    if dsn.startswith("sqlite://"):
        raise QueryError("sqlite DSN must be sqlite:///absolute/path")
    return dsn


def _run_sqlite(*, dsn: str, sql: str, row_cap: int, timeout_ms: int) -> QueryResult:
    path = _sqlite_path(dsn)
    try:
        # mode=ro: the file cannot be written or created through this handle.
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5, check_same_thread=False)
    except sqlite3.Error as exc:
        raise QueryError(f"connection failed: {exc}") from exc
    deadline = time.monotonic() + timeout_ms / 1000
    # SQLite has no statement timeout; a progress handler that returns true
    # interrupts the statement once the deadline passes.
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
    try:
        conn.execute("PRAGMA query_only = ON")
        cursor = conn.execute(sql)
        return _fetch_capped(cursor, row_cap)
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise QueryError(f"statement timeout after {timeout_ms} ms") from exc
        raise QueryError(str(exc)) from exc
    except sqlite3.Error as exc:
        raise QueryError(str(exc)) from exc
    finally:
        conn.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__
