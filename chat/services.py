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

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import DatabaseError, connection, transaction
from django.db.models import Max, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from audit.services import AuditWriteError
from chat import events
from chat.agent import LoopState, TurnAbandoned, TurnSuspended, run_agent_loop
from chat.approvals import (
    APPROVAL_REQUESTED,
    requested_payload,
    resuming,
    tool_approval_create,
    tool_approvals_expire,
)
from chat.context import TurnContext
from chat.executor import execute_tool_call, tool_definitions
from chat.executor.tools.connectors import connector_turn
from chat.llm import ModelError, client_for
from chat.models import Conversation, Message, MessageRole, Turn, TurnEvent, TurnStatus
from chat.prompt import mention_note, mentioned_targets, system_prompt
from governance.models import Feature, FeatureDefault, LlmModel, Tier
from governance.visibility import visible_resources

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


def conversation_create(*, owner: AbstractBaseUser, title: str = "", model: LlmModel | None = None) -> Conversation:
    return Conversation.objects.create(owner=owner, title=title[:200], model=model)


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
    # Lock the conversation so two sockets cannot start two turns at once.
    locked = Conversation.objects.select_for_update().filter(pk=conversation.pk).first()
    if locked is None or locked.deleted_at is not None:
        raise TurnRefused(_("This conversation was deleted."))
    # A turn whose worker died must not block the conversation until the
    # next recovery round (or forever, in the embedded profile without beat).
    turns_recover(conversation_id=conversation.pk, requeue=False)
    # Likewise an approval request left unanswered past its expiry (the
    # embedded profile runs no beat): its turn goes on.
    tool_approvals_expire(conversation_id=conversation.pk)
    if Turn.objects.filter(conversation=conversation, status=TurnStatus.WAITING_APPROVAL).exists():
        raise TurnRefused(_("A tool call in this conversation is waiting for your approval; answer it first."))
    if Turn.objects.filter(conversation=conversation, status__in=ACTIVE_STATUSES).exists():
        raise TurnRefused(_("A turn is already running in this conversation."))
    turn = Turn.objects.create(
        conversation=conversation, requested_model=(model or "")[:300], language=translation.get_language() or ""
    )
    Message.objects.create(conversation=conversation, turn=turn, role=MessageRole.USER, content=text)
    if not conversation.title:
        conversation.title = text[:80]
    conversation.save(update_fields=["title", "updated_at"])
    return turn


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
        default = FeatureDefault.objects.select_related("model__provider").filter(feature=Feature.CHAT).first()
        model = default.model if default else None
    if model is None or not model.usable:
        raise ModelUnresolvable
    if model.provider.tier not in Tier.values:
        raise ModelUnresolvable
    return ResolvedModel(model=model, tier=model.provider.tier)


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
    qs = Message.objects.filter(conversation=conversation).filter(
        turn__status=TurnStatus.COMPLETED
    ) | Message.objects.filter(turn=turn)
    for message in qs.order_by("created_at", "id"):
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


def _emitter_for(turn: Turn) -> events.TurnEmitter:
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
    emit.flush()
    with transaction.atomic():
        now = timezone.now()
        if not Turn.objects.filter(pk=turn.pk, status=TurnStatus.RUNNING).update(
            status=status, error=error, finished_at=now, loop_state=None
        ):
            logger.warning("turn %s was finished elsewhere (recovery); dropping its %s result", turn.pk, status)
            return False
        for entry in messages:
            Message.objects.create(
                conversation=turn.conversation,
                turn=turn,
                role=entry["role"],
                content=entry.get("content") or "",
                tool_calls=entry.get("tool_calls", []),
                tool_call_id=entry.get("tool_call_id", ""),
            )
        stored = [
            emit.record(event_type, payload)
            for event_type, payload in [*frames, (events.TURN_FINISHED, {"status": status})]
        ]
    turn.status, turn.error, turn.finished_at = status, error, now
    for frame in stored:
        events.publish(emit.group, frame)
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
    (`still_wanted`) without writing anything."""

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
        with self._beating:  # no beat of this turn lands after it left
            pass

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._turns:
                        self._thread = None
                        return
                    self._cond.wait(settings.OWLAI_TURN_HEARTBEAT_SECONDS)
                    now = time.monotonic()
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


def turn_claim(*, turn_id: int) -> bool:
    """queued -> running, for exactly one worker. A duplicate delivery, a
    redelivered task after a worker died, or a turn the recovery job already
    failed all find it no longer queued and do nothing."""
    now = timezone.now()
    return bool(
        Turn.objects.filter(pk=turn_id, status=TurnStatus.QUEUED).update(
            # A turn resumed after an approval keeps its first start.
            status=TurnStatus.RUNNING,
            started_at=Coalesce("started_at", Value(now)),
            heartbeat_at=now,
        )
    )


def turn_run(*, turn_id: int) -> None:
    if not turn_claim(turn_id=turn_id):
        logger.info("turn %s is not queued (duplicate delivery, already run, or gone); nothing to do", turn_id)
        return
    turn = Turn.objects.select_related("conversation__owner").get(pk=turn_id)
    with TurnHeartbeat(turn.pk):
        if turn.conversation.deleted_at is not None:
            _reject(turn, _emitter_for(turn), _("This conversation was deleted."))
            return
        try:
            with translation.override(turn.language or settings.LANGUAGE_CODE):
                if turn.loop_state is not None:
                    _resume(turn)
                else:
                    _run(turn)
        finally:
            # Deleted while this turn ran: what the turn put in the vault goes too.
            if Conversation.objects.filter(pk=turn.conversation_id, deleted_at__isnull=False).exists():
                from chat.models import VaultEntry

                VaultEntry.objects.filter(conversation_id=turn.conversation_id).delete()


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

    # 2. A conversation keeps the tier it started with.
    with transaction.atomic():
        locked = Conversation.objects.select_for_update().get(pk=conversation.pk)
        if locked.deleted_at is not None:
            reject_reason = _("This conversation was deleted.")
        elif locked.tier and locked.tier != resolved.tier:
            reject_reason = _(
                "This conversation runs on %(tier)s models. To use %(model)s, start a new conversation."
            ) % {"tier": Tier(locked.tier).label, "model": resolved.model}
        else:
            reject_reason = ""
            locked.tier = resolved.tier
            if turn.requested_model:
                locked.model = resolved.model
            locked.save(update_fields=["tier", "model", "updated_at"])
    if reject_reason:
        _reject(turn, emit, reject_reason)
        return

    model = resolved.model
    turn.model_name = model.name
    turn.provider_name = model.provider.name
    turn.tier = resolved.tier
    turn.save(update_fields=["model_name", "provider_name", "tier"])
    ctx = TurnContext(
        user_id=conversation.owner_id,
        username=conversation.owner.get_username(),
        tier=resolved.tier,
        model_name=model.name,
        provider_name=model.provider.name,
        conversation_id=conversation.pk,
        turn_id=turn.pk,
    )
    emit(
        events.TURN_ACCEPTED,
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
    resources = visible_resources(user_id=ctx.user_id, tier=ctx.tier)
    messages = [{"role": "system", "content": system_prompt(resources)}, *_history(conversation, turn)]
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
                    tools=lambda: tool_definitions(ctx, resources),
                    execute=execute_tool_call,
                    emit=emit,
                    max_steps=settings.OWLAI_AGENT_MAX_STEPS,
                    # Stop before the next model or tool call when the owner deleted
                    # the conversation, or the recovery job already failed this turn.
                    still_wanted=lambda: (
                        Turn.objects.filter(
                            pk=turn.pk, status=TurnStatus.RUNNING, conversation__deleted_at__isnull=True
                        ).exists()
                        and not emit.lost
                    ),
                    resume=resume,
                )
            except TurnSuspended as suspended:
                _suspend(turn, emit, suspended, loaded=sorted(connectors.loaded))
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
        frames.append((events.MESSAGE_COMPLETED, {"text": final_text}))
        result.new_messages.append({"role": "assistant", "content": final_text})
    _finish(turn, emit, TurnStatus.COMPLETED, frames=frames, messages=result.new_messages)


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
        frame = emit.record(APPROVAL_REQUESTED, requested_payload(approval))
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
    _finish(turn, emit, TurnStatus.REJECTED, error=reason, frames=[(events.TURN_REJECTED, {"reason": reason})])


def _fail(turn: Turn, emit: events.TurnEmitter, message: str) -> None:
    _finish(
        turn,
        emit,
        TurnStatus.FAILED,
        error=message,
        frames=[(events.ERROR, {"code": "turn_failed", "message": message})],
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
    with translation.override(turn.language or settings.LANGUAGE_CODE):
        text = str(message)
    with transaction.atomic():
        if not Turn.objects.filter(condition, pk=turn_id).update(
            status=TurnStatus.FAILED, error=text, finished_at=timezone.now()
        ):
            return False  # finished or claimed meanwhile
        emit = _emitter_for(turn)
        stored = [
            emit.record(events.ERROR, {"code": code, "message": text}),
            emit.record(events.TURN_FINISHED, {"status": TurnStatus.FAILED}),
        ]
        group = turn.conversation.group_name
        transaction.on_commit(lambda: [events.publish(group, frame) for frame in stored])
    return True


# --- What a (re)connecting client is shown -------------------------------------


def conversation_state(*, conversation: Conversation) -> dict:
    """The `state` frame, from the database alone: the visible messages of
    the conversation (but the latest turn's answer), and the latest turn with
    its status and every stored event, so its text so far, tool calls and
    outcome render exactly as if they had been received live."""
    latest = Turn.objects.filter(conversation=conversation).order_by("-created_at", "-id").first()
    messages = Message.objects.filter(conversation=conversation, role__in=[MessageRole.USER, MessageRole.ASSISTANT])
    messages = messages.exclude(content="")
    if latest is not None:
        messages = messages.exclude(turn=latest, role=MessageRole.ASSISTANT)
    return {
        "type": events.STATE,
        "messages": [{"role": m.role, "content": m.content, "turn_id": m.turn_id} for m in messages],
        "turn": None
        if latest is None
        else {"turn_id": latest.pk, "status": latest.status, "events": events.replay(turn_id=latest.pk)},
    }


def turn_events_after(*, conversation: Conversation, turn_id: int, after_seq: int) -> list[dict] | None:
    """A turn's stored events after `after_seq` (the `sync` frame); None
    when the turn is not this conversation's."""
    if not Turn.objects.filter(pk=turn_id, conversation=conversation).exists():
        return None
    return events.replay(turn_id=turn_id, after_seq=after_seq)
