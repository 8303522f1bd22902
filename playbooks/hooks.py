"""Where playbooks plug into the run core (connected when the app loads):
a node's turn that ended moves its run on; the playbook origin's standing
approvals are this app's pre-approvals."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def _node_ended(sender, *, turn_id: int, origin: str, origin_ref: str, status: str, **kwargs) -> None:
    from chat.turns import origins
    from playbooks.engine import is_driving, run_id_of
    from playbooks.runs import advance_soon

    if origin != origins.PLAYBOOK.name:
        return
    run_id = run_id_of(origin_ref)
    if run_id is None or is_driving(run_id):
        return  # the loop driving it in this thread goes on by itself
    advance_soon(run_id)


def connect() -> None:
    from chat.approvals import register_standing_approvals
    from chat.turns import origins
    from chat.turns.lifecycle import run_ended
    from governance.management.commands.seed_demo import demo_seeded
    from playbooks.approvals import standing
    from playbooks.demo import seed_demo_playbook

    run_ended.connect(_node_ended, dispatch_uid="playbooks.node_ended")
    demo_seeded.connect(seed_demo_playbook, dispatch_uid="playbooks.demo")
    register_standing_approvals(origins.PLAYBOOK.name, standing)
