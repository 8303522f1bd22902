"""An MCP server whose tool list is read from the state file on every
tools/list ({"tools": ["a", "b"]}): the test changes it between syncs."""

from __future__ import annotations

import mcp_types as types
from mcp.server import Server

from tests.support.mcp_server_common import arguments, read_state, serve

ARGS = arguments()
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}


def _names() -> list[str]:
    return list(read_state(ARGS.state, {"tools": ["search_issues"]})["tools"])


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool(name=name, description=f"The {name} tool.", input_schema=SCHEMA) for name in _names()]
    )


async def call_tool(ctx, params) -> types.CallToolResult:
    if params.name not in _names():
        return types.CallToolResult(content=[types.TextContent(type="text", text="no such tool")], is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} ran")])


server = Server("tool-list", on_list_tools=list_tools, on_call_tool=call_tool)

if __name__ == "__main__":
    serve(server, ARGS)
