"""The one writer of a turn's events.

`append` numbers events with one conditional UPDATE of the turn
(`last_seq = last_seq + k`, together with whatever state the transition
changes, only while the turn is in the state the writer expects) and stores
them with that UPDATE: one statement on PostgreSQL (a data-modifying WITH),
one transaction elsewhere. So two writers (the worker, the recovery job, a
decision) can never take the same number, none reads the largest stored one, and a turn
is never said to be in a state without the events a resync shows.

The stored events are published on the conversation's group after commit:
at once when the write committed on its own (autocommit, as in the worker),
else when the caller's transaction commits (`transaction.on_commit`), so a
rolled-back transition sends nothing. A frame the layer drops costs nothing:
the page sees the gap in `seq` and asks for the rest (chat.events.replay).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.db import connection, models, transaction

from chat import events
from chat.models import Turn, TurnEvent
from owlai import prepared

# Any state: the caller holds the turn (locked) and has checked it.
ANY_STATUS: tuple[str, ...] = ()


def append(
    *,
    turn_id: int,
    group: str,
    frames: Sequence[tuple[str, dict]],
    when: Sequence[str] = ANY_STATUS,
    changes: dict[str, Any] | None = None,
    rows: Sequence[models.Model] = (),
    guard: tuple[str, Sequence[Any]] | None = None,
) -> list[dict] | None:
    """Store `frames` (event type, payload) as the turn's next events, with
    the turn's `changes` (field name -> value) and new `rows` (e.g. its
    messages), only if the turn's status is one of `when` (any when empty)
    and, with a `guard` (a write returning rows, %s placeholders, and its
    parameters), only if the guard returned a row. The guard runs in the
    same statement (PostgreSQL: it stays applied when the turn was not in
    `when`) or, elsewhere, the same transaction (undone with the rest).
    Returns the stored frames (published after commit), or None when the turn
    was not in `when` or the guard found nothing: then nothing is written.
    Raises IntegrityError when a number is already taken (a row written
    behind this module's back)."""
    changes = changes or {}
    names = tuple(sorted(changes))
    count = len(frames)
    change_params = [Turn._meta.get_field(name).get_db_prep_save(changes[name], connection) for name in names]
    update_params = [*change_params, turn_id]
    drafts = [TurnEvent(turn_id=turn_id, seq=0, type=str(kind), payload=payload) for kind, payload in frames]
    if prepared.writes_in_with():
        params = [*guard[1]] if guard else []
        params.extend(update_params)
        for row in rows:
            params.extend(prepared.insert_values(row))
        for draft in drafts:
            params.extend(_event_values(draft))
        shapes = tuple(type(row) for row in rows)
        statement = _append_sql(names, tuple(when), count, shapes, guard[0] if guard else None)
        if connection.in_atomic_block:
            # A savepoint, so a refused number leaves the caller's transaction usable.
            with transaction.atomic():
                found = prepared.fetchall(statement, params)
        else:
            # One statement is atomic on its own: no BEGIN/COMMIT round trips
            # for every streamed delta.
            found = prepared.fetchall(statement, params)
        if not found:
            return None
        _number(drafts, found[0][0])
    else:
        try:
            with transaction.atomic():
                if guard and not prepared.fetchall(*guard):
                    raise _NotApplied
                found = prepared.fetchall(_count_sql(names, tuple(when), count), update_params)
                if not found:
                    raise _NotApplied  # undoes the guard's write
                for row in rows:
                    row.save(force_insert=True)
                _number(drafts, found[0][0])
                for draft in drafts:
                    prepared.insert(draft)
        except _NotApplied:
            return None
    stored = [draft.as_frame() for draft in drafts]
    publish_after_commit(group, stored)
    return stored


class _NotApplied(Exception):
    """The turn was not in the expected state, or the guard found nothing."""


def _number(drafts: list[TurnEvent], last: int) -> None:
    """The events took the numbers up to `last`, in order."""
    for n, draft in enumerate(drafts):
        draft.seq = last - len(drafts) + 1 + n


def publish_after_commit(group: str, frames: list[dict]) -> None:
    """Publish once what was stored is committed: now, when no transaction
    of a caller is open (the write committed on its own); else when it
    commits. A test's own wrapping transaction (pytest-django, TestCase) is
    not a caller's: Django's durable check makes the same distinction."""
    if not frames:
        return
    if any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks):
        transaction.on_commit(lambda: events.publish_all(group, frames))
    else:
        events.publish_all(group, frames)


def _event_values(draft: TurnEvent) -> list:
    """The INSERT parameters of an event but its `seq` (the statement numbers it)."""
    return [
        v
        for f, v in zip(prepared.insert_fields(TurnEvent), prepared.insert_values(draft), strict=True)
        if f.name != "seq"
    ]


@cache
def _count_sql(names: tuple[str, ...], when: tuple[str, ...], count: int, guarded: bool = False) -> str:
    """The conditional UPDATE that takes `count` numbers (and applies the
    transition's changes); returns the turn's new last number. `guarded`:
    only if the statement's `guard` returned a row."""
    sets = "".join(f", {Turn._meta.get_field(name).column} = %s" for name in names)
    condition = ""
    if when:
        condition = " AND status IN (" + ", ".join(f"'{status}'" for status in when) + ")"
    if guarded:
        condition += " AND EXISTS (SELECT 1 FROM guard)"
    return (
        f"UPDATE {Turn._meta.db_table} SET last_seq = last_seq + {count}{sets}"
        f" WHERE id = %s{condition} RETURNING last_seq"
    )


@cache
def _append_sql(names: tuple[str, ...], when: tuple[str, ...], count: int, shapes: tuple, guard: str | None) -> str:
    """PostgreSQL: the guard, then `_count_sql`, and only if it matched, the
    new rows and the events numbered from its result, in one statement
    (prepared: every streamed delta of every turn runs it)."""
    parts = [f"guard AS ({guard})"] if guard else []
    parts.append(f"counted AS ({_count_sql(names, when, count, guarded=guard is not None)})")
    for n, model in enumerate(shapes):
        fields = prepared.insert_fields(model)
        parts.append(
            f"row{n} AS (INSERT INTO {model._meta.db_table} ({', '.join(f.column for f in fields)})"
            f" SELECT {', '.join(['%s'] * len(fields))} FROM counted)"
        )
    fields = prepared.insert_fields(TurnEvent)
    columns = ", ".join(f.column for f in fields)
    for n in range(count):
        values = ", ".join(f"counted.last_seq - {count - 1 - n}" if f.name == "seq" else "%s" for f in fields)
        parts.append(f"event{n} AS (INSERT INTO {TurnEvent._meta.db_table} ({columns}) SELECT {values} FROM counted)")
    return f"WITH {', '.join(parts)} SELECT last_seq FROM counted"
