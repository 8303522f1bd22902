"""Install config: what must not change by a click in the admin.

The file (TOML, path in ``OWLAI_CONFIG``) declares model providers with their
tier, their models, the embedding / speech-to-text roles, audit retention and
the commands that stdio connectors may run (the admin picks one by name and
never types a command line).
This module is pure Python so settings can load it before Django starts, and so
every entry point (web, worker, manage.py) fails the same way on a bad file.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

# Provider tiers: `private` stays on-prem, `public` leaves the network. The
# one definition; governance.models.Tier gives them translated labels.
PRIVATE, PUBLIC = "private", "public"
TIERS = (PRIVATE, PUBLIC)


class ProviderKind(StrEnum):
    """How OwlAI talks to a model provider: the one list of provider kinds
    (the config's `kind`, the stored Provider.kind, the client chosen)."""

    OPENAI = "openai"  # any OpenAI-compatible HTTP API (vLLM, llama.cpp, OpenAI)
    OFFLINE_DEMO = "offline-demo"  # the built-in scripted model, no network


DEMO_KIND = ProviderKind.OFFLINE_DEMO
PROVIDER_KINDS = tuple(kind.value for kind in ProviderKind)
# Access records are kept at least three years; a shorter value must stop
# start-up rather than silently lose its meaning.
MIN_RETENTION_DAYS = 1095
FEATURES = ("chat", "db_analysis", "meeting_summary")


class InstallConfigError(Exception):
    """The install config is unusable; the message names the problem."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    label: str
    # Characters of history re-sent to this model per call; None: the default
    # (OWLAI_HISTORY_CHARS).
    history_chars: int | None = None


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    kind: str
    tier: str
    base_url: str
    api_key_env: str
    models: tuple[ModelSpec, ...]
    # Offline demo only: a production install (DATABASE_URL set) offers it to
    # its users only when the file says so (see production_demo_problem).
    allow_in_production: bool = False


@dataclass(frozen=True)
class RoleSpec:
    """A model chosen per install (not per turn): embedding, speech-to-text."""

    provider: str
    model: str


@dataclass(frozen=True)
class ConnectorCommandSpec:
    """A local MCP server (stdio transport) a connector may start. Whoever
    installs OwlAI decides what runs on the server: the admin only picks one
    of these by name."""

    name: str
    command: str  # absolute path of the executable
    args: tuple[str, ...] = ()
    # Names of environment variables handed to the process (their values come
    # from OwlAI's own environment); nothing else of it is passed on.
    env: tuple[str, ...] = ()
    cwd: str = ""


@dataclass(frozen=True)
class InstallConfig:
    path: str
    providers: tuple[ProviderSpec, ...]
    access_log_retention_days: int = MIN_RETENTION_DAYS
    roles: dict[str, RoleSpec] = field(default_factory=dict)
    connector_commands: tuple[ConnectorCommandSpec, ...] = ()

    def provider(self, name: str) -> ProviderSpec | None:
        return next((p for p in self.providers if p.name == name), None)

    def connector_command(self, name: str) -> ConnectorCommandSpec | None:
        return next((c for c in self.connector_commands if c.name == name), None)


def _require_str(table: dict, key: str, where: str, *, default: str | None = None) -> str:
    value = table.get(key, default)
    if value is None:
        raise InstallConfigError(f"{where}: missing required key '{key}'")
    if not isinstance(value, str):
        raise InstallConfigError(f"{where}: '{key}' must be a string")
    return value.strip()


def _parse_models(raw: object, where: str) -> tuple[ModelSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise InstallConfigError(f"{where}: 'models' must be a non-empty list")
    models: list[ModelSpec] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        item_where = f"{where}.models[{index}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise InstallConfigError(f"{item_where}: must be a table or a string")
        name = _require_str(item, "name", item_where)
        if not name:
            raise InstallConfigError(f"{item_where}: 'name' must not be empty")
        if name in seen:
            raise InstallConfigError(f"{where}: duplicate model name '{name}'")
        seen.add(name)
        history_chars = item.get("history_chars")
        if history_chars is not None and (
            not isinstance(history_chars, int) or isinstance(history_chars, bool) or history_chars < 1000
        ):
            raise InstallConfigError(f"{item_where}: 'history_chars' must be an integer of at least 1000")
        models.append(
            ModelSpec(
                name=name,
                label=_require_str(item, "label", item_where, default=name),
                history_chars=history_chars,
            )
        )
    return tuple(models)


def _parse_provider(raw: object, index: int) -> ProviderSpec:
    where = f"providers[{index}]"
    if not isinstance(raw, dict):
        raise InstallConfigError(f"{where}: must be a table")
    name = _require_str(raw, "name", where)
    if not name:
        raise InstallConfigError(f"{where}: 'name' must not be empty")
    where = f"provider '{name}'"
    kind = _require_str(raw, "kind", where)
    if kind not in PROVIDER_KINDS:
        raise InstallConfigError(f"{where}: unknown kind '{kind}' (expected one of {', '.join(PROVIDER_KINDS)})")
    tier = _require_str(raw, "tier", where)
    if tier not in TIERS:
        raise InstallConfigError(f"{where}: unknown tier '{tier}' (expected 'private' or 'public')")
    base_url = _require_str(raw, "base_url", where, default="")
    if kind == ProviderKind.OPENAI and not base_url.startswith(("http://", "https://")):
        raise InstallConfigError(f"{where}: 'base_url' must be an http(s) URL")
    allow_in_production = raw.get("allow_in_production", False)
    if not isinstance(allow_in_production, bool):
        raise InstallConfigError(f"{where}: 'allow_in_production' must be true or false")
    if allow_in_production and kind != DEMO_KIND:
        # Only the demo model is refused in production; the flag elsewhere is a mistake.
        raise InstallConfigError(f"{where}: 'allow_in_production' applies to kind '{DEMO_KIND}' only")
    return ProviderSpec(
        name=name,
        kind=kind,
        tier=tier,
        base_url=base_url,
        api_key_env=_require_str(raw, "api_key_env", where, default=""),
        models=_parse_models(raw.get("models"), where),
        allow_in_production=allow_in_production,
    )


ENV_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def is_env_name(value: object) -> bool:
    return isinstance(value, str) and bool(value) and not value[0].isdigit() and set(value) <= ENV_NAME_CHARS


def _string_list(raw: object, key: str, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise InstallConfigError(f"{where}: '{key}' must be a list of strings")
    return tuple(raw)


def _parse_connector_commands(raw: object, path: str) -> tuple[ConnectorCommandSpec, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InstallConfigError(f"{path}: [[connector_commands]] must be a list of tables")
    commands: list[ConnectorCommandSpec] = []
    for index, item in enumerate(raw):
        where = f"connector_commands[{index}]"
        if not isinstance(item, dict):
            raise InstallConfigError(f"{where}: must be a table")
        name = _require_str(item, "name", where)
        if not name:
            raise InstallConfigError(f"{where}: 'name' must not be empty")
        where = f"connector command '{name}'"
        if any(c.name == name for c in commands):
            raise InstallConfigError(f"{path}: duplicate connector command name '{name}'")
        command = _require_str(item, "command", where)
        # An absolute path: what runs must not depend on the worker's PATH.
        if not Path(command).is_absolute():
            raise InstallConfigError(f"{where}: 'command' must be an absolute path")
        env = _string_list(item.get("env"), "env", where)
        bad = [n for n in env if not is_env_name(n)]
        if bad:
            raise InstallConfigError(f"{where}: '{bad[0]}' is not an environment variable name")
        commands.append(
            ConnectorCommandSpec(
                name=name,
                command=command,
                args=_string_list(item.get("args"), "args", where),
                env=env,
                cwd=_require_str(item, "cwd", where, default=""),
            )
        )
    return tuple(commands)


def parse_install_config(text: str, *, path: str = "<string>") -> InstallConfig:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InstallConfigError(f"{path}: not valid TOML: {exc}") from exc

    raw_providers = data.get("providers", [])
    if not isinstance(raw_providers, list) or not raw_providers:
        raise InstallConfigError(f"{path}: at least one [[providers]] entry is required")
    providers = tuple(_parse_provider(raw, i) for i, raw in enumerate(raw_providers))
    names = [p.name for p in providers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InstallConfigError(f"{path}: duplicate provider name '{duplicates[0]}'")

    observability = data.get("observability", {})
    if not isinstance(observability, dict):
        raise InstallConfigError(f"{path}: [observability] must be a table")
    retention = observability.get("accessLogRetentionDays", MIN_RETENTION_DAYS)
    if not isinstance(retention, int) or isinstance(retention, bool):
        raise InstallConfigError("observability.accessLogRetentionDays must be an integer number of days")
    if retention < MIN_RETENTION_DAYS:
        raise InstallConfigError(
            f"observability.accessLogRetentionDays = {retention} is below the legal floor of "
            f"{MIN_RETENTION_DAYS} days (3 years); raise it or remove the setting"
        )

    roles: dict[str, RoleSpec] = {}
    raw_roles = data.get("roles", {})
    if not isinstance(raw_roles, dict):
        raise InstallConfigError(f"{path}: [roles] must be a table")
    for role_name, raw_role in raw_roles.items():
        where = f"roles.{role_name}"
        if role_name not in ("embedding", "speech_to_text"):
            raise InstallConfigError(f"{where}: unknown role (expected embedding or speech_to_text)")
        if not isinstance(raw_role, dict):
            raise InstallConfigError(f"{where}: must be a table with provider and model")
        role = RoleSpec(
            provider=_require_str(raw_role, "provider", where), model=_require_str(raw_role, "model", where)
        )
        provider = next((p for p in providers if p.name == role.provider), None)
        if provider is None:
            raise InstallConfigError(f"{where}: unknown provider '{role.provider}'")
        if role.model not in {m.name for m in provider.models}:
            raise InstallConfigError(f"{where}: provider '{role.provider}' has no model '{role.model}'")
        roles[role_name] = role

    return InstallConfig(
        path=path,
        providers=providers,
        access_log_retention_days=retention,
        roles=roles,
        connector_commands=_parse_connector_commands(data.get("connector_commands"), path),
    )


def load_install_config(path: str | Path) -> InstallConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InstallConfigError(f"cannot read install config {path}: {exc.strerror or exc}") from exc
    return parse_install_config(text, path=str(path))


def production_demo_problem(config: InstallConfig) -> str | None:
    """Why a production install must not start with this config, or None.

    The offline demo model answers with canned text: a production install that
    kept the example config would offer it to every user as a real model. It is
    allowed only where the file enables it explicitly on that provider.
    """
    for provider in config.providers:
        if provider.kind == DEMO_KIND and not provider.allow_in_production:
            return (
                f"{config.path}: provider '{provider.name}' is the offline demo model (kind '{DEMO_KIND}'), "
                "which the production profile (DATABASE_URL set) does not offer unless enabled: point "
                "OWLAI_CONFIG at your own install config, or set 'allow_in_production = true' on that provider"
            )
    return None
