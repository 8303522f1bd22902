"""One writer of turn events (chat.turns.journal): numbers from one
conditional UPDATE, stored with it, published only after commit."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import transaction

from chat.models import Turn, TurnEvent, TurnStatus
from chat.services import conversation_create
from chat.turns import journal, lifecycle
from chat.turns.emitter import make_emitter

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def published(monkeypatch):
    frames: list[dict] = []
    monkeypatch.setattr("chat.events.publish_all", lambda group, sent: frames.extend(sent))
    return frames


@pytest.mark.django_db(transaction=True)
def test_events_of_a_transaction_are_published_after_it_commits_and_never_if_it_rolls_back(personas, published):
    conversation = conversation_create(owner=personas.staff)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.RUNNING)
    group = conversation.group_name

    with transaction.atomic():
        journal.append(turn_id=turn.pk, group=group, frames=[("tool.started", {"call_id": "a"})])
        assert published == []  # stored, not yet committed: nothing sent
    assert [(f["seq"], f["call_id"]) for f in published] == [(1, "a")]

    with pytest.raises(RuntimeError), transaction.atomic():
        journal.append(turn_id=turn.pk, group=group, frames=[("tool.started", {"call_id": "b"})])
        raise RuntimeError("the caller's transaction fails")
    assert len(published) == 1  # the rolled-back event was never sent
    assert list(TurnEvent.objects.filter(turn=turn).values_list("seq", flat=True)) == [1]
    assert Turn.objects.get(pk=turn.pk).last_seq == 1  # its number was not kept either

    # Outside any transaction the write commits on its own: sent at once.
    journal.append(turn_id=turn.pk, group=group, frames=[("tool.finished", {"call_id": "a"})])
    assert [f["seq"] for f in published] == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_two_writers_take_distinct_numbers_and_the_loser_goes_quiet(personas, published):
    """The worker streams while the recovery job fails its turn: the job's
    events follow the worker's without a gap or a clash, and the worker
    writes nothing after them."""
    conversation = conversation_create(owner=personas.staff)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.RUNNING)
    turn = Turn.objects.select_related("conversation").get(pk=turn.pk)
    emit = make_emitter(group=conversation.group_name, turn_id=turn.pk)
    emit("turn.accepted", {})
    emit("tool.started", {"call_id": "x"})
    assert lifecycle.fail_abandoned(turn, condition=_running(), code="worker_lost", message="m")
    emit("tool.finished", {"call_id": "x"})
    assert emit.lost
    rows = list(TurnEvent.objects.filter(turn=turn).order_by("seq").values_list("seq", "type"))
    assert rows == [(1, "turn.accepted"), (2, "tool.started"), (3, "error"), (4, "turn.finished")]
    assert [f["seq"] for f in published] == [1, 2, 3, 4]


def _running():
    from django.db.models import Q

    return Q(status=TurnStatus.RUNNING)


def test_no_event_number_is_read_back_with_max():
    """Numbers come only from the turn's counter: nothing in chat/ computes
    the next number from the stored events (migrations aside: the counter's
    backfill)."""
    offenders = []
    for path in (ROOT / "chat").rglob("*.py"):
        if "migrations" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        for needle in ('Max("seq")', "MAX(e.seq)", "MAX(seq)", "aggregate(last="):
            if needle in text:
                offenders.append(f"{path.relative_to(ROOT)}: {needle}")
    assert offenders == []
