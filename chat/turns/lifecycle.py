"""A turn's state transitions. The database is the truth: each
transition is one conditional UPDATE of the turn (it happens only from the
state it leaves, so a duplicate task, a redelivery or the recovery job racing
a worker changes nothing twice) together with the events it produces,
numbered and published after commit (chat.turns.journal).

    queued -> running -> waiting_approval -> queued -> running ...
                      -> completed | rejected | failed | cancelled
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection
from django.db.models import Max
from django.utils import timezone

from chat import events
from chat.models import Conversation, Message, Turn, TurnEvent, TurnStatus
from chat.protocol import ServerEvent
from chat.turns import statements as sql
from owlai import prepared

logger = logging.getLogger(__name__)


def emitter_for(turn: Turn) -> events.TurnEmitter:
    if hasattr(turn, "last_seq"):  # read with the turn (runner.turn_run)
        last = turn.last_seq or 0
    else:
        last = TurnEvent.objects.filter(turn_id=turn.pk).aggregate(last=Max("seq"))["last"] or 0
    return events.make_emitter(group=turn.conversation.group_name, turn_id=turn.pk, next_seq=last + 1)


def finish(
    turn: Turn,
    emit: events.TurnEmitter,
    status: str,
    *,
    error: str = "",
    frames: list[tuple[str, dict]] = (),
    messages: list[dict] = (),
) -> bool:
    """End a running turn: its status, its messages and its last events in one
    transaction, so the database never says "finished" without the events a
    resync shows, nor the reverse. Conditional on the turn still running:
    when the recovery job already failed it (stale heartbeat), nothing is
    written and False is returned."""
    held = emit.take_held()  # e.g. the answer's message.completed: stored with the end
    now = timezone.now()
    rows = [
        Message(
            conversation_id=turn.conversation_id,
            turn_id=turn.pk,
            role=entry["role"],
            content=entry.get("content") or "",
            tool_calls=entry.get("tool_calls", []),
            tool_call_id=entry.get("tool_call_id", ""),
        )
        for entry in messages
    ]
    first_seq = emit.next_seq
    stored = [
        emit.numbered(event_type, payload)
        for event_type, payload in [*held, *frames, (ServerEvent.TURN_FINISHED, {"status": status})]
    ]
    ended_params = [status, error, connection.ops.adapt_datetimefield_value(now), turn.pk]
    ended = False
    try:
        # The end, the messages and the events: one statement on PostgreSQL.
        ended = prepared.update_and_insert(sql.end(), ended_params, [*rows, *stored])
    finally:
        if not ended:  # nothing stored: the numbers are free again
            emit.next_seq = first_seq
    if not ended:
        logger.warning("turn %s was finished elsewhere (recovery); dropping its %s result", turn.pk, status)
        return False
    turn.status, turn.error, turn.finished_at = status, error, now
    events.publish_all(emit.group, [event.as_frame() for event in stored])
    return True


def turn_claim(*, turn_id: int) -> Turn | None:
    """queued -> running, for exactly one worker: the claimed turn (with its
    conversation, owner and `last_seq`, see `claimed_turn`), or None. A
    duplicate delivery, a redelivered task after a worker died, or a turn the
    recovery job already failed all find it no longer queued and do nothing."""
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
    """The turn with its conversation and owner, and `last_seq`: the last
    number its events took (a resumed turn has some), from a row of
    `sql.claimed_turn`."""
    user_model = Conversation._meta.get_field("owner").related_model
    turn = prepared.instances(Turn, row)
    conversation = prepared.instances(Conversation, row, len(Turn._meta.concrete_fields))
    conversation.owner = prepared.instances(
        user_model, row, len(Turn._meta.concrete_fields) + len(Conversation._meta.concrete_fields)
    )
    turn.conversation = conversation
    turn.last_seq = row[-1]
    return turn


def turn_language(turn: Turn) -> str:
    """The language a turn runs in (stored at turn start; older turns: the default)."""
    return turn.language or settings.LANGUAGE_CODE


def reject(turn: Turn, emit: events.TurnEmitter, reason: str) -> None:
    finish(turn, emit, TurnStatus.REJECTED, error=reason, frames=[(ServerEvent.TURN_REJECTED, {"reason": reason})])


def fail(turn: Turn, emit: events.TurnEmitter, message: str) -> None:
    finish(
        turn,
        emit,
        TurnStatus.FAILED,
        error=message,
        frames=[(ServerEvent.ERROR, {"code": "turn_failed", "message": message})],
    )
