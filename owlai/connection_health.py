"""The application database connection after the database went away (a
restart, a failover, a cut network): a broken connection is noticed and
replaced, and the few writes that must not be lost with it (a turn's claim
and its end) wait for the database to come back.

Django checks a connection's health only at the first query after a
request or task boundary (CONN_HEALTH_CHECKS), and only through its own
cursors; a long turn runs minutes past that boundary, and owlai.prepared
uses psycopg cursors. So:

- `renew_if_broken`: after a query failed on this connection
  (`errors_occurred`), the next statement first asks whether the connection
  still works and opens a new one if not. Outside a transaction only: inside
  one, the transaction is lost with its connection anyway.
- `until_answered`: repeat a write that may be repeated (a conditional
  transition: a second run that finds it done changes nothing) on a fresh
  connection until the database answers or `seconds` pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connection, connections

logger = logging.getLogger(__name__)

T = TypeVar("T")

# What a lost or refused connection raises through Django (psycopg's errors
# wrapped): the server went away, could not be reached, or cut the session.
CONNECTION_LOST = (OperationalError, InterfaceError)


def renew_if_broken() -> None:
    """Close this thread's connection if a query failed on it and it no
    longer answers, so the next statement opens a new one."""
    db = connections[DEFAULT_DB_ALIAS]  # once: the `connection` proxy looks it up at every attribute
    if db.connection is None or not db.errors_occurred or db.in_atomic_block:
        return
    if db.is_usable():
        db.errors_occurred = False
    else:
        logger.warning("the database connection was lost; opening a new one")
        db.close()


def until_answered(write: Callable[[], T], *, seconds: float, what: str) -> T:
    """`write()`, again on a new connection after each lost-connection error,
    until it runs or `seconds` pass (then the last error is raised). Only for
    writes that may run twice: the first may have committed before its
    answer was lost."""
    deadline = time.monotonic() + seconds
    pause = 0.2
    while True:
        try:
            return write()
        except CONNECTION_LOST as error:
            if connection.in_atomic_block or time.monotonic() + pause > deadline:
                raise
            logger.warning("%s: the database did not answer (%s); trying again", what, str(error).strip()[:200])
        _close_quietly()
        time.sleep(pause)
        pause = min(pause * 2, 1.0)  # within about a second of the database's return


def _close_quietly() -> None:
    try:
        connection.close()
    except Exception:  # already gone (Django drops it either way): the next statement connects anew
        logger.debug("closing a lost connection failed", exc_info=True)
