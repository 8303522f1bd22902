"""One run's tool session: what every tool call of a run shares, passed down
explicitly from the runner to the executor and to each tool.

    ctx        the run's frozen TurnContext (who, which tier and model, which
               conversation and turn, the origin)
    approvals  who answers a call whose policy needs a person's approval
               (chat.approvals.ConnectorApprovalGate for a chat turn); None:
               nobody can be asked, so such a call is refused (fail closed)
    resuming   the approval whose decision applies to the call the run waited
               on (a resumed run); the gate applies it once
    states     each tool's per-run state, keyed by the tool's `run_state`
               (e.g. the connector tools' MCP sessions and loaded tools):
               opened by the tool's own `open` on first use, closed with the
               session
    trace      (tests) every (tool name, stage) entered, in order

The runner creates one session per run and closes it when the run ends,
finishes or waits. A waiting run stores `as_json()` in its loop state and
the resumed run restores it with `from_json` (the tools' states as their own
JSON, the approval it waited on): no context variable, no process-global gate.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from chat.context import TurnContext

if TYPE_CHECKING:
    from chat.executor.policy import ApprovalGate
    from governance.visibility import TurnResources

logger = logging.getLogger(__name__)


class RunState(Protocol):
    """A tool's per-run state (one instance per session and kind)."""

    def as_json(self) -> Any:
        """What a waiting run must keep (plain JSON values; None: nothing)."""

    def close(self) -> None:
        """Release what it holds (connections, processes)."""


class RunStateKind(Protocol):
    """What a tool names as its `run_state`: a key and how to open one."""

    key: str

    def open(self, stored: Any) -> RunState:
        """A new state, from what a waiting run stored (None: a fresh run)."""


@dataclass(eq=False)
class ToolSession:
    ctx: TurnContext
    approvals: ApprovalGate | None = None
    resuming: str | None = None
    trace: list | None = None
    _states: dict[str, RunState] = field(default_factory=dict)
    _stored: dict[str, Any] = field(default_factory=dict)  # restored, not yet opened

    def state(self, kind: RunStateKind) -> RunState:
        """The run's state of that kind, opened on first use."""
        found = self._states.get(kind.key)
        if found is None:
            found = self._states[kind.key] = kind.open(self._stored.pop(kind.key, None))
        return found

    def enter(self, tool_name: str, stage: object) -> None:
        if self.trace is not None:
            self.trace.append((tool_name, stage))

    def close(self) -> None:
        """Close every opened state; one failing does not keep the others open."""
        states, self._states = self._states, {}
        for key, state in states.items():
            try:
                state.close()
            except Exception:
                logger.exception("closing the run state %s failed", key)
            # What it held stays readable for as_json after close (a waiting run).
            self._stored[key] = _json_of(state, key)

    def __enter__(self) -> ToolSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def as_json(self, *, waiting_for: str | None = None) -> dict:
        """What a waiting run stores: each state's JSON and the approval it waits for."""
        states = dict(self._stored)
        states.update({key: _json_of(state, key) for key, state in self._states.items()})
        return {"states": {k: v for k, v in states.items() if v is not None}, "approval_id": waiting_for}

    @classmethod
    def from_json(cls, ctx: TurnContext, value: Any, *, approvals: ApprovalGate | None = None) -> ToolSession:
        """The session of a resumed run. Raises ValueError for anything but a stored session."""
        if not isinstance(value, dict) or not isinstance(value.get("states", {}), dict):
            raise ValueError("not a stored tool session")
        approval_id = value.get("approval_id")
        if approval_id is not None and not isinstance(approval_id, str):
            raise ValueError("not a stored tool session")
        return cls(ctx=ctx, approvals=approvals, resuming=approval_id, _stored=dict(value.get("states") or {}))


def _json_of(state: RunState, key: str) -> Any:
    try:
        return state.as_json()
    except Exception:
        logger.exception("the run state %s cannot be stored; dropped", key)
        return None


@dataclass(frozen=True)
class Offer:
    """What a tool may build its definition from: the run's session and the
    resources it may see (governance.visibility). A hidden resource is not
    even an enum value in a definition."""

    session: ToolSession
    resources: TurnResources

    @property
    def ctx(self) -> TurnContext:
        return self.session.ctx


def session_of(value: ToolSession | TurnContext) -> ToolSession:
    """A session, or a one-call session for a bare context (scripts, tests)."""
    return value if isinstance(value, ToolSession) else ToolSession(ctx=value)
