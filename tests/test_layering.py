"""Imports only go down: owlai <- audit <- accounts <- governance <- chat. A lower layer
never imports a higher one (migrations included), so each concern has one
home and the dependency graph stays readable from the file tree. The project
package's entry points (ASGI, Celery, URLs), which wire the apps together,
are the exception."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["owlai", "audit", "accounts", "governance", "chat", "playbooks", "sharing", "feedback", "agentapi"]
WIRING = {"owlai/asgi.py", "owlai/celery.py", "owlai/urls.py"}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_only_layers_below_it(layer):
    higher = set(LAYERS[LAYERS.index(layer) + 1 :])
    offenders = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in WIRING:
            continue
        climbed = _imported_packages(path) & higher
        if climbed:
            offenders.append(f"{relative} imports {sorted(climbed)}")
    assert offenders == []


def test_personal_data_handling_has_one_home():
    """Detectors, lineage, known values, masking, re-identification and the
    kinds live in governance/pii; nothing else defines them."""
    home = ROOT / "governance" / "pii"
    pii = {path.stem for path in home.glob("*.py")} | {path.parent.name for path in home.glob("*/__init__.py")}
    assert {"kinds", "detectors", "lineage", "known_values", "masking", "reidentify"} <= pii
    for stray in ("chat/masking.py", "chat/reidentify.py", "governance/pii_detectors.py", "governance/sql_lineage.py"):
        assert not (ROOT / stray).exists(), stray
