"""The Korean catalogue is complete: every message has a translation and
none is a fuzzy guess (a fuzzy entry is ignored at run time, so the screen
would show English). English is the source language: its catalogue may stay
empty, but never holds a fuzzy guess either."""

from __future__ import annotations

from pathlib import Path

import pytest

LOCALE = Path(__file__).resolve().parent.parent / "locale"


def _entries(path: Path) -> list[dict]:
    entries, current, field = [], None, None
    for raw in path.read_text(encoding="utf-8").splitlines() + [""]:
        line = raw.strip()
        if not line:
            if current:
                entries.append(current)
            current, field = None, None
            continue
        current = current or {"flags": "", "msgid": "", "msgstr": "", "obsolete": False}
        if line.startswith("#~"):
            current["obsolete"] = True
        elif line.startswith("#,"):
            current["flags"] += line[2:]
        elif line.startswith("#"):
            continue
        elif line.startswith(("msgid_plural", "msgctxt")):
            field = None
        elif line.startswith("msgid "):
            field = "msgid"
            current[field] = line[len("msgid ") :].strip('"')
        elif line.startswith("msgstr"):
            field = "msgstr"
            current[field] += line.split(" ", 1)[1].strip('"')
        elif line.startswith('"') and field:
            current[field] += line.strip('"')
    return [e for e in entries if e["msgid"] and not e["obsolete"]]


@pytest.mark.parametrize("language", ["ko", "en"])
def test_no_fuzzy_entries(language):
    entries = _entries(LOCALE / language / "LC_MESSAGES" / "django.po")
    assert entries
    assert [e["msgid"] for e in entries if "fuzzy" in e["flags"]] == []


def test_korean_catalogue_is_complete():
    entries = _entries(LOCALE / "ko" / "LC_MESSAGES" / "django.po")
    assert [e["msgid"] for e in entries if not e["msgstr"]] == []


# --- Nothing user-facing escapes the catalogues ---------------------------------

import ast  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

ROOT = LOCALE.parent
HANGUL = re.compile(r"[\uac00-\ud7a3\u3131-\u318e]")
# Words a Korean translation keeps as written: names of things, not English prose.
KEPT_WORDS = {
    "owlai", "sql", "csv", "api", "json", "url", "dsn", "hmac", "iso", "utc", "id", "ids", "ip", "pii",
    "select", "from", "into", "for", "update", "share", "table", "with", "bearer", "owlai_", "websocket",
    "django", "openai", "redoc", "swagger", "mariadb", "mysql", "postgresql", "sqlite", "toml",
}  # fmt: skip
_PLACEHOLDER = re.compile(r"%\(\w+\)[sdrf]|%[sdrf]|\{\w*\}|<[^>]+>|`[^`]*`")


def _english_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[A-Za-z][A-Za-z_]{2,}", _PLACEHOLDER.sub(" ", text)) if w.lower() not in KEPT_WORDS]


@pytest.mark.parametrize("language", ["ko", "en"])
def test_english_is_the_source_language(language):
    """A Korean msgid would reach English users untranslated (their catalogue
    may leave msgstr empty): every msgid is English."""
    entries = _entries(LOCALE / language / "LC_MESSAGES" / "django.po")
    assert [e["msgid"] for e in entries if HANGUL.search(e["msgid"])] == []


def test_korean_translations_are_korean():
    """A Korean msgstr that is the English text again (copied to silence the
    completeness check) is as untranslated as an empty one."""
    entries = _entries(LOCALE / "ko" / "LC_MESSAGES" / "django.po")
    copied = [e["msgid"] for e in entries if _english_words(e["msgid"]) and not HANGUL.search(e["msgstr"])]
    assert copied == []


def test_every_translatable_string_in_the_source_is_translated(tmp_path):
    """makemessages over a copy of the source: a string marked for
    translation but missing from the committed catalogues (or changed since)
    comes out empty or fuzzy, i.e. shown untranslated at run time."""
    if shutil.which("xgettext") is None or shutil.which("msgmerge") is None:
        if os.environ.get("OWLAI_REQUIRE_SERVICES") == "1":
            pytest.fail("gettext tools (xgettext, msgmerge) are required")
        pytest.skip("gettext tools (xgettext, msgmerge) are not installed")
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT,
        copy,
        ignore=shutil.ignore_patterns(".git", ".venv", "var", "staticfiles", "tests", "__pycache__", "*.mo", "bench"),
    )
    env = {**os.environ, "SECRET_KEY": os.environ.get("SECRET_KEY", "t")}
    result = subprocess.run(
        [sys.executable, "manage.py", "makemessages", "-l", "ko", "-l", "en", "--ignore=.venv", "--no-obsolete"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for language in ("ko", "en"):
        committed = {e["msgid"] for e in _entries(LOCALE / language / "LC_MESSAGES" / "django.po")}
        regenerated = _entries(copy / "locale" / language / "LC_MESSAGES" / "django.po")
        assert sorted(e["msgid"] for e in regenerated if e["msgid"] not in committed) == [], language
        if language == "ko":
            assert [e["msgid"] for e in regenerated if not e["msgstr"] or "fuzzy" in e["flags"]] == []


# Modules whose Korean literals are data, not interface text: the personal-data
# vocabulary (token labels, detector context words, name hints), the demo
# company's content and the demo model's Korean command word.
KOREAN_DATA_MODULES = {
    "governance/pii/kinds.py",
    "governance/pii/detectors.py",
    "governance/pii/detect/match.py",
    "governance/pii/detect/patterns.py",
    "governance/pii/detect/prefilter.py",
    "governance/pii/detect/fold.py",
    "governance/pii/detect/labels.py",
    "governance/pii/detect/obfuscated.py",
    "governance/pii/detect/pipeline.py",
    "governance/pii/detect/rules.py",
    "governance/pii/masking.py",
    "governance/schema_analysis.py",
    "governance/demo_company.py",
    "governance/management/commands/seed_demo.py",
    "chat/demo_model.py",
    "owlai/korean.py",  # the particles themselves
    "playbooks/demo.py",
}
_GETTEXT = {"_", "gettext", "gettext_lazy", "ngettext", "ngettext_lazy", "pgettext", "pgettext_lazy", "gettext_noop"}


def _source_files():
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith((".venv/", "tests/", "bench/", "var/")) or "/migrations/" in relative:
            continue
        yield relative, ast.parse(path.read_text(encoding="utf-8"))


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def test_no_korean_interface_text_outside_the_catalogues():
    """Korean shown to people is a translation of an English msgid. A Korean
    literal in the code would reach English users as is; only the data
    modules above may hold Korean (and never inside gettext)."""
    found = []
    for relative, tree in _source_files():
        inside_gettext = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _call_name(node) in _GETTEXT:
                inside_gettext.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and HANGUL.search(node.value)):
                continue
            if id(node) in inside_gettext:
                found.append(f"{relative}:{node.lineno} Korean msgid {node.value[:40]!r}")
            elif relative not in KOREAN_DATA_MODULES and not _is_docstring(tree, node):
                found.append(f"{relative}:{node.lineno} {node.value[:40]!r}")
    assert found == []


def _is_docstring(tree: ast.AST, constant: ast.Constant) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and first.value is constant:
                return True
    return False


# Calls whose message argument is shown to a person: it must be translated
# (a gettext call, or a variable holding a translated text), never a literal.
_USER_FACING_SINKS = {
    # name: index of the message argument
    "TurnRefused": 0,
    "GovernanceError": 0,
    "ValidationError": 0,
    "PermissionDenied": 0,
    "AuthenticationFailed": 0,
    "ModelError": 0,
    "ModelTimeoutError": 0,
    "ModelConnectionError": 0,
    "ModelStatusError": 0,
    "ModelStreamError": 0,
    "ModelLimitError": 0,
    "_reject": 2,
    "_fail": 2,
    "_error": 1,
    "_rate_limited": 0,
    "message_user": 1,
    "success": 1,
    "warning": 1,
    "error": 1,
    "info": 1,
}
# Files other helpers own right now; their literals are listed in the report.
_SINK_EXEMPT_FILES = {"chat/executor.py"}


def _is_literal_text(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(re.search(r"[A-Za-z]{2,}", node.value))
    if isinstance(node, ast.JoinedStr):
        return any(_is_literal_text(v) for v in node.values if isinstance(v, ast.Constant))
    if isinstance(node, ast.BinOp):
        return _is_literal_text(node.left) or _is_literal_text(node.right)
    return False


def test_messages_shown_to_people_are_translated():
    found = []
    for relative, tree in _source_files():
        if relative in _SINK_EXEMPT_FILES:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            index = _USER_FACING_SINKS.get(_call_name(node))
            if index is None or index >= len(node.args):
                continue
            if _call_name(node) in {"success", "warning", "error", "info"} and not (
                isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "messages"
            ):
                continue  # only django.contrib.messages
            if _is_literal_text(node.args[index]):
                found.append(f"{relative}:{node.lineno} {_call_name(node)}")
    assert found == []
