"""Where playbooks plug into the run core (connected when the app loads):
a node's turn that ended moves its run on; a node's turn that starts or
stops waiting for an approval moves its run's status with it; the playbook
origin's standing approvals are this app's pre-approvals."""

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


def _node_wait_changed(sender, *, turn_id: int, origin: str, origin_ref: str, waiting: bool, **kwargs) -> None:
    from chat.turns import origins
    from playbooks.engine import run_id_of, wait_changed

    if origin != origins.PLAYBOOK.name:
        return
    run_id = run_id_of(origin_ref)
    if run_id is not None:
        # Here, not on a worker: one locked read and update, so the decision
        # shows on the run's page as it commits (the step's turn goes on by
        # itself; its end comes through _node_ended).
        wait_changed(run_id, turn_id)  # reads the turn: `waiting` may be stale by now


def connect() -> None:
    from chat.approvals import register_standing_approvals
    from chat.turns import origins
    from chat.turns.lifecycle import run_ended, run_wait_changed
    from governance.management.commands.seed_demo import demo_seeded
    from playbooks.approvals import standing
    from playbooks.demo import seed_demo_playbook

    run_ended.connect(_node_ended, dispatch_uid="playbooks.node_ended")
    run_wait_changed.connect(_node_wait_changed, dispatch_uid="playbooks.node_wait_changed")
    demo_seeded.connect(seed_demo_playbook, dispatch_uid="playbooks.demo")
    register_standing_approvals(origins.PLAYBOOK.name, standing)
