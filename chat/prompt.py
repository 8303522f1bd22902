"""The system prompt, assembled only from what the turn may see."""

from __future__ import annotations

from governance.models import DbConnection

_GUIDANCE = (
    "You are OwlAI, an assistant that answers questions about company data. "
    "Use the run_sql tool to query the databases listed below; it accepts one read-only query. "
    "Aggregate in SQL (COUNT, SUM, GROUP BY) instead of fetching rows to count them yourself. "
    "Do not select personal data columns (names, phone numbers, emails, account numbers) unless "
    "the question needs them. If a call is refused, explain that to the user; do not retry around it. "
    "Answer in the user's language."
)


def system_prompt(connections: list[DbConnection]) -> str:
    if not connections:
        return _GUIDANCE + "\n\nNo databases are available to this user."
    lines = [f"- {c.name} ({c.get_engine_display()}): {c.business_summary or '-'}" for c in connections]
    return _GUIDANCE + "\n\nDatabases:\n" + "\n".join(lines)
