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
