"""`manage.py sql_check --dialect D`: the read-only SQL verdict as JSON.

Reads one SQL text on stdin and prints {"allowed", "reason", "tables"}; with
--jsonl, every stdin line is a JSON string holding one SQL text and every
output line is its verdict (a bad line gets a verdict with its error, and the
rest still run).
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand

from governance.sql.guard import SUPPORTED_DIALECTS, analyse_sql


class Command(BaseCommand):
    help = "Check SQL read from stdin with the executor's read-only analysis and print JSON verdicts."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dialect", required=True, choices=SUPPORTED_DIALECTS)
        parser.add_argument("--jsonl", action="store_true", help="one JSON string of SQL per input line")

    def handle(self, *args, dialect: str, jsonl: bool, **options) -> None:
        stdin = sys.stdin
        if not jsonl:
            self.stdout.write(json.dumps(analyse_sql(stdin.read(), dialect).as_dict(), ensure_ascii=False))
            return
        for number, line in enumerate(stdin, start=1):
            if not line.strip():
                continue
            try:
                sql = json.loads(line)
                if not isinstance(sql, str):
                    raise ValueError("not a JSON string")
            except ValueError as exc:
                verdict = {
                    "allowed": False,
                    "reason": f"line {number}: input is not a JSON string ({exc})",
                    "tables": [],
                }
            else:
                verdict = analyse_sql(sql, dialect).as_dict()
            self.stdout.write(json.dumps(verdict, ensure_ascii=False))
