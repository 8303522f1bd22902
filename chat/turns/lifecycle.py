"""A turn's state transitions. The database is the truth: each
transition is one conditional UPDATE of the turn (it happens only from the
state it leaves, so a duplicate task, a redelivery or the recovery job racing
a worker changes nothing twice) together with the events it produces,
numbered and published after commit (chat.turns.journal).

    queued -> running -> waiting_approval -> queued -> running ...
                      -> queued (handed over: its worker is stopping)
                      -> completed | rejected | failed | cancelled
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from chat.models import Conversation, Message, Turn, TurnStatus
from chat.protocol import ServerEvent
from chat.turns import journal
from chat.turns import statements as sql
from chat.turns.emitter import TurnEmitter, make_emitter
from chat.turns.timing import clock_changes
from owlai import prepared
from owlai.connection_health import until_answered

logger = logging.getLogger(__name__)

RUNNING = (TurnStatus.RUNNING,)

# Sent after commit when a run ended (completed, rejected, failed, cancelled),
# with `turn_id`, `origin`, `origin_ref` and `status`: an origin whose work
# goes on after a run (the next step of a playbook run) listens for its own
# name. Receivers must not raise into the run core: errors are logged.
run_ended = Signal()
# Sent after commit when a run starts waiting for a person's approval
# (`waiting=True`) and when it stops waiting because the approval was decided
# or expired and the run is queued again (`waiting=False`), with `turn_id`,
# `origin` and `origin_ref`: an origin that shows its runs' state elsewhere
# (a playbook run's page) follows the wait without polling the turn. A Stop
# of a waiting run ends it: that is `run_ended`. Receivers must not raise
# into the run core: errors are logged.
run_wait_changed = Signal()


def _send_after_commit(signal: Signal, name: str, turn: Turn, **fields) -> None:
    # The turn's fields are read now: the caller may change the instance later.
    sent = {"turn_id": turn.pk, "origin": turn.origin, "origin_ref": turn.origin_ref, **fields}

    def send() -> None:
        for receiver, result in signal.send_robust(sender=Turn, **sent):
            if isinstance(result, Exception):
                logger.error("%s receiver %r failed for turn %s: %r", name, receiver, sent["turn_id"], result)

    transaction.on_commit(send)


def _ended(turn: Turn, status: str) -> None:
    _send_after_commit(run_ended, "run_ended", turn, status=status)


def emitter_for(turn: Turn) -> TurnEmitter:
    return make_emitter(group=turn.conversation.group_name, turn_id=turn.pk)


def message_rows(turn: Turn, entries: list[dict]) -> list[Message]:
    """The model-facing history entries of a turn as new Message rows."""
    return [
        Message(
            conversation_id=turn.conversation_id,
            turn_id=turn.pk,
            role=entry["role"],
            content=entry.get("content") or "",
            tool_calls=entry.get("tool_calls", []),
            tool_call_id=entry.get("tool_call_id", ""),
        )
        for entry in entries
    ]


def turn_claim(*, turn_id: int) -> Turn | None:
    """queued -> running, for exactly one worker: the claimed turn (with its
    conversation, owner and `last_seq`, see `claimed_turn`), or None. A
    duplicate delivery, a redelivered task after a worker died, or a turn the
    recovery job already failed all find it no longer queued and do nothing."""
    # A claim that meets a database restart waits for it (conditional on
    # `queued`, so a repeat after a lost answer claims nothing twice).
    return until_answered(
        lambda: _claim(turn_id), seconds=settings.OWLAI_TURN_END_RETRY_SECONDS, what=f"turn {turn_id}: its claim"
    )


def _claim(turn_id: int) -> Turn | None:
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    # A turn resumed after an approval keeps its first start.
    if prepared.writes_in_with():
        # The claim and the read in one statement.
        rows = prepared.fetchall(sql.claim_and_read(), [now, now, turn_id])
        return claimed_turn(rows[0]) if rows else None
    if not prepared.fetchall(sql.claim(), [now, now, turn_id]):
        return None
    return claimed_turn(prepared.fetchall(sql.claimed_turn(from_claim=False), [turn_id])[0])


def claimed_turn(row) -> Turn:
    """The turn with its conversation and owner, from a row of `sql.claimed_turn`."""
    user_model = Conversation._meta.get_field("owner").related_model
    turn = prepared.instances(Turn, row)
    conversation = prepared.instances(Conversation, row, len(Turn._meta.concrete_fields))
    conversation.owner = prepared.instances(
        user_model, row, len(Turn._meta.concrete_fields) + len(Conversation._meta.concrete_fields)
    )
    turn.conversation = conversation
    return turn


def turn_language(turn: Turn) -> str:
    """The language a turn runs in (stored at turn start; older turns: the default)."""
    return turn.language or settings.LANGUAGE_CODE


def finish(
    turn: Turn,
    emit: TurnEmitter,
    status: str,
    *,
    error: str = "",
    frames: list[tuple[str, dict]] = (),
    messages: list[dict] = (),
    failure: str = "",
) -> bool:
    """running -> completed | rejected | failed | cancelled: the status, the
    turn's messages and its last events (what the emitter holds, `frames`,
    `turn.finished`) stored together, so the database never says "finished"
    without the events a resync shows, nor the reverse. When the recovery job
    already failed the turn (stale heartbeat), nothing is written and False
    is returned."""
    now = timezone.now()
    frames = [*emit.take_held(), *frames, (ServerEvent.TURN_FINISHED, {"status": status})]
    rows = message_rows(turn, messages)
    changes = {
        "status": status,
        "error": error,
        "finished_at": now,
        "loop_state": None,
        "failure": failure,
        **clock_changes(turn),
    }
    # The end is stored on a fresh connection, waiting for the database when
    # it went away (e.g. the failure being reported is its restart): a turn
    # ends in its own words, not as "worker lost" after the heartbeat goes
    # stale. Conditional on `running`: a repeat after a lost answer is a no-op.
    stored = until_answered(
        lambda: journal.append(
            turn_id=turn.pk, group=emit.group, frames=frames, when=RUNNING, changes=changes, rows=rows
        ),
        seconds=settings.OWLAI_TURN_END_RETRY_SECONDS,
        what=f"turn {turn.pk}: storing its end",
    )
    if stored is None:
        logger.warning("turn %s was finished elsewhere (recovery); dropping its %s result", turn.pk, status)
        return False
    turn.status, turn.error, turn.finished_at = status, error, now
    _ended(turn, status)
    return True


def reject(turn: Turn, emit: TurnEmitter, reason: str) -> None:
    finish(turn, emit, TurnStatus.REJECTED, error=reason, frames=[(ServerEvent.TURN_REJECTED, {"reason": reason})])


def fail(turn: Turn, emit: TurnEmitter, message: str, *, failure: str = "error") -> None:
    """`failure`: the fixed code of the cause (audit_write, model, crash, ...),
    stored for /metrics; the client is told `message`."""
    finish(
        turn,
        emit,
        TurnStatus.FAILED,
        error=message,
        frames=[(ServerEvent.ERROR, {"code": "turn_failed", "message": message})],
        failure=failure,
    )


def wait_for_approval(turn: Turn, emit: TurnEmitter, *, loop_state: dict, requested: dict) -> bool:
    """running -> waiting_approval, with the loop's state and the
    `approval.requested` event; inside the caller's transaction (which stored
    the pending request). False when the turn no longer runs."""
    emit.flush()
    stored = journal.append(
        turn_id=turn.pk,
        group=emit.group,
        frames=[(ServerEvent.APPROVAL_REQUESTED, requested)],
        when=RUNNING,
        changes={"status": TurnStatus.WAITING_APPROVAL, "loop_state": loop_state, **clock_changes(turn)},
    )
    if stored is None:
        return False
    turn.status = TurnStatus.WAITING_APPROVAL
    _send_after_commit(run_wait_changed, "run_wait_changed", turn, waiting=True)
    return True


def hand_over(turn: Turn, emit: TurnEmitter, *, loop_state: dict) -> bool:
    """running -> queued with the loop's state, for another worker (this one
    is stopping: chat.turns.handover); inside the caller's transaction. No
    event: the client sees the turn go on. False when the turn no longer runs."""
    emit.flush()
    stored = journal.append(
        turn_id=turn.pk,
        group=emit.group,
        frames=[],
        when=RUNNING,
        changes={
            "status": TurnStatus.QUEUED,
            "loop_state": loop_state,
            "queued_at": timezone.now(),
            "requeued_at": None,
            **clock_changes(turn),
        },
    )
    if stored is None:
        return False
    turn.status = TurnStatus.QUEUED
    return True


def requeue_decided(turn: Turn, decided: dict) -> bool:
    """waiting_approval -> queued after the decision (or the expiry), with the
    `approval.decided` event; inside the caller's transaction. A turn failed
    meanwhile stays failed (False). The caller hands it to a worker after
    commit (chat.turns.dispatch.resume_soon); `run_wait_changed` is sent
    before that hand-over (registered first), so the origin sees the run go
    on before its next step can end it."""
    stored = journal.append(
        turn_id=turn.pk,
        group=turn.conversation.group_name,
        frames=[(ServerEvent.APPROVAL_DECIDED, decided)],
        when=(TurnStatus.WAITING_APPROVAL,),
        changes={"status": TurnStatus.QUEUED, "queued_at": timezone.now(), "requeued_at": None},
    )
    if stored is None:
        return False
    _send_after_commit(run_wait_changed, "run_wait_changed", turn, waiting=False)
    return True


def cancel_queued(turn: Turn) -> bool:
    """queued -> cancelled (Stop before any worker claimed it; the worker's
    claim then finds it no longer queued)."""
    now = timezone.now()
    stored = journal.append(
        turn_id=turn.pk,
        group=turn.conversation.group_name,
        frames=[(ServerEvent.TURN_FINISHED, {"status": TurnStatus.CANCELLED})],
        when=(TurnStatus.QUEUED,),
        changes={"status": TurnStatus.CANCELLED, "cancel_requested_at": now, "finished_at": now},
    )
    if stored is not None:
        _ended(turn, TurnStatus.CANCELLED)
    return stored is not None


def request_cancel(turn: Turn) -> bool:
    """A running turn gets `cancel_requested_at`; its worker reads it before
    its next model or tool call (chat.turns.runner) and ends it `cancelled`."""
    return bool(Turn.objects.filter(pk=turn.pk, status=TurnStatus.RUNNING).update(cancel_requested_at=timezone.now()))


def cancel_waiting(turn: Turn) -> bool:
    """waiting_approval -> cancelled: no worker holds the turn, so it ends
    here with what its loop had said so far; inside the caller's transaction
    (which withdrew the pending request)."""
    now = timezone.now()
    stored = journal.append(
        turn_id=turn.pk,
        group=turn.conversation.group_name,
        frames=[(ServerEvent.TURN_FINISHED, {"status": TurnStatus.CANCELLED})],
        when=(TurnStatus.WAITING_APPROVAL,),
        changes={"status": TurnStatus.CANCELLED, "cancel_requested_at": now, "finished_at": now, "loop_state": None},
        rows=message_rows(turn, (turn.loop_state or {}).get("new") or []),
    )
    if stored is not None:
        _ended(turn, TurnStatus.CANCELLED)
    return stored is not None


def fail_abandoned(turn: Turn, *, condition: Q, code: str, message: str) -> bool:
    """running | queued -> failed by the recovery job, if `condition` (the
    stale heartbeat, the unclaimed wait) still holds: the turn's worker (if
    any) finds it no longer running and writes nothing more."""
    with transaction.atomic():
        if not Turn.objects.filter(condition, pk=turn.pk).update(
            status=TurnStatus.FAILED, error=message, finished_at=timezone.now(), failure=code
        ):
            return False  # finished or claimed meanwhile
        journal.append(
            turn_id=turn.pk,
            group=turn.conversation.group_name,
            frames=[
                (ServerEvent.ERROR, {"code": code, "message": message}),
                (ServerEvent.TURN_FINISHED, {"status": TurnStatus.FAILED}),
            ],
        )
        _ended(turn, TurnStatus.FAILED)
    return True
