"""`manage.py sql_check`: every must-deny / must-allow case through the command."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.sql_cases import MUST_ALLOW, MUST_DENY

ROOT = Path(__file__).resolve().parent.parent


def run_jsonl(dialect: str, sqls: list[str]) -> list[dict]:
    stdin = io.StringIO("".join(json.dumps(s) + "\n" for s in sqls))
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdin", stdin)
        call_command("sql_check", dialect=dialect, jsonl=True, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def by_dialect(cases):
    grouped = defaultdict(list)
    for case in cases:
        grouped[case[0]].append(case)
    return grouped


def test_case_tables_are_big_enough():
    assert len(MUST_DENY) >= 40 and len(MUST_ALLOW) >= 40


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_must_deny_cases_are_denied_through_the_command(dialect):
    cases = by_dialect(MUST_DENY)[dialect]
    verdicts = run_jsonl(dialect, [sql for _, sql, *_ in cases])
    assert len(verdicts) == len(cases)
    wrongly_allowed = [sql for (_, sql, *_), v in zip(cases, verdicts, strict=True) if v["allowed"]]
    assert wrongly_allowed == []
    assert all(v["reason"] for v in verdicts)


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_must_allow_cases_are_allowed_with_their_tables(dialect):
    cases = by_dialect(MUST_ALLOW)[dialect]
    verdicts = run_jsonl(dialect, [sql for _, sql, _ in cases])
    problems = [
        (sql, v)
        for (_, sql, tables), v in zip(cases, verdicts, strict=True)
        if not v["allowed"] or v["tables"] != list(tables)
    ]
    assert problems == []


def test_bad_jsonl_line_gets_its_own_verdict_and_the_rest_run(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO('"SELECT 1"\nnot json\n42\n"DELETE FROM t"\n'))
    out = io.StringIO()
    call_command("sql_check", dialect="postgres", jsonl=True, stdout=out)
    verdicts = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [v["allowed"] for v in verdicts] == [True, False, False, False]
    assert "line 2" in verdicts[1]["reason"] and "line 3" in verdicts[2]["reason"]


def test_single_sql_on_real_stdin():
    result = subprocess.run(
        [sys.executable, "manage.py", "sql_check", "--dialect", "postgres"],
        input="WITH c AS (SELECT * FROM customers) SELECT * FROM c JOIN public.orders o ON true",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"allowed": True, "reason": "", "tables": ["customers", "public.orders"]}
