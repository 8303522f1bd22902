"""An MCP server whose `hang` tool never answers (`quick` does); with
`--silent` it never answers anything, not even the handshake."""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import MCPServer

from tests.support.mcp_server_common import arguments, serve

server = MCPServer("hang", log_level="WARNING")


@server.tool(description="Answers at once.")
def quick() -> str:
    return "quick answer"


@server.tool(description="Never answers.")
async def hang() -> str:
    await anyio.sleep(3600)
    return "too late"


if __name__ == "__main__":
    serve(server, arguments())
