"""An MCP server whose process dies in the middle of a `crash` call (`quick`
answers normally)."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

from tests.support.mcp_server_common import arguments, serve

server = MCPServer("crash", log_level="WARNING")


@server.tool(description="Answers at once.")
def quick() -> str:
    return "quick answer"


@server.tool(description="Kills its own server process mid-call.")
def crash() -> str:
    os._exit(3)


if __name__ == "__main__":
    serve(server, arguments())
