"""A run's live frames: what its socket (playbooks.consumers) is sent.

The database is the truth and the socket only wakes the page: on a frame it
reads the run again from the run API, so the page shows after a reload what
it showed live, and a frame the layer drops costs at most a late update (the
page's slow fallback poll, OWLAI_PLAYBOOK_RUN_POLL_SECONDS).

Two kinds of frame, both of ids, names and states only (never an input or
an output, though those are stored masked):

* `run.changed` — published after commit by `publish_changed`, called where
  a run's state changes (engine.advance, engine.wait_changed: an approval
  asked for or decided, runs.playbook_run_stop) on the run's group;
* the node's turn events, which the run core publishes on the run's
  conversation's group: the socket relays a few of them, cut down by
  `step_frame` (which tool a step is calling and how that call ended), so
  a long agent step shows what it is doing.
"""

from __future__ import annotations

from chat.protocol import ServerEvent
from chat.turns.journal import publish_after_commit


def run_group(run_id: int) -> str:
    return f"playbook_run.{run_id}"


def changed_frame(run) -> dict:
    return {
        "type": ServerEvent.RUN_CHANGED.value,
        "run_id": run.pk,
        "status": run.status,
        "node": run.current_node,
    }


def publish_changed(run) -> None:
    """Inside the transaction that changed the run: sent once it commits
    (nothing when it rolls back)."""
    publish_after_commit(run_group(run.pk), [changed_frame(run)])


# The turn events a run's socket relays, with the fields it keeps: names,
# ids and outcomes. Not the SQL, arguments, results or text of a step.
_STEP_FIELDS = {
    ServerEvent.TOOL_STARTED: ("call_id", "tool"),
    ServerEvent.TOOL_FINISHED: ("call_id", "tool", "outcome"),
    ServerEvent.APPROVAL_REQUESTED: ("approval_id", "call_id", "tool"),
    ServerEvent.APPROVAL_DECIDED: ("approval_id", "call_id", "decision"),
    ServerEvent.TURN_FINISHED: ("status",),
}


def step_frame(frame: dict) -> dict | None:
    """What the run's socket sends of a turn event of its conversation
    (None: nothing, e.g. the streamed text)."""
    kind = frame.get("type")
    if kind == ServerEvent.RUN_CHANGED:
        return frame  # ours, already ids and states
    fields = _STEP_FIELDS.get(kind)
    if fields is None:
        return None
    kept = {"type": kind, "turn_id": frame.get("turn_id"), "seq": frame.get("seq")}
    kept.update({name: frame[name] for name in fields if isinstance(frame.get(name), (str, int))})
    return kept
