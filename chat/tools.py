"""Tool definitions shown to the model, built only from what the turn may see
(governance.visibility): a hidden resource is not even an enum value here."""

from __future__ import annotations

from governance.models import DbConnection, DocumentCollection
from governance.visibility import TurnResources

RUN_SQL = "run_sql"
SEARCH_DOCUMENTS = "search_documents"


def run_sql_tool(connections: list[DbConnection]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": RUN_SQL,
            "description": (
                "Run one read-only SQL query on a company database and get the rows back. "
                "Use the database's own SQL dialect. Prefer aggregating in SQL over fetching rows. "
                "Results are capped; personal data columns should not be selected without need."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "connection": {
                        "type": "string",
                        "description": "Name of the database connection.",
                        "enum": [c.name for c in connections],
                    },
                    "sql": {"type": "string", "description": "A single SELECT (or WITH ... SELECT) statement."},
                },
                "required": ["connection", "sql"],
            },
        },
    }


def search_documents_tool(collections: list[DocumentCollection]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": SEARCH_DOCUMENTS,
            "description": "Search a document collection by keywords and get the best matching documents.",
            "parameters": {
                "type": "object",
                "properties": {
                    "collection": {
                        "type": "string",
                        "description": "Name of the document collection.",
                        "enum": [c.name for c in collections],
                    },
                    "query": {"type": "string", "description": "Keywords to search for."},
                },
                "required": ["collection", "query"],
            },
        },
    }


def tools_for(resources: TurnResources) -> list[dict]:
    tools = []
    if resources.connections:
        tools.append(run_sql_tool(resources.connections))
    if resources.collections:
        tools.append(search_documents_tool(resources.collections))
    return tools
