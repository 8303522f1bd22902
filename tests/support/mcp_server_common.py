"""What every test MCP server script shares: run over stdio (default) or
streamable HTTP on loopback (`--http PORT`), and a `--state FILE` some of
them read on every request so a test can change what the server lists."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--state", default="", help="JSON file the server reads on every request")
    parser.add_argument("--silent", action="store_true", help="never answer: hang before serving")
    return parser.parse_args()


def read_state(path: str, default: Any) -> Any:
    if not path or not Path(path).exists():
        return default
    return json.loads(Path(path).read_text(encoding="utf-8"))


def serve(server, args: argparse.Namespace) -> None:
    """Run an MCPServer (or a lowlevel Server) the way the arguments say."""
    if args.silent:
        import time

        time.sleep(3600)
        return
    from mcp.server.mcpserver import MCPServer

    if isinstance(server, MCPServer):
        if args.http:
            server.run("streamable-http", host="127.0.0.1", port=args.http)
        else:
            server.run("stdio")
        return
    import anyio

    if args.http:
        import uvicorn

        app = server.streamable_http_app(host="127.0.0.1")
        uvicorn.run(app, host="127.0.0.1", port=args.http, log_level="warning")
        return

    async def main() -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
