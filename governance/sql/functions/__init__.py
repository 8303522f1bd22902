"""The per-dialect function allowlists of the read-only SQL guard.

One text file per dialect (``postgres.txt``, ``mysql.txt``, ``sqlite.txt``):
one function name per line, lower case, as the server is called with it;
``#`` starts a comment, blank lines are ignored. A name belongs in a file only
when every overload the server has under that name is read-only, has no side
effect outside the statement (no files, network, locks, sequences, session or
server settings, random state) and cannot run SQL given to it as text.

The files are data on purpose: reviewers read a list of names, and the tests
check the PostgreSQL list against pg_proc and the SQLite list against
pragma_function_list on a real server.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from governance.sql.dialects import SUPPORTED_DIALECTS

_DIR = Path(__file__).resolve().parent
_NAME = re.compile(r"[a-z_][a-z0-9_]*")


class AllowlistError(ValueError):
    """A function allowlist file is malformed (a programming error)."""


def parse_allowlist(text: str, source: str = "<text>") -> frozenset[str]:
    names: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        # Refuse anything but a plain lower-case name: a typo such as
        # "pg_catalog.lower" or "Lower" would otherwise never match and make a
        # reviewer believe a function is allowed when it is not, or vice versa.
        if not _NAME.fullmatch(line):
            raise AllowlistError(f"{source}:{number}: not a lower-case function name: {line!r}")
        if line in names:
            raise AllowlistError(f"{source}:{number}: duplicate name {line!r}")
        names.add(line)
    return frozenset(names)


def allowlist_path(dialect: str) -> Path:
    if dialect not in SUPPORTED_DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r}")
    return _DIR / f"{dialect}.txt"


@cache
def allowed_functions(dialect: str) -> frozenset[str]:
    """The function names the guard lets a query call in ``dialect``."""
    path = allowlist_path(dialect)
    return parse_allowlist(path.read_text(encoding="utf-8"), source=path.name)


@cache
def allowed_settings() -> frozenset[str]:
    """The PostgreSQL settings current_setting() may read
    (governance/sql/postgres_settings.txt; this folder holds function lists only)."""
    path = _DIR.parent / "postgres_settings.txt"
    return parse_allowlist(path.read_text(encoding="utf-8"), source=path.name)
