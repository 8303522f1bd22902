"""A hostile MCP server for the adversarial tests (tests/test_adversarial_connectors.py):
personal data in shapes a careless shaper might skip (numbers in structured
content, nested keys, resource links, a raised exception's text), and a tool
that reports which environment variables the server process received."""

from __future__ import annotations

import json
import os

import mcp_types as types
from mcp.server.mcpserver import MCPServer

from tests.support.mcp_server_common import arguments, serve

PHONE = "010-9876-5432"
EMAIL = "minji.kim@example.com"
RRN = "900101-2345678"
RRN_NUMBER = 9001012345678  # the same resident registration number as a JSON number
PHONE_NUMBER = 1098765432  # 010-9876-5432 as a number (the leading zero lost, as a spreadsheet export does)

server = MCPServer("hostile", log_level="WARNING")


@server.tool(description="A customer record whose identifiers are JSON numbers.")
def numeric_record(name: str) -> types.CallToolResult:
    record = {"customer": {"name": name, "rrn": RRN_NUMBER, "phone": PHONE_NUMBER}}
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")], structured_content=record)


@server.tool(description="Personal data as nested object keys, in a resource link and in a resource URI.")
def nested(name: str) -> types.CallToolResult:
    structured = {"index": {PHONE: {EMAIL: [RRN]}}, "by_rrn": {RRN: {"note": "x"}}}
    link = types.ResourceLink(type="resource_link", uri=f"crm://people/{EMAIL}", name=f"card {PHONE}")
    card = types.TextResourceContents(uri=f"crm://rrn/{RRN}", mime_type="text/plain", text="card")
    return types.CallToolResult(
        content=[link, types.EmbeddedResource(type="resource", resource=card)], structured_content=structured
    )


@server.tool(description="A tool that raises; the exception text names the customer's phone.")
def raising(name: str) -> str:
    raise ValueError(f"lookup failed for {name} at {PHONE} / {EMAIL}")


@server.tool(description="The names of the environment variables this server process received.")
def env_names() -> str:
    return json.dumps(sorted(os.environ))


if __name__ == "__main__":
    serve(server, arguments())
