"""The README's production block, run as written, and what it relies on: the
production profile refuses the offline demo model unless the install config
enables it on that provider."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from owlai.install_config import InstallConfigError, parse_install_config, production_demo_problem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "owlai.example.toml"
DEMO = '[[providers]]\nname = "demo"\nkind = "offline-demo"\ntier = "private"\nmodels = ["owlai-offline-demo"]\n'


def manage_check(config: Path, *, production: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "OWLAI_"))}
    env.update(OWLAI_CONFIG=str(config), SECRET_KEY="x")
    if production:
        # Settings refuse before any connection is made: the database need not exist.
        env.update(DATABASE_URL="postgres://nobody@127.0.0.1:1/none", REDIS_URL="redis://127.0.0.1:1/0")
    else:
        env["OWLAI_VAR_DIR"] = str(config.parent / "var")
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_refuses_the_example_configs_demo_model(tmp_path):
    result = manage_check(EXAMPLE, production=True)
    assert result.returncode != 0
    output = result.stderr + result.stdout
    assert str(EXAMPLE) in output  # the file
    assert "allow_in_production = true" in output  # the key that enables it
    assert "offline demo" in output


def test_the_flag_on_the_demo_provider_lets_production_start(tmp_path):
    config = tmp_path / "owlai.toml"
    config.write_text(
        EXAMPLE.read_text().replace('kind = "offline-demo"\n', 'kind = "offline-demo"\nallow_in_production = true\n')
    )
    result = manage_check(config, production=True)
    assert "allow_in_production" not in result.stderr + result.stdout
    assert "System check identified no issues" in result.stdout, result.stderr


def test_the_embedded_profile_keeps_the_example_config(tmp_path):
    result = manage_check(EXAMPLE, production=False)
    assert result.returncode == 0, result.stderr


def test_the_flag_applies_to_the_demo_provider_only():
    assert production_demo_problem(parse_install_config(DEMO)) is not None
    assert (
        production_demo_problem(parse_install_config(DEMO.replace("models", "allow_in_production = true\nmodels")))
        is None
    )
    openai = '[[providers]]\nname = "p"\nkind = "openai"\ntier = "private"\nbase_url = "http://m/v1"\nmodels = ["m"]\n'
    assert production_demo_problem(parse_install_config(openai)) is None
    with pytest.raises(InstallConfigError, match="allow_in_production"):
        parse_install_config(openai.replace("models", "allow_in_production = true\nmodels"))
    with pytest.raises(InstallConfigError, match="true or false"):
        parse_install_config(DEMO.replace("models", 'allow_in_production = "yes"\nmodels'))
