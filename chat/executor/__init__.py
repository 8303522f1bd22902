"""The executor: the one place every tool call passes.

pipeline.py   the stages, in order, and what a tool contributes (Tool)
policy.py     the policy / approval stage's interface
registry.py   the tools by name (register one object to add a tool)
shaping.py    binary, URL references, masking, spill
reasons.py    refusal and failure messages (translated for the model)
tools/        run_sql, search_documents, read_spill; connectors.py: the MCP
              connector tools (`<connector>__<tool>`) and search_connector_tools,
              a tool source found by name at run time
"""

from chat.executor import tools as _tools  # noqa: F401  (registers the built-in tools)
from chat.executor.pipeline import (
    STAGES,
    Call,
    Lineage,
    Offer,
    Output,
    Stage,
    Target,
    ToolResult,
    execute_tool_call,
    traced,
    vault_for,
)
from chat.executor.registry import REGISTRY, tool_definitions
from chat.executor.shaping import sanitise_value, spill_files, spill_folder
from chat.executor.tools.sql import mask_sql_rows

__all__ = [
    "REGISTRY",
    "STAGES",
    "Call",
    "Lineage",
    "Offer",
    "Output",
    "Stage",
    "Target",
    "ToolResult",
    "execute_tool_call",
    "mask_sql_rows",
    "sanitise_value",
    "spill_files",
    "spill_folder",
    "tool_definitions",
    "traced",
    "vault_for",
]
