"""The executor: the one place every tool call passes.

pipeline.py   the stages, in order, and what a tool contributes (Tool)
session.py    a run's tool session: context, per-run tool state, approvals
policy.py     the policy / approval stage's interface
registry.py   the tools by name (register one object to add a tool) and the
              approval stage
steps.py      what a call's step shows (each tool's summary)
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
    vault_for,
)
from chat.executor.registry import REGISTRY, tool_definitions
from chat.executor.session import ToolSession
from chat.executor.shaping import sanitise_value, spill_files, spill_folder
from chat.executor.steps import step_summary
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
    "ToolSession",
    "execute_tool_call",
    "mask_sql_rows",
    "sanitise_value",
    "spill_files",
    "spill_folder",
    "step_summary",
    "tool_definitions",
    "vault_for",
]
