"""Connectors over the real test MCP servers (tests/support/mcp_servers.py),
for tests that call connector tools through the executor or a whole turn.

    crm = add_connector("crm", url=server.url, roles=[role])              # internal-only
    desk = add_connector("desk", command="people", roles=[role], exposure="all_models")

Each connector's tool list is synced from its server (the real sync), and
its tools get `policy` (the install's policy; new tools otherwise require
approval).
"""

from __future__ import annotations

INTERNAL_ONLY = "internal_only"
ALL_MODELS = "all_models"

# The personal data the people server returns (tests/support/mcp_server_people.py).
PHONE = "010-9876-5432"
EMAIL = "minji.kim@example.com"
RRN = "900101-2345678"
PERSONAL = (PHONE, EMAIL, RRN, "9876-5432", "minji.kim")


def two_tier_config(base_url: str = "http://127.0.0.1:9/v1") -> str:
    """An install config with a private and a public provider (same server)."""
    return f"""
[[providers]]
name = "onprem"
kind = "openai"
tier = "private"
base_url = "{base_url}"
models = ["inhouse-model"]

[[providers]]
name = "cloud"
kind = "openai"
tier = "public"
base_url = "{base_url}"
models = ["cloud-model"]
"""


def add_connector(
    name: str,
    *,
    url: str = "",
    command: str = "",
    roles=(),
    exposure: str = INTERNAL_ONLY,
    policy: str = "allow",
    timeout: int = 30,
    summary: str = "",
):
    from governance.connectors.services import connector_tools_sync
    from governance.models import Connector, ConnectorTool

    connector = Connector.objects.create(
        name=name,
        transport="stdio" if command else "streamable_http",
        url=url,
        command=command,
        exposure=exposure,
        timeout_seconds=timeout,
        business_summary=summary,
    )
    connector_tools_sync(connector=connector)
    ConnectorTool.objects.filter(connector=connector).update(policy=policy)
    for role in roles:
        role.connectors.add(connector)
    return connector


def set_policy(connector, tool: str, policy: str) -> None:
    from governance.models import ConnectorTool

    ConnectorTool.objects.filter(connector=connector, name=tool).update(policy=policy)
