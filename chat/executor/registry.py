"""The tools the executor knows, by name.

`REGISTRY.register(tool)` adds one tool object (chat.executor.pipeline.Tool);
registration checks that it has every part, so a half-built tool fails at
import, not in a turn. `REGISTRY.add_source(source)` adds a family of tools
whose list changes at run time (the MCP connector tools): the source finds a
tool by name for a turn and lists the definitions a turn is offered; every
tool it hands out is checked the same way. Whatever the origin, a tool is
only ever called through the pipeline's stages.

The registry also owns the APPROVAL stage (`Registry.approve`): after a
call's argument checks, a call its policy said needs approval is put to the
run's gate (chat.executor.session.ToolSession.approvals); none: refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from chat.context import TurnContext
from chat.executor.policy import CANNOT_ASK, Decision, Verdict
from chat.executor.session import Offer, ToolSession, session_of

if TYPE_CHECKING:
    from chat.executor.pipeline import Call, Tool

logger = logging.getLogger(__name__)

# The parts of a Tool (chat.executor.pipeline): attributes, then methods.
_ATTRIBUTES = (
    "name",
    "resource_kind",
    "target_argument",
    "result_key",
    "unavailable",
    "failed",
    "policy",
    "run_state",
)
_METHODS = ("definition", "audit_statement", "summary", "resolve", "check", "prepare", "run", "lineage")


class ToolSource(Protocol):
    def find(self, ctx: TurnContext, name: str) -> Tool | None:
        """The tool of that name when this turn may call it, else None."""

    def definitions(self, offer: Offer) -> list[dict]:
        """The definitions this turn is offered."""

    def tools(self, ctx: TurnContext) -> Iterable[Tool]:
        """Every tool it can hand out to this turn (the registry test walks them)."""


class IncompleteTool(TypeError):
    """A tool object lacks a part the pipeline needs."""


def checked(tool: Tool) -> Tool:
    missing = [part for part in _ATTRIBUTES if not hasattr(tool, part)]
    missing += [part for part in _METHODS if not callable(getattr(tool, part, None))]
    if missing:
        raise IncompleteTool(f"tool {getattr(tool, 'name', tool)!r} lacks {', '.join(missing)}")
    if not callable(getattr(tool.policy, "decide", None)):
        raise IncompleteTool(f"tool {tool.name!r} has no policy with decide()")
    return tool


class Registry:
    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []

    def register(self, tool: Tool) -> Tool:
        checked(tool)
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def add_source(self, source: ToolSource) -> ToolSource:
        self._sources.append(source)
        return source

    def find(self, ctx: TurnContext, name: str) -> Tool | None:
        tool = self._tools.get(name)
        if tool is not None:
            return tool
        for source in self._sources:
            found = source.find(ctx, name)
            if found is not None:
                return checked(found)
        return None

    def tools(self, ctx: TurnContext | None = None) -> list[Tool]:
        """The built-in tools, then (with a turn) every tool of every source."""
        found = list(self._tools.values())
        if ctx is not None:
            for source in self._sources:
                found.extend(checked(tool) for tool in source.tools(ctx))
        return found

    def definitions(self, offer: Offer) -> list[dict]:
        out = []
        for tool in self._tools.values():
            try:
                definition = tool.definition(offer)
            except Exception:
                # Not offered when its definition cannot be built (fail closed:
                # the model is shown less, never more).
                logger.exception("definition of %s failed; not offered", tool.name)
                continue
            if definition is not None:
                out.append(definition)
        for source in self._sources:
            try:
                out.extend(source.definitions(offer))
            except Exception:
                logger.exception("tool source %r failed; its tools are not offered", source)
        return out

    def approve(self, call: Call, decision: Decision) -> Decision:
        """APPROVAL: a call whose policy answered `needs approval`, its checks
        passed, is put to the run's gate; an allow passes untouched. Without
        a gate nobody can be asked: denied (fail closed)."""
        if decision.verdict is not Verdict.NEEDS_APPROVAL:
            return decision
        gate = call.session.approvals
        if gate is None:
            return Decision.deny(CANNOT_ASK)
        return gate.request(call, decision)


REGISTRY = Registry()


def tool_definitions(session: ToolSession | TurnContext, resources) -> list[dict]:
    """The tools a run's model is shown (built from what the run may see)."""
    return REGISTRY.definitions(Offer(session=session_of(session), resources=resources))
