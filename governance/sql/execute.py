"""The execution layer: run one already-checked query on a customer database.

This is the second read-only layer. Whatever the parser missed, the session
here cannot write: PostgreSQL and MySQL run the statement in a READ ONLY
transaction that is always rolled back; SQLite opens the file read-only with
`query_only`. Every statement carries the DBA marker comment and the
connection names itself `owlai-dbexec` so DBAs can find OwlAI's sessions.

Sessions pin the settings the guard and the re-identification assume when
they read and render SQL: PostgreSQL `standard_conforming_strings=on` (a
backslash in a literal is a character, never an escape) and a `search_path`
of the connection's configured schemas; MySQL a fixed `sql_mode` (no
ANSI_QUOTES, no NO_BACKSLASH_ESCAPES, no PIPES_AS_CONCAT). A DBA's role or
server default cannot change how a checked statement is read.

Errors carry no values: a failed statement raises QueryError with the
engine's error class (SQLSTATE, MySQL error number, SQLite error name) and
only the first line of the message, every quoted part of it removed unless
it is a table or column name of the connection's schema or a keyword
(`scrub_error_message`, `schema_words`). A
database quotes the value it choked on (`invalid input syntax for type
integer: "김민준"`), and that message goes to the model and the audit trail.

`account_risks` reports what a connection's account may do beyond reading
(superuser, server files, programs): such a DSN is refused at registration,
analysis and execution.
"""

from __future__ import annotations

import itertools
import math
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from governance.sql.binding import BindError, Bound, bind_postgres
from governance.sql.bounds import Collected, CutCounter, FetchBounds, collect, pg_register_cutting_loaders
from governance.sql.catalog_check import user_code_text
from governance.sql.execution_connect import (
    APPLICATION_NAME,  # noqa: F401 (named here by tests and DBAs' docs)
    Deadline,
    EngineError,
    Limits,
    limits,
    mysql_class,
    mysql_connect,
    mysql_message,
    pg_class,
    pg_connect,
    pg_primary,
)

SQL_MARKER = "/* OwlAI generated */"
BIND_REFUSED = "the statement cannot be bound to the platform's functions"
BIND_ERROR_CLASS = "OWLAI_BIND"
USER_CODE_REFUSED = "the statement could run code defined in the database"


class QueryError(Exception):
    """The database refused or failed the query (timeout, error, read-only
    violation). `error_class` is the engine's code (SQLSTATE, MySQL error
    number, SQLite error name) and `message` is value-free (see
    scrub_error_message); str() is both."""

    def __init__(self, message: str, error_class: str = "") -> None:
        self.error_class = error_class
        self.message = message
        super().__init__(f"[{error_class}] {message}" if error_class else message)


class UnsafeAccount(QueryError):
    """The connection's account may do more than read (superuser, files, programs)."""


class Unreachable(QueryError):
    """The server failed the call before any answer: no session could be
    made (unreachable, no answer, the login refused), or it went silent past
    the deadline (execution_connect)."""


def _leaving(error: EngineError, allowed_words: frozenset[str] | Callable[[], frozenset[str]] = frozenset()):
    """The QueryError an engine error leaves this module as: scrubbed,
    unless in our own words."""
    kind = Unreachable if error.unreachable else QueryError
    if error.ours:
        return kind(error.message, error.error_class)
    words = allowed_words() if callable(allowed_words) else allowed_words
    return kind(scrub_error_message(error.message, words), error.error_class)


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than the row cap (or the character budget) allowed
    cut_cells: int = 0  # cells cut to the character budget (each carries a marker)
    cut_characters: int = 0


# A quoted part of an error message ('...', "..." or `...`, quotes doubled
# inside), or a quote left open up to the end of the line.
_QUOTED = re.compile(r"""(?P<closed>'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`)|['"`].*\Z""", re.S)
# PostgreSQL prints unquoted values in parentheses after a key ("Key
# (email)=(a@b.c)"); those are DETAIL lines, dropped anyway, but cheap to cover.
_PARENTHESISED_VALUE = re.compile(r"=\([^)]*\)")
ELIDED = '"…"'


def statement_words(sql: str, dialect: str) -> frozenset[str]:
    """The identifiers and keywords a statement names (casefolded), never its
    string literals or comments: the words an error message may quote back."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType

    literal_types = {TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING, TokenType.BYTE_STRING}
    literal_types |= {TokenType.HEX_STRING, TokenType.BIT_STRING, TokenType.HEREDOC_STRING}
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception:
        return frozenset()  # nothing is kept: every quoted part is elided
    return frozenset(t.text.casefold() for t in tokens if t.token_type not in literal_types and t.text)


def schema_words(schema: dict[str, dict[str, Any]], dialect: str = "") -> frozenset[str]:
    """What an error message may quote back: the names of the connection's
    own tables and columns (casefolded) and the dialect's keywords. Never the
    statement's own words: a cell value the statement also names as an
    alias ("... AS 김민준") would otherwise be kept, one guess per query."""
    words: set[str] = set(_dialect_keywords(dialect))
    for table, columns in (schema or {}).items():
        words.update(part.casefold() for part in str(table).split(".") if part)
        words.update(str(column).casefold() for column in (columns or {}))
    return frozenset(words)


def _dialect_keywords(dialect: str) -> frozenset[str]:
    from sqlglot.dialects.dialect import Dialect

    try:
        keywords = Dialect.get_or_raise(dialect or None).tokenizer_class.KEYWORDS
    except Exception:
        return frozenset()
    return frozenset(k.casefold() for k in keywords if k.replace("_", "").isalpha())


def scrub_error_message(message: str, allowed_words: frozenset[str] = frozenset()) -> str:
    """The first line of `message`, value-free. A server prints the value it
    failed on, quoted (`invalid input syntax for type integer: "김민준"`) or
    not (`date field value out of range: 2020-1012345678-01`), and that
    value may be personal data or computed from it. So:
    - every quoted part becomes "…" unless it is one of `allowed_words` (the
      connection's table and column names, see schema_words);
    - whatever follows the first ": " becomes "…" unless it is made only of
      allowed words (SQLite: `no such column: nme`);
    - every number left becomes "…"."""
    text = (message or "").strip()
    line = text.splitlines()[0] if text else ""

    def keep_or_elide(match: re.Match) -> str:
        quoted = match.group("closed")
        if quoted is None:
            return ELIDED  # an open quote: the rest of the line may be a value
        inner = quoted[1:-1].replace(quoted[0] * 2, quoted[0])
        return quoted if inner and inner.casefold() in allowed_words else ELIDED

    line = _PARENTHESISED_VALUE.sub("=(…)", _QUOTED.sub(keep_or_elide, line))
    head, colon, tail = line.partition(": ")
    if colon and not _only_allowed_words(tail, allowed_words):
        line = f"{head}: …"
    return _NUMBER.sub("…", line)[:300]


_NUMBER = re.compile(r"\d+")
_TAIL_WORD = re.compile(r"[^\s.,;()]+")


def _only_allowed_words(text: str, allowed_words: frozenset[str]) -> bool:
    words = _TAIL_WORD.findall(text)
    return bool(words) and all(word == ELIDED or word.strip('"`').casefold() in allowed_words for word in words)


def marked_sql(sql: str) -> str:
    return f"{SQL_MARKER}\n{sql.strip().rstrip(';').rstrip()}"


def execute_readonly(
    *,
    engine: str,
    dsn: str,
    sql: str,
    row_cap: int,
    timeout_ms: int,
    schemas: tuple[str, ...] = (),
    allowed_words: frozenset[str] | Callable[[], frozenset[str]] = frozenset(),
    cell_chars: int = FetchBounds.cell_chars,
    result_chars: int = FetchBounds.result_chars,
) -> QueryResult:
    """Run `sql` read-only. `schemas`: the PostgreSQL search_path (default
    `public`). `allowed_words`: what an error message may quote back (the
    connection's schema identifiers, see schema_words), or a function that
    computes them only when an error needs them; everything else quoted in
    an error is elided. At most `row_cap` rows are read (one more tells that
    there were more), each cell cut to `cell_chars` and the whole result to
    `result_chars` characters while it is fetched (governance.sql.bounds)."""
    runner = {"postgresql": _run_postgresql, "mysql": _run_mysql, "sqlite": _run_sqlite}.get(engine)
    if runner is None:
        raise QueryError(f"unsupported engine: {engine}")
    bounds = FetchBounds(row_cap=row_cap, cell_chars=cell_chars, result_chars=result_chars)
    statement: str | Bound = sql
    if engine == "postgresql":
        # What runs names pg_catalog's functions and operators (binding.py).
        try:
            statement = bind_postgres(sql)
        except BindError as error:
            raise QueryError(f"{BIND_REFUSED}: {error}", BIND_ERROR_CLASS) from error
    try:
        return runner(dsn=dsn, sql=statement, bounds=bounds, timeout_ms=timeout_ms, schemas=tuple(schemas))
    except EngineError as error:
        raise _leaving(error, allowed_words) from error


def _result(columns: list[str], collected: Collected) -> QueryResult:
    return QueryResult(
        columns=columns,
        rows=collected.rows,
        truncated=collected.truncated,
        cut_cells=collected.cut.cells,
        cut_characters=collected.cut.characters,
    )


def _rows_of(cursor: Any):
    # One row per fetch: a streaming cursor transfers only what is read.
    while (row := cursor.fetchone()) is not None:
        yield row


def _run_postgresql(
    *, dsn: str, sql: Bound, bounds: FetchBounds, timeout_ms: int, schemas: tuple[str, ...]
) -> QueryResult:
    import psycopg

    limit = limits()
    conn = pg_connect(dsn, timeout_ms=timeout_ms, schemas=schemas, bounds=limit)
    # A server gone silent mid-call (execution_connect): the statement
    # timeout plus a margin, then the socket is shut down under the reader.
    deadline = Deadline(limit.deadline_seconds(timeout_ms), conn.fileno())
    try:
        conn.read_only = True
        with deadline, conn.transaction(force_rollback=True), conn.cursor() as cursor:
            # Same transaction and search_path as the statement: what it
            # reads is what the check saw.
            check = bind_postgres(user_code_text(sql)).sql  # itself bound: the catalog check names pg_catalog's code
            found = cursor.execute(marked_sql(check), prepare=False).fetchall()
            if found:
                kinds = sorted({f"{kind} {name}" for kind, name in found})
                # Our own words and the catalog's names: nothing to scrub.
                raise QueryError(f"{USER_CODE_REFUSED}: {', '.join(kinds)}", BIND_ERROR_CLASS)
            counter = CutCounter()
            pg_register_cutting_loaders(cursor, bounds.cell_chars, counter)
            # Single-row mode: libpq holds one row at a time, and leaving the
            # stream early cancels the statement (psycopg's stream() does).
            stream = cursor.stream(marked_sql(sql.sql))
            try:
                first = next(stream, None)
                columns = [d[0] for d in (cursor.description or [])]
                rows = itertools.chain([first], stream) if first is not None else ()
                return _result(columns, collect(rows, len(columns), bounds, counter))
            finally:
                stream.close()
    except psycopg.Error as exc:
        raise (deadline.error() if deadline.expired else EngineError(pg_primary(exc), pg_class(exc))) from exc
    finally:
        conn.close()


# The sql_mode every MySQL session runs in. Fixed, not edited from the
# server's: no ANSI_QUOTES ("x" is a string, as sqlglot's MySQL dialect reads
# it), no NO_BACKSLASH_ESCAPES (a backslash escapes, as the re-identification
# renders it), no PIPES_AS_CONCAT (|| is OR), no ORACLE/MSSQL compatibility.
MYSQL_SQL_MODE = "STRICT_ALL_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"


def _mysql_connect(dsn: str, *, timeout_ms: int, bounds: Limits | None = None):
    bounds = bounds or limits()
    # The server drops a session whose client went silent (our ROLLBACK or
    # goodbye lost with the network) after the margin, idle or writing.
    idle = max(1, math.ceil(bounds.margin_seconds))
    return mysql_connect(
        dsn,
        timeout_ms=timeout_ms,
        bounds=bounds,
        init_command=(
            f"SET SESSION sql_mode = '{MYSQL_SQL_MODE}', SESSION wait_timeout = {idle},"
            f" SESSION net_write_timeout = {idle}"
        ),
    )


def _run_mysql(*, dsn: str, sql: str, bounds: FetchBounds, timeout_ms: int, schemas: tuple[str, ...]) -> QueryResult:
    import pymysql
    import pymysql.cursors

    limit = limits()
    conn = _mysql_connect(dsn, timeout_ms=timeout_ms, bounds=limit)
    # A server gone silent mid-call: see _run_postgresql.
    deadline = Deadline(limit.deadline_seconds(timeout_ms), conn._sock.fileno())
    complete, cursor = False, None
    try:
        with deadline:
            with conn.cursor() as setup:
                # MySQL knows max_execution_time (ms), MariaDB max_statement_time (s);
                # set whichever the server has, so the timeout holds on both.
                _set_mysql_timeout(setup, timeout_ms)
                setup.execute("START TRANSACTION READ ONLY")
            # Unbuffered: rows are read off the socket one by one as fetched.
            cursor = conn.cursor(pymysql.cursors.SSCursor)
            cursor.execute(marked_sql(sql))
            columns = [d[0] for d in (cursor.description or [])]
            rows = _rows_of(cursor) if cursor.description else ()
            collected = collect(rows, len(columns), bounds)
            if collected.complete:
                conn.rollback()  # under the deadline too: the server may go silent now
                complete = True
            return _result(columns, collected)
    except pymysql.Error as exc:
        raise (deadline.error() if deadline.expired else EngineError(mysql_message(exc), mysql_class(exc))) from exc
    finally:
        if complete:
            conn.close()
        else:
            # Rows left unread (or the connection failed): closing the cursor
            # would read all of them off the socket first. Dropping the
            # connection ends the statement (the server stops at its next
            # write) and its transaction.
            _mysql_drop(conn, cursor)


def _mysql_drop(conn: Any, cursor: Any) -> None:
    result = getattr(cursor, "_result", None)
    if result is not None:
        result.unbuffered_active = False  # nothing more is read, now or when the cursor is collected
    try:
        conn._force_close()
    except Exception:  # already gone
        pass


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
        raise EngineError("sqlite DSN must be sqlite:///absolute/path", "SQLITE_MISUSE")
    return dsn


def _run_sqlite(*, dsn: str, sql: str, bounds: FetchBounds, timeout_ms: int, schemas: tuple[str, ...]) -> QueryResult:
    path = _sqlite_path(dsn)
    try:
        # mode=ro: the file cannot be written or created through this handle.
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5, check_same_thread=False)
    except sqlite3.Error as exc:
        raise EngineError(f"connection failed: {exc}", _sqlite_class(exc)) from exc
    deadline = time.monotonic() + timeout_ms / 1000
    # SQLite has no statement timeout; a progress handler that returns true
    # interrupts the statement once the deadline passes.
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 10_000)
    try:
        conn.execute("PRAGMA query_only = ON")
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)  # whatever the build allows, nothing is loaded here
        cursor = conn.execute(marked_sql(sql))
        columns = [d[0] for d in (cursor.description or [])]
        # SQLite steps the statement as rows are fetched: unread rows are never computed.
        return _result(columns, collect(_rows_of(cursor), len(columns), bounds))
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise EngineError(f"statement timeout after {timeout_ms} ms", "SQLITE_INTERRUPT") from exc
        raise EngineError(str(exc), _sqlite_class(exc)) from exc
    except sqlite3.Error as exc:
        raise EngineError(str(exc), _sqlite_class(exc)) from exc
    finally:
        conn.close()


def _sqlite_class(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", "") or "SQLITE_ERROR"


# --- account hygiene --------------------------------------------------------------

# PostgreSQL predefined roles that reach outside the database.
_PG_RISKY_ROLES = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program")
_PG_ACCOUNT_SQL = (
    "SELECT r.rolsuper, "
    + ", ".join(f"pg_has_role(current_user, '{role}', 'USAGE')" for role in _PG_RISKY_ROLES)
    + " FROM pg_roles r WHERE r.rolname = current_user"
)
# MySQL/MariaDB global privileges that reach outside the database (files),
# above it (SUPER, users, shutdown) or into other sessions' statements.
_MYSQL_RISKY_PRIVILEGES = frozenset({"FILE", "SUPER", "ALL PRIVILEGES", "SHUTDOWN", "PROCESS", "CREATE USER"})
_MYSQL_ACCOUNT_SQL = (
    "SELECT DISTINCT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES "
    "WHERE GRANTEE = CONCAT(QUOTE(SUBSTRING_INDEX(CURRENT_USER(), '@', 1)), '@', "
    "QUOTE(SUBSTRING_INDEX(CURRENT_USER(), '@', -1)))"
)


def account_risks(*, engine: str, dsn: str, timeout_ms: int = 10_000) -> list[str]:
    """What this DSN's account may do beyond reading its tables, in words
    ("superuser", "pg_read_server_files", "FILE" ...); [] when nothing.
    Raises QueryError when the account cannot be inspected (the caller then
    refuses: an account that cannot be checked is not trusted)."""
    try:
        if engine == "postgresql":
            return _pg_account_risks(dsn, timeout_ms)
        if engine == "mysql":
            return _mysql_account_risks(dsn, timeout_ms)
        if engine == "sqlite":
            return []  # a file opened read-only: no account, no server
    except EngineError as error:
        raise _leaving(error) from error
    raise QueryError(f"unsupported engine: {engine}")


def _pg_account_risks(dsn: str, timeout_ms: int) -> list[str]:
    import psycopg

    bounds = limits()
    conn = pg_connect(dsn, timeout_ms=timeout_ms, bounds=bounds)
    deadline = Deadline(bounds.deadline_seconds(timeout_ms), conn.fileno())  # see _run_postgresql
    try:
        with deadline:
            row = conn.execute(_PG_ACCOUNT_SQL, prepare=False).fetchone()
    except psycopg.Error as exc:
        raise (deadline.error() if deadline.expired else EngineError(pg_primary(exc), pg_class(exc))) from exc
    finally:
        conn.close()
    if row is None:
        return ["unknown role"]
    names = ("superuser", *_PG_RISKY_ROLES)
    return [name for name, flag in zip(names, row, strict=True) if flag]


def _mysql_account_risks(dsn: str, timeout_ms: int) -> list[str]:
    import pymysql

    bounds = limits()
    conn = _mysql_connect(dsn, timeout_ms=timeout_ms, bounds=bounds)
    deadline = Deadline(bounds.deadline_seconds(timeout_ms), conn._sock.fileno())  # see _run_postgresql
    try:
        with deadline, conn.cursor() as cursor:
            # USER_PRIVILEGES lists the current account's global privileges on
            # MySQL and MariaDB alike.
            cursor.execute(_MYSQL_ACCOUNT_SQL)
            privileges = {str(row[0]).upper() for row in cursor.fetchall()}
    except pymysql.Error as exc:
        raise (deadline.error() if deadline.expired else EngineError(mysql_message(exc), mysql_class(exc))) from exc
    finally:
        conn._force_close()  # nothing to roll back (no transaction was begun)
    return sorted(privileges & _MYSQL_RISKY_PRIVILEGES)
