"""Tool definitions shown to the model, built only from what the turn may see."""

from __future__ import annotations

from governance.models import DbConnection

RUN_SQL = "run_sql"


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


def tools_for(connections: list[DbConnection]) -> list[dict]:
    return [run_sql_tool(connections)] if connections else []
