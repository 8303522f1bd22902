"""Conversation and turn actions.

`turn_start` runs in the websocket consumer (fast: validate, record, enqueue);
`turn_run` runs in the worker and owns the whole governed turn;
`turns_recover` runs from beat and finishes what lost workers left behind.

The database is the truth about a turn (its status, heartbeat and stored
events); Redis is transport. A turn is claimed by one conditional UPDATE
(queued -> running), so a duplicate or redelivered task is a no-op and no
model or tool call ever runs twice; a turn whose worker died mid-turn is
failed, visibly, never re-run.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from accounts.language import language_from, stored_language_sql
from audit.services import AuditWriteError
from chat import events
from chat.agent import ABANDONED, CANCELLED, LoopState, TurnAbandoned, TurnCancelled, TurnSuspended, run_agent_loop
from chat.approvals import (
    requested_payload,
    resuming,
    tool_approval_create,
    tool_approvals_expire,
    tool_approvals_withdraw,
)
from chat.context import TurnContext
from chat.executor import execute_tool_call, tool_definitions
from chat.executor.tools.connectors import connector_turn
from chat.llm import ModelError, client_for
from chat.models import Conversation, Message, MessageRole, Turn, TurnEvent, TurnStatus
from chat.prompt import mention_note, mentioned_targets, turn_inputs
from chat.protocol import ServerEvent
from governance.models import Feature, FeatureDefault, LlmModel, Provider, Tier
from owlai import prepared

logger = logging.getLogger(__name__)

ACTIVE_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.WAITING_APPROVAL)


class TurnRefused(Exception):
    """The consumer refuses to start a turn; the message goes to the user."""


@dataclass(frozen=True)
class ResolvedModel:
    model: LlmModel
    tier: str


class ModelUnresolvable(Exception):
    pass


TITLE_MAX_CHARS = 200
# A title taken from the first message: its first line, this long at most.
AUTO_TITLE_CHARS = 60


def conversation_create(*, owner: AbstractBaseUser, title: str = "", model: LlmModel | None = None) -> Conversation:
    return Conversation.objects.create(owner=owner, title=title[:TITLE_MAX_CHARS], model=model)


def title_from_message(text: str) -> str:
    """The first line of the first message, spaces collapsed, cut at a word
    boundary near AUTO_TITLE_CHARS with an ellipsis."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    first = " ".join(first.split())
    if len(first) <= AUTO_TITLE_CHARS:
        return first
    cut = first[:AUTO_TITLE_CHARS]
    space = cut.rfind(" ")
    return (cut[:space] if space > AUTO_TITLE_CHARS // 2 else cut).rstrip() + "…"


class ConversationRenameRefused(Exception):
    """The new title is unusable; the message goes to the user."""


def conversation_rename(*, conversation: Conversation, title: str, actor: AbstractBaseUser) -> Conversation:
    """The owner renames their conversation. The title is the owner's own
    content (never shown to admins), so this is not an audit event."""
    if conversation.owner_id != actor.pk:
        raise ConversationRenameRefused(_("Only the owner can rename this conversation."))
    title = " ".join(title.split())
    if not title:
        raise ConversationRenameRefused(_("The title is empty."))
    if len(title) > TITLE_MAX_CHARS:
        raise ConversationRenameRefused(
            _("The title is too long (at most %(max)d characters).") % {"max": TITLE_MAX_CHARS}
        )
    if not Conversation.objects.live().filter(pk=conversation.pk).update(title=title, updated_at=timezone.now()):
        raise ConversationRenameRefused(_("This conversation was deleted."))
    conversation.title = title
    return conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """The owner deletes a conversation: it disappears from their
    list and API at once, and its token vault (the originals behind its
    tokens) is deleted at once; messages and spill files stay until the
    purge `OWLAI_CONVERSATION_DELETED_DAYS` later (chat.retention). Audit
    rows never go with it (they name it by value only)."""
    from chat.models import UrlReference, VaultEntry

    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk, deleted_at__isnull=True).update(deleted_at=timezone.now())
        VaultEntry.objects.filter(conversation_id=conversation.pk).delete()
        # The URLs behind its references hold credentials: they go at once too.
        UrlReference.objects.filter(conversation_id=conversation.pk).delete()
    # Open sockets of this conversation close (a running turn stops at its
    # next step, and its vault allocations are refused: chat.vault).
    events.notify_conversation_deleted(group=conversation.group_name)


def models_for_conversation(*, conversation: Conversation | None) -> list[LlmModel]:
    """Enabled models a user may pick; once a conversation is pinned, only its tier."""
    qs = LlmModel.objects.select_related("provider").filter(enabled=True, in_config=True, provider__in_config=True)
    if conversation is not None and conversation.tier:
        qs = qs.filter(provider__tier=conversation.tier)
    return list(qs.order_by("provider__name", "name"))


@transaction.atomic
def turn_start(*, conversation: Conversation, user: AbstractBaseUser, text: str, model: str | None) -> Turn:
    if conversation.owner_id != user.pk:
        raise TurnRefused(_("Only the owner can continue this conversation."))
    text = text.strip()
    if not text:
        raise TurnRefused(_("The message is empty."))
    if len(text) > settings.OWLAI_MAX_MESSAGE_CHARS:
        raise TurnRefused(
            _("The message is too long (at most %(max)d characters).") % {"max": settings.OWLAI_MAX_MESSAGE_CHARS}
        )
    # Lock the conversation so two sockets cannot start two turns at once;
    # everything below reads the locked row (the caller's copy may be stale:
    # renamed, deleted). The same statement reads the user's language.
    key = _conversation_key(conversation.pk)
    rows = prepared.fetchall(_lock_sql(connection.features.has_select_for_update), [user.pk, key])
    locked = prepared.instances(Conversation, rows[0]) if rows else None
    if locked is None or locked.deleted_at is not None:
        raise TurnRefused(_("This conversation was deleted."))
    active, stored_language = rows[0][-2:]
    if active:  # a turn of it is queued, running or waiting for an approval
        # A turn whose worker died must not block the conversation until the
        # next recovery round (or forever, in the embedded profile without
        # beat); likewise an approval request left unanswered past its expiry
        # (the embedded profile runs no beat): its turn goes on.
        turns_recover(conversation_id=locked.pk, requeue=False)
        tool_approvals_expire(conversation_id=locked.pk)
        if Turn.objects.filter(conversation=locked, status=TurnStatus.WAITING_APPROVAL).exists():
            raise TurnRefused(_("A tool call in this conversation is waiting for your approval; answer it first."))
        if Turn.objects.filter(conversation=locked, status__in=ACTIVE_STATUSES).exists():
            raise TurnRefused(_("A turn is already running in this conversation."))
    # The language the whole turn runs in: the user's choice, else what the
    # socket's browser asked for (the active language here), else the default.
    language = language_from(stored=stored_language, fallback=translation.get_language())
    turn = Turn(conversation=locked, requested_model=(model or "")[:300], language=language)
    message = Message(conversation=locked, turn=turn, role=MessageRole.USER, content=text)
    if not locked.title:
        locked.title = title_from_message(text)
    locked.updated_at = timezone.now()
    touch = [locked.title, connection.ops.adapt_datetimefield_value(locked.updated_at), key]
    if prepared.writes_in_with():
        # The turn, its message and the conversation's title and time in one
        # statement (data-modifying WITH): one round trip on the hot path.
        message_values = prepared.insert_values(message)
        del message_values[_message_turn_index()]  # the new turn's id, from the statement itself
        ((turn_pk, message_pk),) = prepared.fetchall(
            _start_sql(), [*prepared.insert_values(turn), *message_values, *touch]
        )
        prepared.inserted(turn, turn_pk)
        message.turn = turn
        prepared.inserted(message, message_pk)
    else:
        prepared.insert(turn)
        message.turn = turn
        prepared.insert(message)
        prepared.fetchall(_touch_sql(), touch)
    return turn


@cache
def _lock_sql(for_update: bool) -> str:
    """The conversation, locked, whether a turn of it is active, and the
    user's stored language (prepared: every turn starts here)."""
    statuses = ", ".join(f"'{status}'" for status in ACTIVE_STATUSES)
    return (
        f"SELECT {prepared.columns(Conversation, 'c')}, EXISTS (SELECT 1 FROM {Turn._meta.db_table} t"
        f" WHERE t.conversation_id = c.id AND t.status IN ({statuses})), {stored_language_sql()}"
        f" FROM {Conversation._meta.db_table} c WHERE c.id = %s" + (" FOR UPDATE OF c" if for_update else "")
    )


@cache
def _touch_sql() -> str:
    return f"UPDATE {Conversation._meta.db_table} SET title = %s, updated_at = %s WHERE id = %s RETURNING id"


@cache
def _message_turn_index() -> int:
    return [f.name for f in prepared.insert_fields(Message)].index("turn")


@cache
def _start_sql() -> str:
    """PostgreSQL: INSERT the turn, INSERT its user message (with the new
    turn's id) and touch the conversation (`_touch_sql`), in one statement;
    returns the two new ids."""
    turn_sql = prepared.insert_sql(Turn)
    fields = prepared.insert_fields(Message)
    selected = ["new_turn.id" if f.name == "turn" else "%s" for f in fields]
    return (
        f"WITH new_turn AS ({turn_sql}),"
        f" new_message AS (INSERT INTO {Message._meta.db_table} ({', '.join(f.column for f in fields)})"
        f" SELECT {', '.join(selected)} FROM new_turn RETURNING {Message._meta.pk.column}),"
        f" touched AS ({_touch_sql()})"
        f" SELECT new_turn.id, new_message.{Message._meta.pk.column} FROM new_turn, new_message"
    )


class TurnCancelRefused(Exception):
    """Nothing to stop; the message goes to the user."""


def turn_cancel(*, conversation: Conversation, actor: AbstractBaseUser, turn_id: int | None = None) -> str:
    """The owner presses Stop on the conversation's active turn (or `turn_id`).

    A queued turn no worker has claimed is cancelled at once (the worker's
    claim then finds it no longer queued). A running turn gets
    `cancel_requested_at`; its worker reads that before its next model or
    tool call and ends the turn `cancelled`, keeping what already ran (and
    its audit rows). Returns "cancelled" or "requested"."""
    if conversation.owner_id != actor.pk:
        raise TurnCancelRefused(_("Only the owner can stop this conversation's turn."))
    turns = Turn.objects.filter(conversation=conversation, status__in=ACTIVE_STATUSES)
    if turn_id is not None:
        turns = turns.filter(pk=turn_id)
    turn = turns.order_by("-created_at", "-id").first()
    if turn is None:
        raise TurnCancelRefused(_("No turn is running in this conversation."))
    now = timezone.now()
    with transaction.atomic():
        if Turn.objects.filter(pk=turn.pk, status=TurnStatus.QUEUED).update(
            status=TurnStatus.CANCELLED, cancel_requested_at=now, finished_at=now
        ):
            stored = [_emitter_for(turn).record(ServerEvent.TURN_FINISHED, {"status": TurnStatus.CANCELLED})]
            group = conversation.group_name
            transaction.on_commit(lambda: [events.publish(group, frame) for frame in stored])
            return "cancelled"
    if Turn.objects.filter(pk=turn.pk, status=TurnStatus.RUNNING).update(cancel_requested_at=now):
        return "requested"
    with transaction.atomic():
        # Waiting for an approval, the turn holds no worker to notice: it ends
        # here, its pending call denied by the Stop (an `approval_denied` event).
        waiting = Turn.objects.select_for_update().filter(pk=turn.pk, status=TurnStatus.WAITING_APPROVAL).first()
        if waiting is not None:
            tool_approvals_withdraw(turn=waiting, actor=actor)
            for entry in (waiting.loop_state or {}).get("new") or []:
                Message.objects.create(
                    conversation=conversation,
                    turn=waiting,
                    role=entry["role"],
                    content=entry.get("content") or "",
                    tool_calls=entry.get("tool_calls", []),
                    tool_call_id=entry.get("tool_call_id", ""),
                )
            Turn.objects.filter(pk=turn.pk).update(
                status=TurnStatus.CANCELLED, cancel_requested_at=now, finished_at=now, loop_state=None
            )
            stored = [_emitter_for(turn).record(ServerEvent.TURN_FINISHED, {"status": TurnStatus.CANCELLED})]
            group = conversation.group_name
            transaction.on_commit(lambda: [events.publish(group, frame) for frame in stored])
            return "cancelled"
    # It finished between the read and the update: nothing left to stop.
    raise TurnCancelRefused(_("No turn is running in this conversation."))


def resolve_turn_model(*, turn: Turn) -> ResolvedModel:
    """The turn's model: the one asked for, else the conversation's, else the
    chat default. No guessing: anything unusable raises ModelUnresolvable."""
    conversation = turn.conversation
    model: LlmModel | None
    if turn.requested_model:
        model = _lookup_model(turn.requested_model)
    elif conversation.model_id:
        model = LlmModel.objects.select_related("provider").filter(pk=conversation.model_id).first()
    else:
        model = _chat_default_model()
    if model is None or not model.usable:
        raise ModelUnresolvable
    if model.provider.tier not in Tier.values:
        raise ModelUnresolvable
    return ResolvedModel(model=model, tier=model.provider.tier)


def _chat_default_model() -> LlmModel | None:
    """The chat default with its provider (a prepared statement: most turns ask)."""
    rows = prepared.fetchall(_chat_default_sql(), [Feature.CHAT])
    if not rows:
        return None
    model = prepared.instances(LlmModel, rows[0])
    model.provider = prepared.instances(Provider, rows[0], len(LlmModel._meta.concrete_fields))
    return model


@cache
def _chat_default_sql() -> str:
    return (
        f"SELECT {prepared.columns(LlmModel, 'm')}, {prepared.columns(Provider, 'p')}"
        f" FROM {FeatureDefault._meta.db_table} f JOIN {LlmModel._meta.db_table} m ON m.id = f.model_id"
        f" JOIN {Provider._meta.db_table} p ON p.id = m.provider_id WHERE f.feature = %s"
    )


def mention_tier(*, conversation: Conversation, model_ref: str) -> str | None:
    """The tier whose resources may be offered as @mention targets: the pinned
    tier, else that of the selected (or default) model; None when unknown."""
    if conversation.tier:
        return conversation.tier
    if model_ref:
        model = _lookup_model(model_ref)
    else:
        default = FeatureDefault.objects.select_related("model__provider").filter(feature=Feature.CHAT).first()
        model = default.model if default else None
    return model.provider.tier if model is not None and model.usable else None


def _lookup_model(ref: str) -> LlmModel | None:
    """A model by id, by "provider/name", or by a name only one provider serves."""
    qs = LlmModel.objects.select_related("provider")
    if ref.isdigit():
        return qs.filter(pk=int(ref)).first()
    provider_name, sep, name = ref.partition("/")
    if sep:
        exact = qs.filter(provider__name=provider_name, name=name).first()
        if exact is not None:
            return exact
    matches = list(qs.filter(name=ref)[:2])
    return matches[0] if len(matches) == 1 else None


def _history(conversation: Conversation, turn: Turn) -> list[dict]:
    """Model-facing history: completed turns, then this turn's user message."""
    entries: list[dict] = []
    rows = prepared.fetchall(_history_sql(), [_conversation_key(conversation.pk), turn.pk])
    for message in (prepared.instances(Message, row) for row in rows):
        if message.role == MessageRole.TOOL:
            entries.append({"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content})
        elif message.role == MessageRole.ASSISTANT:
            entry: dict = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                entry["tool_calls"] = message.tool_calls
            entries.append(entry)
        else:
            entries.append({"role": "user", "content": message.content})
    return entries


@cache
def _history_sql() -> str:
    # Prepared: every turn sends the history again.
    return (
        f"SELECT {prepared.columns(Message, 'm')} FROM {Message._meta.db_table} m"
        f" JOIN {Turn._meta.db_table} t ON t.id = m.turn_id"
        f" WHERE m.conversation_id = %s AND (t.status = '{TurnStatus.COMPLETED}' OR t.id = %s)"
        " ORDER BY m.created_at, m.id"
    )


def _emitter_for(turn: Turn) -> events.TurnEmitter:
    if hasattr(turn, "last_seq"):  # read with the turn (turn_run)
        last = turn.last_seq or 0
    else:
        last = TurnEvent.objects.filter(turn_id=turn.pk).aggregate(last=Max("seq"))["last"] or 0
    return events.make_emitter(group=turn.conversation.group_name, turn_id=turn.pk, next_seq=last + 1)


def _finish(
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
        ended = prepared.update_and_insert(_end_sql(), ended_params, [*rows, *stored])
    finally:
        if not ended:  # nothing stored: the numbers are free again
            emit.next_seq = first_seq
    if not ended:
        logger.warning("turn %s was finished elsewhere (recovery); dropping its %s result", turn.pk, status)
        return False
    turn.status, turn.error, turn.finished_at = status, error, now
    events.publish_all(emit.group, [event.as_frame() for event in stored])
    return True


class _Heartbeats:
    """One thread per worker process renews `heartbeat_at` of every turn
    running in it, with one UPDATE per OWLAI_TURN_HEARTBEAT_SECONDS on one
    database connection of its own, also while the turns wait for a slow
    model. So a thread pool of 64 turns holds one heartbeat connection, not 64.
    It dies with the worker process (kill -9, a lost pool child), and then the
    recovery job sees the heartbeats go stale and fails the turns.

    A turn is beaten at most OWLAI_TURN_TIMEOUT_SECONDS: the thread pool
    cannot kill a stuck task, so past that its heartbeat goes stale, the
    recovery job fails it, and the turn's thread stops at its next step
    (`_interruption`) without writing anything."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._beating = threading.Lock()  # held while an UPDATE is in flight
        self._turns: dict[int, float] = {}  # turn id -> monotonic time after which it is no longer beaten
        self._thread: threading.Thread | None = None

    def add(self, turn_id: int) -> None:
        with self._cond:
            self._turns[turn_id] = time.monotonic() + settings.OWLAI_TURN_TIMEOUT_SECONDS
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="owlai-turn-heartbeats", daemon=True)
                self._thread.start()
            self._cond.notify()  # the interval may have changed

    def remove(self, turn_id: int) -> None:
        with self._cond:
            self._turns.pop(turn_id, None)
            if not self._turns:
                self._cond.notify()  # the thread ends and closes its connection
        with self._beating:  # no beat of this turn lands after it left
            pass

    def _run(self) -> None:
        # A turn's claim writes its first heartbeat, so a turn joining does
        # not call for a beat: beats keep their interval, whatever the number
        # of turns starting (one UPDATE per turn start was most of this
        # thread's work under load).
        last_beat = time.monotonic()
        try:
            while True:
                with self._cond:
                    if not self._turns:
                        self._thread = None
                        return
                    now = time.monotonic()
                    # Read each time: a shorter interval applies at once.
                    due = last_beat + settings.OWLAI_TURN_HEARTBEAT_SECONDS
                    if now < due:
                        self._cond.wait(due - now)
                        continue
                    last_beat = now
                    self._beating.acquire()
                    ids = [turn_id for turn_id, until in self._turns.items() if until > now]
                try:
                    if ids:
                        Turn.objects.filter(pk__in=ids, status=TurnStatus.RUNNING).update(heartbeat_at=timezone.now())
                except DatabaseError as exc:
                    logger.warning("turns %s: heartbeat not written: %s", ids, exc)
                    connection.close()  # a fresh connection next time
                finally:
                    self._beating.release()
        finally:
            connection.close()  # this thread's own connection


_HEARTBEATS = _Heartbeats()


class TurnHeartbeat:
    """While a turn runs, its `heartbeat_at` is renewed every
    OWLAI_TURN_HEARTBEAT_SECONDS by the process's heartbeat thread (_Heartbeats)."""

    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id

    def __enter__(self) -> TurnHeartbeat:
        _HEARTBEATS.add(self.turn_id)
        return self

    def __exit__(self, *exc) -> None:
        _HEARTBEATS.remove(self.turn_id)


def turn_claim(*, turn_id: int) -> Turn | None:
    """queued -> running, for exactly one worker: the claimed turn (with its
    conversation, owner and `last_seq`, see `_claimed_turn`), or None. A
    duplicate delivery, a redelivered task after a worker died, or a turn the
    recovery job already failed all find it no longer queued and do nothing."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    # A turn resumed after an approval keeps its first start.
    if prepared.writes_in_with():
        # The claim and the read in one statement.
        rows = prepared.fetchall(_claim_and_read_sql(), [now, now, turn_id])
        return _claimed_turn(rows[0]) if rows else None
    if not prepared.fetchall(_claim_sql(), [now, now, turn_id]):
        return None
    return _claimed_turn(prepared.fetchall(_claimed_turn_sql(from_claim=False), [turn_id])[0])


@cache
def _claim_sql() -> str:
    # Prepared: it runs on every turn (owlai.prepared).
    table = Turn._meta.db_table
    return (
        f"UPDATE {table} SET status = '{TurnStatus.RUNNING}', started_at = COALESCE(started_at, %s),"
        f" heartbeat_at = %s WHERE id = %s AND status = '{TurnStatus.QUEUED}' RETURNING *"
    )


@cache
def _claim_and_read_sql() -> str:
    return f"WITH claimed AS ({_claim_sql()}) " + _claimed_turn_sql(from_claim=True)


def turn_run(*, turn_id: int) -> None:
    turn = turn_claim(turn_id=turn_id)
    if turn is None:
        logger.info("turn %s is not queued (duplicate delivery, already run, or gone); nothing to do", turn_id)
        return
    # Everything the turn says (rejections, failures, the executor's reasons,
    # the demo model's replies) is in the language resolved at turn start.
    with TurnHeartbeat(turn.pk), translation.override(turn_language(turn)):
        if turn.conversation.deleted_at is not None:
            _reject(turn, _emitter_for(turn), _("This conversation was deleted."))
            return
        try:
            if turn.loop_state is not None:
                _resume(turn)
            else:
                _run(turn)
        finally:
            # Deleted while this turn ran: what the turn put in the vault goes too.
            if prepared.fetchall(_deleted_sql(), [_conversation_key(turn.conversation_id)]):
                from chat.models import VaultEntry

                VaultEntry.objects.filter(conversation_id=turn.conversation_id).delete()


def _claimed_turn(row) -> Turn:
    """The turn with its conversation and owner, and `last_seq`: the last
    number its events took (a resumed turn has some), from a row of
    `_claimed_turn_sql`."""
    user_model = Conversation._meta.get_field("owner").related_model
    turn = prepared.instances(Turn, row)
    conversation = prepared.instances(Conversation, row, len(Turn._meta.concrete_fields))
    conversation.owner = prepared.instances(
        user_model, row, len(Turn._meta.concrete_fields) + len(Conversation._meta.concrete_fields)
    )
    turn.conversation = conversation
    turn.last_seq = row[-1]
    return turn


@cache
def _claimed_turn_sql(*, from_claim: bool) -> str:
    """The claimed turn with its conversation, owner and last seq: read from
    the claim's WITH (`claimed`), or from the turn table by id (one
    parameter)."""
    user_model = Conversation._meta.get_field("owner").related_model
    source = "claimed" if from_claim else Turn._meta.db_table
    return (
        f"SELECT {prepared.columns(Turn, 't')}, {prepared.columns(Conversation, 'c')},"
        f" {prepared.columns(user_model, 'u')},"
        f" (SELECT MAX(e.seq) FROM {TurnEvent._meta.db_table} e WHERE e.turn_id = t.id)"
        f" FROM {source} t JOIN {Conversation._meta.db_table} c ON c.id = t.conversation_id"
        f" JOIN {user_model._meta.db_table} u ON u.{user_model._meta.pk.column} = c.owner_id"
        + ("" if from_claim else " WHERE t.id = %s")
    )


@cache
def _pin_sql(with_model: bool) -> str:
    """Pin the conversation's tier (and model), unless deleted or already
    pinned to another tier (prepared: every turn)."""
    model = ", model_id = %s" if with_model else ""
    return (
        f"UPDATE {Conversation._meta.db_table} SET tier = %s, updated_at = %s{model}"
        " WHERE id = %s AND deleted_at IS NULL AND (tier = '' OR tier = %s) RETURNING id"
    )


@cache
def _turn_model_sql() -> str:
    return f"UPDATE {Turn._meta.db_table} SET model_name = %s, provider_name = %s, tier = %s WHERE id = %s RETURNING id"


@cache
def _pin_and_record_sql(with_model: bool) -> str:
    """`_pin_sql`, and only if it pinned, `_turn_model_sql`: one statement."""
    return (
        f"WITH pinned AS ({_pin_sql(with_model)}) {_turn_model_sql().removesuffix(' RETURNING id')}"
        " AND EXISTS (SELECT 1 FROM pinned) RETURNING id"
    )


@cache
def _end_sql() -> str:
    """A running turn's end (conditional: the recovery job may have ended it)."""
    return (
        f"UPDATE {Turn._meta.db_table} SET status = %s, error = %s, finished_at = %s, loop_state = NULL"
        f" WHERE id = %s AND status = '{TurnStatus.RUNNING}' RETURNING id"
    )


def _conversation_key(conversation_id):
    """A conversation id as a raw statement's parameter (a UUID is text on SQLite)."""
    return Conversation._meta.pk.get_db_prep_value(conversation_id, connection)


@cache
def _deleted_sql() -> str:
    return f"SELECT 1 FROM {Conversation._meta.db_table} WHERE id = %s AND deleted_at IS NOT NULL"


def turn_language(turn: Turn) -> str:
    """The language a turn runs in (stored at turn start; older turns: the default)."""
    return turn.language or settings.LANGUAGE_CODE


def _run(turn: Turn) -> None:
    conversation = turn.conversation
    emit = _emitter_for(turn)

    # 1. Model -> provider -> tier, before anything else is assembled.
    try:
        resolved = resolve_turn_model(turn=turn)
    except ModelUnresolvable:
        reason = _("No usable model could be determined for this turn. Pick an enabled model.")
        _reject(turn, emit, reason)
        return
    except Exception:
        logger.exception("model resolution failed")
        _reject(turn, emit, _("No usable model could be determined for this turn."))
        return

    # 2. A conversation keeps the tier it started with: one conditional
    # UPDATE pins it (or finds it pinned to this tier); only a refusal reads
    # why.
    # The same statement records the turn's model (where the database runs
    # writes in WITH; elsewhere a second statement).
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    key = _conversation_key(conversation.pk)
    model = resolved.model
    with_model = bool(turn.requested_model)
    pin = [resolved.tier, now, model.pk, key, resolved.tier] if with_model else [resolved.tier, now, key, resolved.tier]
    turn_model = [model.name, model.provider.name, resolved.tier, turn.pk]
    if prepared.writes_in_with():
        pinned = prepared.fetchall(_pin_and_record_sql(with_model), [*pin, *turn_model])
    else:
        pinned = prepared.fetchall(_pin_sql(with_model), pin)
        if pinned:
            prepared.fetchall(_turn_model_sql(), turn_model)
    reject_reason = ""
    if not pinned:
        current = Conversation.objects.filter(pk=conversation.pk).values_list("tier", "deleted_at").first()
        if current is None or current[1] is not None:
            reject_reason = _("This conversation was deleted.")
        else:
            reject_reason = _(
                "This conversation runs on %(tier)s models. To use %(model)s, start a new conversation."
            ) % {"tier": Tier(current[0]).label, "model": resolved.model}
    if reject_reason:
        _reject(turn, emit, reject_reason)
        return

    turn.model_name = model.name
    turn.provider_name = model.provider.name
    turn.tier = resolved.tier
    ctx = TurnContext(
        user_id=conversation.owner_id,
        username=conversation.owner.get_username(),
        tier=resolved.tier,
        model_name=model.name,
        provider_name=model.provider.name,
        conversation_id=conversation.pk,
        turn_id=turn.pk,
        language=turn_language(turn),
    )
    emit(
        ServerEvent.TURN_ACCEPTED,
        {
            "model": str(model),
            "tier": resolved.tier,
            "offline_demo": model.provider.kind == "offline-demo",
        },
    )
    _converse(turn, emit, ctx, model)


def _resume(turn: Turn) -> None:
    """A turn queued again after its approval was decided (or expired): the
    same model, tier and user as when it stopped, the loop continued from its
    stored state (nothing that ran is run again)."""
    emit = _emitter_for(turn)
    conversation = turn.conversation
    try:
        state = LoopState.from_json(turn.loop_state)
        model = (
            LlmModel.objects.select_related("provider")
            .filter(provider__name=turn.provider_name, name=turn.model_name)
            .first()
        )
    except Exception:
        logger.exception("turn %s: its stored state cannot be resumed", turn.pk)
        _fail(turn, emit, _("The turn could not be resumed."))
        return
    if model is None or not model.usable or model.provider.tier != turn.tier:
        _fail(turn, emit, _("The model of this turn is no longer available."))
        return
    ctx = TurnContext(
        user_id=conversation.owner_id,
        username=conversation.owner.get_username(),
        tier=turn.tier,
        model_name=model.name,
        provider_name=model.provider.name,
        conversation_id=conversation.pk,
        turn_id=turn.pk,
    )
    loop_state = turn.loop_state
    _converse(
        turn,
        emit,
        ctx,
        model,
        resume=state,
        loaded=loop_state.get("loaded") or [],
        approval_id=loop_state.get("approval_id"),
    )


def _converse(
    turn: Turn,
    emit: events.TurnEmitter,
    ctx: TurnContext,
    model: LlmModel,
    *,
    resume: LoopState | None = None,
    loaded: list[str] = (),
    approval_id: str | None = None,
) -> None:
    conversation = turn.conversation

    # 3. Everything the model sees is built from the visible resources only.
    inputs = turn_inputs(user_id=ctx.user_id, tier=ctx.tier, ctx=ctx)
    resources = inputs.resources
    messages = [{"role": "system", "content": inputs.system_prompt}, *_history(conversation, turn)]
    user_text = messages[-1]["content"] if messages[-1]["role"] == "user" else ""
    targets = mentioned_targets(user_text, resources)
    if targets:
        messages.insert(-1, {"role": "system", "content": mention_note(targets)})
    try:
        client = client_for(
            provider_kind=model.provider.kind,
            base_url=model.provider.base_url,
            api_key_env=model.provider.api_key_env,
            model_name=model.name,
        )
        if settings.OWLAI_MODEL_WAIT_RELEASES_DB:
            client = _ReleasingDbClient(client)
        # The turn's connector sessions (one per connector, reused by its
        # calls) close when this block ends: finished, failed or waiting.
        with connector_turn(loaded=loaded) as connectors, resuming(approval_id):
            try:
                result = run_agent_loop(
                    ctx=ctx,
                    client=client,
                    messages=messages,
                    # Asked again before every model call: e.g. read_spill is offered
                    # once a result of this turn was spilled, connector tools once loaded.
                    tools=_offered_tools(ctx, resources, first=inputs.tools if resume is None and not loaded else None),
                    execute=execute_tool_call,
                    emit=emit,
                    max_steps=settings.OWLAI_AGENT_MAX_STEPS,
                    # Stop before the next model or tool call when the owner deleted
                    # the conversation or pressed Stop, or the recovery job already
                    # failed this turn.
                    interruption=lambda: _interruption(turn.pk, emit),
                    resume=resume,
                )
            except TurnSuspended as suspended:
                _suspend(turn, emit, suspended, loaded=sorted(connectors.loaded))
                return
    except TurnCancelled as cancelled:
        _finish(turn, emit, TurnStatus.CANCELLED, messages=cancelled.new_messages)
        return
    except TurnAbandoned:
        _reject(turn, emit, _("This conversation was deleted."))
        return
    except AuditWriteError:
        logger.exception("audit write failed; tool result withheld")
        _fail(turn, emit, _("The action could not be recorded in the audit log, so its result was withheld."))
        return
    except ModelError as exc:
        _fail(turn, emit, _("The model call failed: %(error)s") % {"error": exc})
        return
    except Exception:
        logger.exception("turn %s crashed", turn.pk)
        _fail(turn, emit, _("The turn failed unexpectedly."))
        return

    final_text = result.final_text
    frames: list[tuple[str, dict]] = []
    if result.step_limit_hit:
        final_text = _("I stopped after %(steps)d steps without a final answer.") % {
            "steps": settings.OWLAI_AGENT_MAX_STEPS
        }
        frames.append((ServerEvent.MESSAGE_COMPLETED, {"text": final_text}))
        result.new_messages.append({"role": "assistant", "content": final_text})
    _finish(turn, emit, TurnStatus.COMPLETED, frames=frames, messages=result.new_messages)


def _offered_tools(ctx: TurnContext, resources, *, first: list[dict] | None):
    """The tools before each model call: `first` (the ones just built with
    the turn's inputs) for the first call, asked for again before every
    later one."""
    pending = [first] if first is not None else []

    def offered() -> list[dict]:
        return pending.pop() if pending else tool_definitions(ctx, resources)

    return offered


def _interruption(turn_id: int, emit: events.TurnEmitter) -> str | None:
    """Whether the turn should stop before its next model or tool call, in
    one query: ABANDONED when it is no longer running (the recovery job
    failed it), its conversation was deleted, or its events can no longer be
    written as ours; CANCELLED when the owner pressed Stop."""
    rows = prepared.fetchall(_interruption_sql(), [turn_id])
    row = rows[0] if rows else None
    if row is None or row[0] != TurnStatus.RUNNING or row[2] is not None or emit.lost:
        return ABANDONED
    if row[1] is not None:
        return CANCELLED
    return None


@cache
def _interruption_sql() -> str:
    # Prepared: it runs before every model and tool call (owlai.prepared).
    return (
        f"SELECT t.status, t.cancel_requested_at, c.deleted_at FROM {Turn._meta.db_table} t"
        f" JOIN {Conversation._meta.db_table} c ON c.id = t.conversation_id WHERE t.id = %s"
    )


def _suspend(turn: Turn, emit: events.TurnEmitter, suspended: TurnSuspended, *, loaded: list[str]) -> bool:
    """The turn waits for an approval, holding no worker: the pending request,
    the loop's state and the `approval.requested` event in one transaction,
    conditional on the turn still running (as _finish). The task then ends;
    the decision or the expiry job queues the turn again."""
    emit.flush()
    state = suspended.state
    with transaction.atomic():
        approval = tool_approval_create(turn=turn, request=suspended.request, tool_call_id=state.pending[0]["id"])
        stored = {**state.as_json(), "loaded": loaded, "approval_id": str(approval.pk)}
        if not Turn.objects.filter(pk=turn.pk, status=TurnStatus.RUNNING).update(
            status=TurnStatus.WAITING_APPROVAL, loop_state=stored
        ):
            transaction.set_rollback(True)
            logger.warning("turn %s was finished elsewhere (recovery); not waiting for its approval", turn.pk)
            return False
        frame = emit.record(ServerEvent.APPROVAL_REQUESTED, requested_payload(approval))
    turn.status = TurnStatus.WAITING_APPROVAL
    events.publish(emit.group, frame)
    return True


class _ReleasingDbClient:
    """Closes this thread's database connection before each model call, so
    a turn waiting for its model holds a worker thread but no database
    connection (workers: OWLAI_MODEL_WAIT_RELEASES_DB, on by default). The
    next query (a streamed delta, the tool call) opens one again. Not inside
    a transaction: there the connection is the transaction's."""

    def __init__(self, client) -> None:
        self._client = client

    def complete(self, **kwargs):
        if not connection.in_atomic_block:
            connection.close()
        return self._client.complete(**kwargs)


def _reject(turn: Turn, emit: events.TurnEmitter, reason: str) -> None:
    _finish(turn, emit, TurnStatus.REJECTED, error=reason, frames=[(ServerEvent.TURN_REJECTED, {"reason": reason})])


def _fail(turn: Turn, emit: events.TurnEmitter, message: str) -> None:
    _finish(
        turn,
        emit,
        TurnStatus.FAILED,
        error=message,
        frames=[(ServerEvent.ERROR, {"code": "turn_failed", "message": message})],
    )


# --- Recovery: the database says what a lost worker or a lost message left ---


@dataclass
class RecoveryReport:
    failed_running: int = 0
    requeued: int = 0
    failed_queued: int = 0


def turns_recover(*, conversation_id=None, requeue: bool = True) -> RecoveryReport:
    """Beat, every OWLAI_TURN_RECOVERY_SECONDS (and `turn_start`, for its own
    conversation, without re-enqueueing):

    - a running turn whose heartbeat is older than OWLAI_TURN_STALE_SECONDS
      lost its worker: it is failed (never re-run: its model and tool calls
      may already have happened) and its sockets are told;
    - a queued turn no worker claimed within OWLAI_TURN_QUEUE_SECONDS (its
      message may have died with Redis) is enqueued once more; still queued
      OWLAI_TURN_QUEUE_SECONDS later, it is failed."""
    now = timezone.now()
    report = RecoveryReport()
    turns = Turn.objects.all()
    if conversation_id is not None:
        turns = turns.filter(conversation_id=conversation_id)
    stale = Q(status=TurnStatus.RUNNING) & (
        Q(heartbeat_at__lt=now - timedelta(seconds=settings.OWLAI_TURN_STALE_SECONDS))
        | Q(heartbeat_at__isnull=True, created_at__lt=now - timedelta(seconds=settings.OWLAI_TURN_STALE_SECONDS))
    )
    queue_deadline = now - timedelta(seconds=settings.OWLAI_TURN_QUEUE_SECONDS)
    unclaimed_twice = Q(status=TurnStatus.QUEUED, requeued_at__lt=queue_deadline)
    if not requeue:
        # Where nothing re-enqueues (turn_start), a queued turn gets the same
        # total wait before it is failed.
        unclaimed_twice |= Q(status=TurnStatus.QUEUED, requeued_at__isnull=True) & _queued_before(
            queue_deadline - timedelta(seconds=settings.OWLAI_TURN_QUEUE_SECONDS)
        )
    for turn_id in turns.filter(stale).values_list("pk", flat=True):
        if _turn_fail_abandoned(
            turn_id=turn_id,
            condition=stale,
            code="worker_lost",
            message=_("The worker running this turn stopped before it finished. Please send your message again."),
        ):
            report.failed_running += 1
    for turn_id in turns.filter(unclaimed_twice).values_list("pk", flat=True):
        if _turn_fail_abandoned(
            turn_id=turn_id,
            condition=unclaimed_twice,
            code="not_started",
            message=_("No worker picked up this turn. Please send your message again."),
        ):
            report.failed_queued += 1
    if requeue:
        unclaimed = Q(status=TurnStatus.QUEUED, requeued_at__isnull=True) & _queued_before(queue_deadline)
        for turn_id in turns.filter(unclaimed).values_list("pk", flat=True):
            if _turn_requeue(turn_id=turn_id, condition=unclaimed):
                report.requeued += 1
    if report.failed_running or report.failed_queued or report.requeued:
        logger.warning("turn recovery: %s", report)
    return report


def _queued_before(moment) -> Q:
    """Handed to the queue before `moment`: when created, or when queued
    again after an approval (`queued_at`)."""
    return Q(queued_at__lt=moment) | Q(queued_at__isnull=True, created_at__lt=moment)


def _turn_requeue(*, turn_id: int, condition: Q) -> bool:
    from chat.tasks import run_turn

    if not Turn.objects.filter(condition, pk=turn_id).update(requeued_at=timezone.now()):
        return False
    try:
        run_turn.delay(turn_id)
    except Exception as exc:
        # Broker still away: try again next round rather than count this.
        logger.warning("turn %s: could not enqueue again: %s", turn_id, exc)
        Turn.objects.filter(pk=turn_id, status=TurnStatus.QUEUED).update(requeued_at=None)
        return False
    return True


def _turn_fail_abandoned(*, turn_id: int, condition: Q, code: str, message) -> bool:
    """Fail one turn if `condition` still holds, with its events stored in
    the same transaction and published after commit."""
    turn = Turn.objects.select_related("conversation").filter(pk=turn_id).first()
    if turn is None:
        return False
    with translation.override(turn_language(turn)):
        text = str(message)
    with transaction.atomic():
        if not Turn.objects.filter(condition, pk=turn_id).update(
            status=TurnStatus.FAILED, error=text, finished_at=timezone.now()
        ):
            return False  # finished or claimed meanwhile
        emit = _emitter_for(turn)
        stored = [
            emit.record(ServerEvent.ERROR, {"code": code, "message": text}),
            emit.record(ServerEvent.TURN_FINISHED, {"status": TurnStatus.FAILED}),
        ]
        group = turn.conversation.group_name
        transaction.on_commit(lambda: [events.publish(group, frame) for frame in stored])
    return True


# --- What a (re)connecting client is shown -------------------------------------


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
        else {"turn_id": latest.pk, "status": latest.status, "events": events.replay(turn_id=latest.pk)},
    }


def _turns_of(conversation: Conversation) -> list[Turn]:
    # Prepared: every socket's connect and every resync reads them.
    rows = prepared.fetchall(_turns_sql(), [_conversation_key(conversation.pk)])
    return [prepared.instances(Turn, row) for row in rows]


@cache
def _turns_sql() -> str:
    return f"SELECT {prepared.columns(Turn, 't')} FROM {Turn._meta.db_table} t WHERE t.conversation_id = %s"


@cache
def _timeline_messages_sql() -> str:
    return (
        f"SELECT m.role, m.content, m.turn_id, m.tool_call_id FROM {Message._meta.db_table} m"
        " WHERE m.conversation_id = %s ORDER BY m.created_at, m.id"
    )


@cache
def _step_events_sql() -> str:
    kinds = ", ".join(
        f"'{kind}'"
        for kind in (
            ServerEvent.TOOL_STARTED,
            ServerEvent.TOOL_FINISHED,
            ServerEvent.APPROVAL_REQUESTED,
            ServerEvent.APPROVAL_DECIDED,
        )
    )
    return (
        f"SELECT {prepared.columns(TurnEvent, 'e')} FROM {TurnEvent._meta.db_table} e"
        f" JOIN {Turn._meta.db_table} t ON t.id = e.turn_id"
        f" WHERE t.conversation_id = %s AND e.type IN ({kinds}) ORDER BY e.turn_id, e.seq"
    )


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

    messages = prepared.fetchall(_timeline_messages_sql(), [_conversation_key(conversation.pk)])
    for role, content, turn_id, tool_call_id in messages:
        if turn_id != last_turn_id:
            if last_turn_id is not None:
                close_turn(last_turn_id)
            last_turn_id = turn_id
        if role == MessageRole.USER:
            out.append({"role": "user", "content": content, "turn_id": turn_id})
            continue
        if turn_id == skip_turn:
            continue
        turn = turns.get(turn_id)
        if role == MessageRole.ASSISTANT and content:
            out.append(
                {
                    "role": "assistant",
                    "content": content,
                    "turn_id": turn_id,
                    "model": labels.get((turn.provider_name, turn.model_name), turn.model_name) if turn else "",
                    "tier": turn.tier if turn else "",
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


def _steps_by_call(conversation: Conversation) -> dict[tuple[int, str], dict]:
    """(turn id, call id) -> the step as its events described it."""
    found: dict[tuple[int, str], dict] = {}
    rows = prepared.fetchall(_step_events_sql(), [_conversation_key(conversation.pk)])
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
