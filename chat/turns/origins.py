"""Where a run comes from. Every origin shares the lifecycle, runner, agent
loop, executor and audit; an origin only says what its runs may do that a
chat turn does differently. The origin's name (and the run's reference, e.g.
which playbook run) is on the turn from its start and on every audit row the
run writes (chat.context.TurnContext.origin -> the executor's audit rows).

A new surface (playbook runs, research sub-runs, meeting summaries) adds
one entry here and starts its runs with that name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class VaultScope(StrEnum):
    """How long the originals behind a run's tokens are kept."""

    # With the conversation: later turns reuse the tokens, the owner reveals
    # them; they go when the conversation is deleted (chat.services).
    CONVERSATION = "conversation"
    # Only while the run runs: nobody comes back to a scripted run's
    # conversation, so its originals go when the run ends.
    RUN = "run"


@dataclass(frozen=True)
class RunOrigin:
    name: str  # as on the audit rows (audit.models.ToolCallAudit.origin), at most 20 characters
    vault_scope: VaultScope
    # Whether a call that needs a person's approval may wait for one: only
    # where somebody is there to answer (a chat page); elsewhere it is refused.
    asks_approval: bool


CHAT = RunOrigin(name="chat", vault_scope=VaultScope.CONVERSATION, asks_approval=True)
# A run started from a script (manage.py run_script): no page, nobody to ask.
SCRIPT = RunOrigin(name="script", vault_scope=VaultScope.RUN, asks_approval=False)
# A playbook run (the playbooks app): each run has a conversation of its own
# (its vault and spill folder), one turn per node; its person answers an
# approval from the playbook page, so a call may wait (unless pre-approved).
PLAYBOOK = RunOrigin(name="playbook", vault_scope=VaultScope.CONVERSATION, asks_approval=True)

ORIGINS: dict[str, RunOrigin] = {origin.name: origin for origin in (CHAT, SCRIPT, PLAYBOOK)}


class UnknownOrigin(LookupError):
    pass


def origin_named(name: str) -> RunOrigin:
    """The registered origin; an unknown name is refused (a run of an origin
    nobody defined must not run with a default's rights)."""
    try:
        return ORIGINS[name or CHAT.name]
    except KeyError:
        raise UnknownOrigin(name) from None
