"""Helpers for fault tests on the production stack (tests/test_reliability_faults.py):
a scripted model that counts the tool calls it asked for, the resident memory
of a process tree, a lock held on an audit table from a separate connection,
the message a worker shows in a turn's language, and the "no customer query
ran unrecorded" check."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

from tests.support.fake_llm import Fault, Reply


class CountingScript:
    """Steps for FakeLLMServer.script that count the tool calls the model
    requested (a Reply with tool calls, or a huge tool-argument fault)."""

    def __init__(self) -> None:
        self.tool_calls = 0
        self._lock = threading.Lock()

    def wrap(self, steps: list) -> list:
        return [self._counted(step) for step in steps]

    def _counted(self, step):
        def serve(body: dict):
            if isinstance(step, Reply):
                calls = len(step.tool_calls)
            else:
                calls = int(isinstance(step, Fault) and step.kind == "huge_tool_argument")
            with self._lock:
                self.tool_calls += calls
            return step

        return serve


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return kids


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it (a prefork worker's pool children)."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += _children(current)
    return tree


def rss_kib(pid: int) -> dict[int, int]:
    """VmRSS (KiB) of every process in the tree under `pid`."""
    sizes = {}
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes[p] = int(line.split()[1])
        except OSError:
            continue
    return sizes


@contextmanager
def table_locked(dsn: str, table: str):
    """ACCESS EXCLUSIVE on `table`, held by a separate connection until the block ends."""
    import psycopg
    from psycopg import sql

    conn = psycopg.connect(dsn)
    try:
        conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(table)))
        yield conn
    finally:
        conn.rollback()
        conn.close()


def app_db_dsn(user: str | None = None) -> str:
    from django.db import connection

    s = connection.settings_dict
    auth = user or s["USER"]
    if s["PASSWORD"] and not user:
        auth += f":{s['PASSWORD']}"
    return f"postgresql://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def in_turn_language(turn_id: int, msgid: str, **params) -> str:
    """`msgid` (with `params`) as the worker wrote it for this turn."""
    from django.conf import settings
    from django.utils import translation

    from chat.models import Turn

    language = Turn.objects.get(pk=turn_id).language or settings.LANGUAGE_CODE
    with translation.override(language):
        message = translation.gettext(msgid)
    return message % params if params else message


def failure(events: list[dict]) -> tuple[dict, dict]:
    """(error event, turn.finished) of a turn that must have failed visibly."""
    finished, error = events[-1], events[-2]
    assert finished["type"] == "turn.finished" and finished["status"] == "failed", events[-3:]
    assert error["type"] == "error" and error["code"] == "turn_failed", events[-3:]
    return error, finished


def assert_no_query_ran_unrecorded(*, requested: int, written: bool = True, told: bool = True) -> None:
    """Every attempt row has its outcome or shows "no outcome recorded";
    every requested tool call has its audit row (when the trail was writable),
    and the client was told how each call ended."""
    from audit.models import FINAL_OUTCOMES, NO_OUTCOME, ToolCallAudit
    from chat.models import TurnEvent

    rows = list(ToolCallAudit.objects.order_by("id"))
    for row in rows:
        assert row.call_outcome in (*FINAL_OUTCOMES, NO_OUTCOME), (row.pk, row.outcome, row.call_outcome)
    if written:
        assert len(rows) == requested, (len(rows), requested)
        if told:  # (a call whose outcome could not be recorded has no tool.finished: the turn failed)
            assert TurnEvent.objects.filter(type="tool.finished").count() == requested


def wait_exit(proc, timeout: float) -> int | None:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if proc.poll() is not None:
            return proc.returncode
        time.sleep(0.1)
    return None
