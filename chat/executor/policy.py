"""The policy / approval stage: may this call run at all, now?

A tool names its `policy`; the pipeline asks it after the visibility
re-check and before the argument checks. Three answers:

* allow            -> the call goes on to its argument checks;
* deny(reason)     -> refused: one `denied` audit row, the reason to the model;
* needs_approval   -> the call goes on to its argument checks, then to the
                      APPROVAL stage (chat.executor.registry.Registry.approve):
                      the run's gate (`ToolSession.approvals`) answers allow or
                      deny, or raises to suspend the run until a person decides
                      (the run then resumes in a new task and the call comes
                      through the whole pipeline again, where the gate finds
                      the recorded decision in the restored session).

Built-in tools (run_sql, search_documents, read_spill) touch only resources
whose grants the visibility stage already decided, so their policy is
ALWAYS_ALLOW. Connector tools bring a policy that reads the install's tool
policy (allow / require approval / block) and the user's standing approvals.

A session without a gate cannot ask anyone, so the call is denied (fail
closed): a call that needs approval never runs unapproved because nothing was
plugged in.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from django.utils.translation import gettext_noop

from chat.executor.reasons import Reason

if TYPE_CHECKING:
    from chat.executor.pipeline import Call


class Verdict(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    NEEDS_APPROVAL = "needs_approval"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: Reason | None = None  # why not (deny), or what to ask (needs_approval)

    @classmethod
    def allow(cls) -> Decision:
        return cls(Verdict.ALLOW)

    @classmethod
    def deny(cls, reason: Reason) -> Decision:
        return cls(Verdict.DENY, reason)

    @classmethod
    def needs_approval(cls, reason: Reason | None = None) -> Decision:
        return cls(Verdict.NEEDS_APPROVAL, reason)


class ApprovalSuspends(Exception):
    """Raised by an approval gate to stop the turn while a person decides.
    The pipeline lets it through untouched (nothing has run, no row exists);
    the turn runner persists the wait and resumes the turn in a new task.
    `request` is what the gate wants asked (chat.approvals.ApprovalRequest)."""

    def __init__(self, request: object = None) -> None:
        super().__init__("waiting for approval")
        self.request = request


class Policy(Protocol):
    def decide(self, call: Call) -> Decision: ...


class ApprovalGate(Protocol):
    def request(self, call: Call, decision: Decision) -> Decision:
        """Allow or deny a call that needs approval (its argument checks
        passed), or raise ApprovalSuspends to stop the run while a person
        decides (nothing has run; no attempt row exists). A decision taken
        without asking is named in `call.approval` (the step shows it)."""
        ...


class _AlwaysAllow:
    def decide(self, call: Call) -> Decision:
        return Decision.allow()


ALWAYS_ALLOW: Policy = _AlwaysAllow()


CANNOT_ASK = Reason(gettext_noop("this call needs an approval that cannot be asked for here"))
