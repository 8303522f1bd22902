"""A CRM-like MCP server whose answers carry personal data: in plain text, in
structured content, and in an embedded resource. `echo` returns its
argument, so a test can see exactly what reached the server; with
OWLAI_TEST_MCP_RECORD set, it also appends each argument it received to that
file (one JSON line), as the server saw it. `failing_lookup` answers with an
error result (`isError`) that carries personal data."""

from __future__ import annotations

import json
import os

import mcp_types as types
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

from tests.support.mcp_server_common import arguments, serve

PHONE = "010-9876-5432"
EMAIL = "minji.kim@example.com"
RRN = "900101-2345678"

server = MCPServer("people", log_level="WARNING")


class Customer(BaseModel):
    name: str
    phone: str
    email: str
    note: str


@server.tool(description="Look up a customer by name: contact details as structured data.")
def find_customer(name: str) -> Customer:
    return Customer(name=name, phone=PHONE, email=EMAIL, note=f"주민등록번호 {RRN}")


@server.tool(description="A customer's latest note as text.")
def customer_note(name: str) -> str:
    return f"{name} 고객 연락처는 {PHONE}, 메일은 {EMAIL} 입니다."


@server.tool(description="A customer's card as an embedded resource.")
def customer_card(name: str) -> types.CallToolResult:
    card = types.TextResourceContents(uri=f"crm://customers/{name}", mime_type="text/plain", text=f"{name} {PHONE}")
    return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=card)])


@server.tool(description="The server's process id (shows whether a session was reused).")
def whoami() -> str:
    return str(os.getpid())


@server.tool(description="Return the text it was given.")
def echo(text: str) -> str:
    record = os.environ.get("OWLAI_TEST_MCP_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    return text


@server.tool(description="A lookup that fails; its error names the customer's phone.")
def failing_lookup(name: str) -> types.CallToolResult:
    text = types.TextContent(type="text", text=f"no CRM record for {name} ({PHONE})")
    return types.CallToolResult(content=[text], is_error=True)


if __name__ == "__main__":
    serve(server, arguments())
