"""Install config: parsing, loud failures at every entry point, sync to the DB."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from governance.models import FeatureDefault, LlmModel, Provider
from governance.services import GovernanceError, feature_default_set, install_config_sync, model_set_enabled
from owlai.install_config import InstallConfigError, load_install_config, parse_install_config

ROOT = Path(__file__).resolve().parent.parent

VALID = """
[observability]
accessLogRetentionDays = 1200

[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "http://10.0.0.5:8000/v1"
api_key_env = "ONPREM_KEY"
models = [{ name = "qwen", label = "Qwen" }, "llama"]

[[providers]]
name = "cloud"
kind = "openai"
tier = "public"
base_url = "https://api.example.com/v1"
models = ["gpt"]
"""


COMMAND = """
[[connector_commands]]
name = "crm"
command = "/opt/mcp/crm"
args = ["--stdio"]
env = ["CRM_TOKEN"]
"""


def test_connector_commands_parse():
    (spec,) = parse_install_config(VALID + COMMAND).connector_commands
    assert (spec.name, spec.command, spec.args, spec.env, spec.cwd) == (
        "crm",
        "/opt/mcp/crm",
        ("--stdio",),
        ("CRM_TOKEN",),
        "",
    )
    assert parse_install_config(VALID).connector_commands == ()


def test_example_file_is_valid():
    config = load_install_config(ROOT / "owlai.example.toml")
    assert config.access_log_retention_days == 1095
    assert [p.tier for p in config.providers] == ["private"]


def test_valid_config_parses():
    config = parse_install_config(VALID)
    assert config.access_log_retention_days == 1200
    assert [(p.name, p.tier) for p in config.providers] == [("onprem", "private"), ("cloud", "public")]
    assert [m.name for m in config.providers[0].models] == ["qwen", "llama"]
    assert config.providers[0].api_key_env == "ONPREM_KEY"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[providers]\nname=", "not valid TOML"),
        (VALID.replace('tier = "public"', 'tier = "semi-private"'), "unknown tier 'semi-private'"),
        (VALID.replace('name = "cloud"', 'name = "onprem"'), "duplicate provider name 'onprem'"),
        (VALID.replace('"llama"', '"qwen"'), "duplicate model name 'qwen'"),
        (VALID.replace('kind = "openai"', 'kind = "magic"', 1), "unknown kind 'magic'"),
        (VALID.replace('base_url = "http://10.0.0.5:8000/v1"', ""), "'base_url' must be an http(s) URL"),
        ("[observability]\naccessLogRetentionDays = 1095\n", "at least one [[providers]]"),
        (VALID.replace("1200", "30"), "accessLogRetentionDays = 30 is below"),
        (VALID + '\n[roles]\nembedding = { provider = "nope", model = "x" }\n', "unknown provider 'nope'"),
        (VALID + COMMAND.replace("/opt/mcp/crm", "bin/crm"), "'command' must be an absolute path"),
        (VALID + COMMAND.replace('"CRM_TOKEN"', '"CRM TOKEN"'), "'CRM TOKEN' is not an environment variable name"),
        (VALID + COMMAND + COMMAND, "duplicate connector command name 'crm'"),
        (VALID + COMMAND.replace('args = ["--stdio"]', 'args = "--stdio"'), "'args' must be a list of strings"),
    ],
)
def test_bad_config_names_the_problem(text, message):
    with pytest.raises(InstallConfigError) as info:
        parse_install_config(text)
    assert message in str(info.value)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(InstallConfigError, match="cannot read install config"):
        load_install_config(tmp_path / "nope.toml")


def test_bad_config_stops_manage_py(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(VALID.replace('tier = "public"', 'tier = "external"'))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(OWLAI_CONFIG=str(bad), OWLAI_SQLITE_PATH=str(tmp_path / "db.sqlite3"))
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "unknown tier 'external'" in result.stderr


@pytest.mark.django_db
def test_sync_mirrors_config_and_keeps_admin_choices():
    install_config_sync(config=parse_install_config(VALID))
    assert Provider.objects.get(name="cloud").tier == "public"
    qwen = LlmModel.objects.get(name="qwen")
    assert qwen.tier == "private" and qwen.enabled
    model_set_enabled(model=qwen, enabled=False)
    # The file changes a tier and drops a model: tier follows the file,
    # the admin's enable flag survives, the dropped model is marked, not deleted.
    changed = VALID.replace('tier = "private"', 'tier = "public"').replace(', "llama"', "")
    install_config_sync(config=parse_install_config(changed))
    qwen.refresh_from_db()
    assert qwen.tier == "public" and qwen.enabled is False
    assert LlmModel.objects.get(name="llama").in_config is False
    assert set(FeatureDefault.objects.values_list("feature", flat=True)) == {"chat", "db_analysis", "meeting_summary"}


@pytest.mark.django_db
def test_feature_default_only_among_enabled_models():
    install_config_sync(config=parse_install_config(VALID))
    qwen, gpt = LlmModel.objects.get(name="qwen"), LlmModel.objects.get(name="gpt")
    feature_default_set(feature="db_analysis", model=qwen)
    model_set_enabled(model=gpt, enabled=False)
    with pytest.raises(GovernanceError):
        feature_default_set(feature="chat", model=gpt)
    # Disabling a default model clears the default instead of leaving it dangling.
    model_set_enabled(model=qwen, enabled=False)
    assert FeatureDefault.objects.get(feature="db_analysis").model is None
