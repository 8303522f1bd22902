"""Connectors over the real test MCP servers (tests/support/mcp_servers.py),
for tests that call connector tools through the executor or a whole turn.

    crm = add_connector("crm", url=server.url, roles=[role])              # internal-only
    desk = add_connector("desk", command="people", roles=[role], exposure="all_models")

Each connector's tool list is synced from its server (the real sync), and
its tools get `policy` (the install's policy; new tools otherwise require
approval). A stdio server's listing is fetched once per test session and
reused (starting one costs about a second; their tool lists never change,
and tests/test_connector_sync.py syncs for real every time).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from pathlib import Path

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


# Tool lists of stdio servers, by the command's key (argv, cwd, env names).
_STDIO_LISTINGS: dict = {}


class _StdioListedOnce:
    """A `ConnectorSessions` stand-in for `connector_tools_sync` that lists
    each stdio server (fixed tool lists) once per session."""

    def list_tools(self, target):
        from governance.connectors.client import ConnectorSessions

        stdio = target.stdio
        key = (stdio.command, tuple(stdio.args), stdio.cwd, tuple(sorted(stdio.env)))
        if key not in _STDIO_LISTINGS:
            with ConnectorSessions() as sessions:
                _STDIO_LISTINGS[key] = sessions.list_tools(target)
        return _STDIO_LISTINGS[key]


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
    connector_tools_sync(connector=connector, sessions=_StdioListedOnce() if command else None)
    approve_held_tools(connector)  # new tools wait for an admin's review, like changed ones
    ConnectorTool.objects.filter(connector=connector).update(policy=policy)
    for role in roles:
        role.connectors.add(connector)
    return connector


def approve_held_tools(connector) -> list[str]:
    """What an admin does after a sync: review and pin every held definition
    (new tools and changed ones). Returns the names approved."""
    from governance.connectors.services import connector_tool_definition_approve
    from governance.models import ConnectorTool, ConnectorToolState

    held = list(ConnectorTool.objects.filter(connector=connector, state=ConnectorToolState.CHANGED))
    for tool in held:
        connector_tool_definition_approve(tool=tool)
    return sorted(tool.name for tool in held)


def set_policy(connector, tool: str, policy: str) -> None:
    from governance.models import ConnectorTool

    ConnectorTool.objects.filter(connector=connector, name=tool).update(policy=policy)


@contextlib.contextmanager
def recording_people_server(folder: Path):
    """The people server on loopback HTTP; what its `echo` receives is
    recorded in `server.record` (a file in `folder`)."""
    from tests.support.mcp_servers import http_server

    record = folder / "received.jsonl"
    os.environ["OWLAI_TEST_MCP_RECORD"] = str(record)
    try:
        with http_server("people") as server:
            server.record = record
            yield server
    finally:
        os.environ.pop("OWLAI_TEST_MCP_RECORD", None)


_turns = itertools.count(50_000)


class World:
    """A user with connectors and a conversation: connector calls through the
    real executor, each in a turn context of its own."""

    def __init__(self, user, conversation, connectors, record: Path):
        self.user, self.conversation, self.connectors, self.record = user, conversation, connectors, record

    def context(self, tier: str = "private", user=None):
        from chat.context import TurnContext

        user = user or self.user
        return TurnContext(
            user_id=user.pk,
            username=user.username,
            tier=tier,
            model_name="m",
            provider_name="p",
            conversation_id=self.conversation.pk,
            turn_id=next(_turns),
        )

    def call(self, name: str, arguments, *, tier: str = "private", ctx=None):
        from chat.executor import execute_tool_call

        raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        result = execute_tool_call(ctx or self.context(tier), name=name, arguments=raw)
        return json.loads(result.content), result.outcome

    def rows(self, tool: str | None = None) -> list:
        from audit.models import ToolCallAudit

        rows = ToolCallAudit.objects.filter(conversation_id=self.conversation.pk).order_by("id")
        return list(rows.filter(tool=tool) if tool else rows)

    def received(self) -> list[str]:
        """What the HTTP people server's `echo` received, as it saw it."""
        if not self.record.exists():
            return []
        return [json.loads(line)["text"] for line in self.record.read_text(encoding="utf-8").splitlines()]


def audit_dump() -> str:
    """Every audit record and event, as text: for checking what is not in them."""
    from audit.models import AuditEvent, ToolCallAudit

    return json.dumps(
        [list(ToolCallAudit.objects.values()), list(AuditEvent.objects.values())], ensure_ascii=False, default=str
    )
