"""How a playbook run goes from node to node on the run core.

Each node is one run-core turn of origin `playbook` in the run's own
conversation (its vault and spill folder): an agent node asks the one agent
loop its rendered prompt, a tool node is a run of one given tool call
(chat.turns.start.calls_run_start: no model, the whole executor pipeline).
When a node's turn ends, chat.turns.lifecycle.run_ended brings the run back
here (`advance`), which records the node's output as the model saw it
(masked), then starts the next node as the person the run acts for, after
checking again that this person may still run it. `advance` locks the run:
a duplicate signal, the sweep and a worker racing it start nothing twice.
While a node's turn waits for an approval, chat.turns.lifecycle.run_wait_changed
moves the run's status with it (`wait_changed`), whoever decided and wherever.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from accounts.language import language_from, user_language
from audit.events import audit_event_write
from audit.models import ResourceKind
from chat.models import ACTIVE_TURN_STATUSES, Message, MessageRole, Turn, TurnEvent, TurnStatus
from chat.protocol import ServerEvent
from chat.turns import dispatch, origins
from chat.turns.start import calls_run_start, run_start
from playbooks import events, live, notices, spec
from playbooks.models import ACTIVE_RUN_STATUSES, NodeRun, PlaybookRun, RunStatus
from playbooks.services import may_run

logger = logging.getLogger(__name__)

_driving = threading.local()


def run_id_of(origin_ref: str) -> int | None:
    prefix = "playbook_run:"
    if not origin_ref.startswith(prefix) or not origin_ref[len(prefix) :].isdigit():
        return None
    return int(origin_ref[len(prefix) :])


def drive(run_id: int) -> None:
    """Run the run's nodes one after the other in this thread, until it
    ends or a node waits (for an approval: no worker is held meanwhile)."""
    driving = getattr(_driving, "runs", None)
    if driving is None:
        driving = _driving.runs = set()
    if run_id in driving:
        return  # this thread drives it already (a node's end inside its loop)
    driving.add(run_id)
    try:
        while (turn_id := advance(run_id)) is not None:
            dispatch.run_now(turn_id)
    finally:
        driving.discard(run_id)


def is_driving(run_id: int) -> bool:
    return run_id in (getattr(_driving, "runs", None) or set())


def advance(run_id: int) -> int | None:
    """Record what the current node's turn ended with and start the next
    node's turn; its id (for the caller to run), or None when there is
    nothing to run now (ended, waiting, or a node still running)."""
    with transaction.atomic():
        run = _locked_active_run(run_id)
        if run is None:
            return None
        # What the run records (its reasons) is in its person's language, as its turns are.
        language = language_from(stored=user_language(user=run.actor), fallback=settings.LANGUAGE_CODE)
        # Every change _advance makes to a step moves the run's status or
        # its current step too, so these two tell whether the page needs
        # waking (one frame, after commit, whatever happened in between).
        before = (run.status, run.current_node)
        with translation.override(language):
            turn_id = _advance(run)
        if (run.status, run.current_node) != before:
            live.publish_changed(run)
        return turn_id


def _locked_active_run(run_id: int) -> PlaybookRun | None:
    """The run, locked for the caller's transaction, while it is active.
    Only the run's row: FOR UPDATE over the join would lock the playbook's
    and the person's rows too, which every concurrent run start (its
    insert's foreign-key check) and turn waits on — deadlocks under 50 runs
    at once (bench/playbook_load.py)."""
    run = (
        PlaybookRun.objects.select_for_update(of=("self",))
        .select_related("playbook", "actor")
        .filter(pk=run_id)
        .first()
    )
    return run if run is not None and run.status in ACTIVE_RUN_STATUSES else None


def _advance(run: PlaybookRun) -> int | None:
    node_run = NodeRun.objects.filter(run=run, index=run.current_node).first()
    if node_run is not None:
        moved = _settle_node(run, node_run)
        if not moved:
            return None
    if run.current_node >= len(run.nodes):
        _end(run, RunStatus.COMPLETED)
        return None
    refusal = _refusal(run)
    if refusal:
        _refuse(run, refusal)
        return None
    turn = _start_node(run)
    run.status = RunStatus.RUNNING
    run.save(update_fields=["status"])
    return turn.pk


def wait_changed(run_id: int, turn_id: int) -> None:
    """The current node's turn started or stopped waiting for its person's
    approval (chat.turns.lifecycle.run_wait_changed, after commit): the run
    and its step say so at once, and the page is woken. Only the status
    moves: the step's turn goes on (or ends, and `run_ended` brings the run
    to `advance`), so nothing is started here. The turn's status as stored
    decides, not the signal's order: a decision given in the instant between
    the wait's commit and its signal must not leave the run marked waiting.
    A signal for a turn that is no longer the run's current step, or that
    arrives after the run moved on or ended, changes nothing."""
    with transaction.atomic():
        run = _locked_active_run(run_id)
        if run is None:
            return
        node_run = NodeRun.objects.filter(run=run, index=run.current_node, turn_id=turn_id).first()
        turn_status = Turn.objects.filter(pk=turn_id).values_list("status", flat=True).first()
        if node_run is None or turn_status not in ACTIVE_TURN_STATUSES:
            return  # gone or ended: run_ended brings the run to advance
        language = language_from(stored=user_language(user=run.actor), fallback=settings.LANGUAGE_CODE)
        with translation.override(language):
            if _mark_waiting(run, node_run, waiting=turn_status == TurnStatus.WAITING_APPROVAL):
                live.publish_changed(run)


def _mark_waiting(run: PlaybookRun, node_run: NodeRun, *, waiting: bool) -> bool:
    """The run and its current step wait for an approval, or run again after
    it; whether anything changed. Its person is told once per wait."""
    if waiting == (run.status == RunStatus.WAITING_APPROVAL):
        return False
    status = RunStatus.WAITING_APPROVAL if waiting else RunStatus.RUNNING
    run.status = node_run.status = status
    run.save(update_fields=["status"])
    node_run.save(update_fields=["status"])
    if waiting:
        notices.notify(run, notices.WAITING)
    return True


def _settle_node(run: PlaybookRun, node_run: NodeRun) -> bool:
    """The current node's turn as it stands: True when it completed and the
    run moved on to the next node."""
    turn = Turn.objects.filter(pk=node_run.turn_id).first()
    if turn is None:
        _fail(run, node_run, _("The step's run is gone."))
        return False
    if turn.status == TurnStatus.WAITING_APPROVAL:
        _mark_waiting(run, node_run, waiting=True)
        return False
    if turn.status in (TurnStatus.QUEUED, TurnStatus.RUNNING):
        _mark_waiting(run, node_run, waiting=False)  # decided: the turn goes on
        return False
    if turn.status == TurnStatus.CANCELLED:
        node_run.status, node_run.finished_at = RunStatus.CANCELLED, timezone.now()
        node_run.save(update_fields=["status", "finished_at"])
        _end(run, RunStatus.CANCELLED)
        return False
    if turn.status != TurnStatus.COMPLETED:
        _fail(run, node_run, turn.error or _("The step failed."))
        return False
    refused = _refused_tool_call(turn) if node_run.kind == "tool" else None
    if refused is not None:
        _fail(run, node_run, refused)
        return False
    node_run.output = _output(turn, node_run.kind)
    node_run.status, node_run.finished_at = RunStatus.COMPLETED, timezone.now()
    node_run.save(update_fields=["output", "status", "finished_at"])
    run.current_node += 1
    run.save(update_fields=["current_node"])
    return True


def _output(turn: Turn, kind: str) -> str:
    """What the node produced, as stored for the model (masked)."""
    role = MessageRole.TOOL if kind == "tool" else MessageRole.ASSISTANT
    message = Message.objects.filter(turn=turn, role=role).exclude(content="").order_by("-id").first()
    return message.content if message is not None else ""


def _refused_tool_call(turn: Turn) -> str | None:
    """A tool node whose call was refused or failed fails the run; the
    reason is the executor's value-free one."""
    finished = TurnEvent.objects.filter(turn=turn, type=ServerEvent.TOOL_FINISHED).order_by("-seq").first()
    if finished is None:
        return _("The step's tool call did not finish.")
    if finished.payload.get("outcome") != "success":
        return finished.payload.get("reason") or _("The step's tool call was refused.")
    return None


def _refusal(run: PlaybookRun) -> str:
    """Why the run may not go on as its person now (empty: it may). Asked
    before every node: the person's access is that of the moment the node
    runs, not of when the run or its schedule was set up."""
    actor = run.actor
    if actor is None or not actor.is_active:
        return _("The person this run acts for is not active.")
    if not may_run(run.playbook, actor):
        return _("The person this run acts for may no longer run this playbook.")
    model = run.playbook.model
    if not model.usable or model.provider.tier != run.playbook.tier:
        return _("The playbook's model is no longer available.")
    return ""


def values_of(run: PlaybookRun) -> dict[str, str]:
    values = dict(run.parameters or {})
    for node_run in NodeRun.objects.filter(run=run, status=RunStatus.COMPLETED):
        values[node_run.key] = node_run.output
    return values


def _start_node(run: PlaybookRun) -> Turn:
    from chat.models import Conversation

    index = run.current_node
    node = run.nodes[index]
    values = values_of(run)
    conversation = Conversation.objects.get(pk=run.conversation_id)
    title = run.playbook.name
    model = run.playbook.model
    if node["kind"] == "agent":
        rendered = spec.render(node["prompt"], values)
        turn = run_start(
            origin=origins.PLAYBOOK,
            user=run.actor,
            text=rendered,
            title=title,
            origin_ref=run.reference,
            model=f"{model.provider.name}/{model.name}",
            conversation=conversation,
        )
    else:
        rendered = spec.arguments_json(node["arguments"], values)
        call = {"id": f"pb{run.pk}s{index + 1}", "name": node["tool"], "arguments": rendered}
        turn = calls_run_start(
            origin=origins.PLAYBOOK,
            user=run.actor,
            calls=[call],
            model=model,
            title=title,
            origin_ref=run.reference,
            conversation=conversation,
        )
    NodeRun.objects.create(
        run=run,
        index=index,
        key=node["key"],
        kind=node["kind"],
        turn_id=turn.pk,
        status=RunStatus.RUNNING,
        rendered_input=rendered,  # from masked values: tokens only
    )
    return turn


def _fail(run: PlaybookRun, node_run: NodeRun, reason: str) -> None:
    node_run.status, node_run.error, node_run.finished_at = RunStatus.FAILED, reason[:2000], timezone.now()
    node_run.save(update_fields=["status", "error", "finished_at"])
    run.error = _("Step %(n)d (%(key)s) failed: %(reason)s") % {
        "n": node_run.index + 1,
        "key": node_run.key,
        "reason": reason,
    }
    _end(run, RunStatus.FAILED)
    notices.notify(run, notices.FAILED)


def _refuse(run: PlaybookRun, reason: str) -> None:
    run.error = reason
    _end(run, RunStatus.REFUSED)
    audit_event_write(
        kind=events.RUN_REFUSED,
        actor=run.actor,
        resource_kind=ResourceKind.PLAYBOOK_RUN,
        resource_id=run.pk,
        owner_id=run.actor_id,
        owner_username=run.actor.get_username(),
        details={"playbook_id": run.playbook_id, "step": run.current_node + 1, "reason": reason},
    )
    notices.notify(run, notices.FAILED)


def _end(run: PlaybookRun, status: str) -> None:
    run.status, run.finished_at = status, timezone.now()
    run.save(update_fields=["status", "finished_at", "error"])
