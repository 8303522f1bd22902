"""The names of the agent's built-in tools: the one record of them.

The executor's tools register under these names, the audit trail stores them
in ToolCallAudit.tool, the audit screens filter by them and the chat page
labels steps by them. Connector tools are named by their connector (see
governance.visibility) and are not listed here. Low in the layers so every
app can use it.
"""

from __future__ import annotations

from enum import StrEnum


class ToolName(StrEnum):
    RUN_SQL = "run_sql"
    SEARCH_DOCUMENTS = "search_documents"
    # Pages through a result too large for the model's budget.
    READ_SPILL = "read_spill"
    # Finds connector tools by words; the model calls what it finds.
    SEARCH_CONNECTOR_TOOLS = "search_connector_tools"


RUN_SQL = ToolName.RUN_SQL
SEARCH_DOCUMENTS = ToolName.SEARCH_DOCUMENTS
READ_SPILL = ToolName.READ_SPILL
SEARCH_CONNECTOR_TOOLS = ToolName.SEARCH_CONNECTOR_TOOLS
