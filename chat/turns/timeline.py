"""What a (re)connecting client and the API are shown of a
conversation, from the database alone (selectors: they write nothing).
"""

from __future__ import annotations

import logging

from chat import events
from chat.models import Conversation, MessageRole, Turn, TurnEvent, TurnStatus
from chat.protocol import ServerEvent
from chat.turns import statements as sql
from governance.models import LlmModel
from owlai import prepared
from owlai.times import api_time

logger = logging.getLogger(__name__)


def conversation_state(*, conversation: Conversation) -> dict:
    """The `state` frame, from the database alone: the conversation's
    timeline (but the latest turn's answer), and the latest turn with its
    status and every stored event, so its text so far, tool steps and outcome
    render exactly as if they had been received live."""
    turns = _turns_of(conversation)
    latest = max(turns, key=lambda t: (t.created_at, t.pk), default=None)
    return {
        "type": ServerEvent.STATE,
        "messages": conversation_timeline(
            conversation=conversation, answer_of_latest=False, latest=latest, turns=turns
        ),
        "turn": None
        if latest is None
        else {
            "turn_id": latest.pk,
            "status": latest.status,
            "events": events.replay(turn_id=latest.pk),
            "finished_at": _iso(latest.finished_at),
        },
    }


def _turns_of(conversation: Conversation) -> list[Turn]:
    # Prepared: every socket's connect and every resync reads them.
    rows = prepared.fetchall(sql.turns(), [sql.conversation_key(conversation.pk)])
    return [prepared.instances(Turn, row) for row in rows]


ENDED_WITHOUT_ANSWER = (TurnStatus.REJECTED, TurnStatus.FAILED, TurnStatus.CANCELLED)


def conversation_timeline(
    *, conversation: Conversation, answer_of_latest: bool = True, latest=None, turns: list[Turn] | None = None
) -> list[dict]:
    """What the user sees of a conversation, in order, turn by turn: their
    messages (`user`), the assistant's texts (`assistant`, with the model and
    tier), each tool call as a `step` (tool, resource, SQL or query as the
    model wrote it, outcome, rows, duration, reason, the start of the result:
    from the turn's stored `tool.started`/`tool.finished` events), and for a
    turn that ended without an answer its `status` (rejected, failed,
    cancelled) with the reason. `answer_of_latest=False` leaves out all but
    the user message of the latest turn (the `state` frame replays its events
    instead). `turns`: the conversation's turns, when the caller read them."""
    turns = {t.pk: t for t in (_turns_of(conversation) if turns is None else turns)}
    if not answer_of_latest and latest is None and turns:
        latest = max(turns.values(), key=lambda t: (t.created_at, t.pk))
    skip_turn = None if answer_of_latest or latest is None else latest.pk
    steps = _steps_by_call(conversation)
    # The model as the page names it live (`turn.accepted`): its label.
    labels = {
        (m.provider.name, m.name): str(m)
        for m in LlmModel.objects.select_related("provider").filter(
            name__in={t.model_name for t in turns.values() if t.model_name}
        )
    }
    out: list[dict] = []
    last_turn_id = None

    shown: set[tuple[int, str]] = set()

    def close_turn(turn_id) -> None:
        turn = turns.get(turn_id)
        if turn is not None and turn.pk != skip_turn and turn.status in ENDED_WITHOUT_ANSWER:
            # A turn that failed mid-way stored no messages, but its tool
            # calls ran (and are audited): show them as they were streamed.
            for key, step in steps.items():
                if key[0] == turn.pk and key not in shown:
                    out.append({"role": "step", "turn_id": turn.pk, **step})
            out.append({"role": "status", "turn_id": turn.pk, "status": turn.status, "content": turn.error})

    messages = prepared.fetchall(sql.timeline_messages(), [sql.conversation_key(conversation.pk)])
    for role, content, turn_id, tool_call_id in messages:
        if turn_id != last_turn_id:
            if last_turn_id is not None:
                close_turn(last_turn_id)
            last_turn_id = turn_id
        turn = turns.get(turn_id)
        if role == MessageRole.USER:
            out.append(
                {
                    "role": "user",
                    "content": content,
                    "turn_id": turn_id,
                    # A new version of that turn (regenerated or edited), and when it was sent.
                    "supersedes": turn.supersedes_id if turn else None,
                    "at": _iso(turn.created_at if turn else None),
                }
            )
            continue
        if turn_id == skip_turn:
            continue
        if role == MessageRole.ASSISTANT and content:
            out.append(
                {
                    "role": "assistant",
                    "content": content,
                    "turn_id": turn_id,
                    "model": labels.get((turn.provider_name, turn.model_name), turn.model_name) if turn else "",
                    "tier": turn.tier if turn else "",
                    "at": _iso(turn.finished_at if turn else None),
                }
            )
        elif role == MessageRole.TOOL:
            key = (turn_id, tool_call_id)
            shown.add(key)
            step = steps.get(key, {"call_id": tool_call_id})
            out.append({"role": "step", "turn_id": turn_id, **step})
    if last_turn_id is not None:
        close_turn(last_turn_id)
    return out


def _iso(moment) -> str | None:
    return api_time(moment)


def _steps_by_call(conversation: Conversation) -> dict[tuple[int, str], dict]:
    """(turn id, call id) -> the step as its events described it."""
    found: dict[tuple[int, str], dict] = {}
    rows = prepared.fetchall(sql.step_events(), [sql.conversation_key(conversation.pk)])
    for event in (prepared.instances(TurnEvent, row) for row in rows):
        payload = event.payload or {}
        key = (event.turn_id, str(payload.get("call_id", "")))
        step = found.setdefault(key, {})
        if event.type in (ServerEvent.APPROVAL_REQUESTED, ServerEvent.APPROVAL_DECIDED):
            # What was asked and how it was answered, as the step's `approval`.
            asked = {k: v for k, v in payload.items() if k not in ("call_id", "expires_in")}
            step["approval"] = {**step.get("approval", {}), **asked}
            continue
        asked_before = step.get("approval")
        step.update(payload)
        if asked_before is not None:
            step["approval"] = {**asked_before, **(payload.get("approval") or {})}
        if event.type == ServerEvent.TOOL_FINISHED:
            found[key]["finished"] = True
    return found


def turn_events_after(*, conversation: Conversation, turn_id: int, after_seq: int) -> list[dict] | None:
    """A turn's stored events after `after_seq` (the `sync` frame); None
    when the turn is not this conversation's."""
    if not Turn.objects.filter(pk=turn_id, conversation=conversation).exists():
        return None
    return events.replay(turn_id=turn_id, after_seq=after_seq)
