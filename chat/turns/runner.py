"""What a worker does with a claimed turn: resolve the model and pin
the tier, build the context and the prompt from visible resources only, run
the agent loop with the executor, and end the turn (chat.turns.lifecycle).
A turn resumed after an approval continues from its stored loop state.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from audit.services import AuditWriteError
from chat.agent import (
    ABANDONED,
    CANCELLED,
    HANDOVER,
    LoopState,
    TurnAbandoned,
    TurnCancelled,
    TurnHandedOver,
    TurnSuspended,
    run_agent_loop,
)
from chat.approvals import ConnectorApprovalGate, requested_payload, tool_approval_create
from chat.context import TurnContext
from chat.executor import ToolSession, execute_tool_call, tool_definitions
from chat.llm import ModelError
from chat.model_clients import client_for
from chat.models import Conversation, Message, MessageRole, Turn, TurnStatus, UrlReference, VaultEntry
from chat.prompt import mention_note, mentioned_targets, turn_inputs
from chat.protocol import ServerEvent
from chat.turns import handover, heartbeat, journal, lifecycle, model_choice, origins
from chat.turns import statements as sql
from chat.turns.emitter import TurnEmitter
from chat.turns.timing import TurnClock
from governance.models import LlmModel, Tier
from owlai import logs, prepared
from owlai.connection_health import CONNECTION_LOST
from owlai.install_config import ProviderKind

logger = logging.getLogger(__name__)


def _database_lost() -> str:
    return _("The platform's database could not be reached, so the turn was stopped. Please ask again.")


def _history(conversation: Conversation, turn: Turn) -> list[dict]:
    """Model-facing history: completed turns, then this turn's user message."""
    entries: list[dict] = []
    rows = prepared.fetchall(sql.history(), [sql.conversation_key(conversation.pk), turn.pk])
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


def turn_run(*, turn_id: int) -> None:
    if handover.requested():
        # This worker is stopping: the message goes back unclaimed, for another.
        handover.pass_on(turn_id)
        return
    turn = lifecycle.turn_claim(turn_id=turn_id)
    if turn is None:
        logger.info("turn %s is not queued (duplicate delivery, already run, or gone); nothing to do", turn_id)
        return
    turn.clock = TurnClock(run_ms=turn.run_ms, model_ms=turn.model_ms)
    # Everything the turn says (rejections, failures, the executor's reasons,
    # the demo model's replies) is in the language resolved at turn start;
    # every log line of it names the run (owlai.logs).
    with (
        heartbeat.TurnHeartbeat(turn.pk),
        translation.override(lifecycle.turn_language(turn)),
        logs.run_context(turn.pk),
    ):
        try:
            origin = origins.origin_named(turn.origin)
        except origins.UnknownOrigin:
            lifecycle.reject(turn, lifecycle.emitter_for(turn), _("This run's origin is not known here."))
            return
        if turn.conversation.deleted_at is not None:
            lifecycle.reject(turn, lifecycle.emitter_for(turn), _("This conversation was deleted."))
            return
        try:
            if turn.loop_state is not None:
                _resume(turn)
            else:
                _run(turn)
        except CONNECTION_LOST:
            # Lost before or after the loop (the tier pin, the history): the
            # turn still ends in words, on a fresh connection (lifecycle.finish).
            logger.exception("turn %s: the application database connection was lost", turn.pk)
            lifecycle.fail(turn, lifecycle.emitter_for(turn), _database_lost())
        except Exception:
            # Anything else outside the loop's own handling (building the
            # model's input, the history): the turn ends now, visibly, not
            # when recovery finds its heartbeat stale (a no-op if it ended).
            logger.exception("turn %s crashed outside the loop", turn.pk)
            lifecycle.fail(turn, lifecycle.emitter_for(turn), _("The turn failed unexpectedly."), failure="crash")
        finally:
            # Deleted while this turn ran: what the turn put in the vault goes
            # too. A run whose origin keeps its originals only while it runs
            # leaves none behind either.
            if turn.status == TurnStatus.QUEUED:
                pass  # handed over: the run goes on elsewhere, with its vault
            elif origin.vault_scope == origins.VaultScope.RUN:
                VaultEntry.objects.filter(conversation_id=turn.conversation_id).delete()
                UrlReference.objects.filter(conversation_id=turn.conversation_id).delete()
            elif prepared.fetchall(sql.deleted(), [sql.conversation_key(turn.conversation_id)]):
                VaultEntry.objects.filter(conversation_id=turn.conversation_id).delete()


def _run(turn: Turn) -> None:
    conversation = turn.conversation
    emit = lifecycle.emitter_for(turn)

    # 1. Model -> provider -> tier, before anything else is assembled.
    try:
        resolved = model_choice.resolve_turn_model(turn=turn)
    except model_choice.ModelUnresolvable:
        reason = _("No usable model could be determined for this turn. Pick an enabled model.")
        lifecycle.reject(turn, emit, reason)
        return
    except Exception:
        logger.exception("model resolution failed")
        lifecycle.reject(turn, emit, _("No usable model could be determined for this turn."))
        return

    # 2. A conversation keeps the tier it started with: one conditional
    # UPDATE pins it (or finds it pinned to this tier); only a refusal reads
    # why. Only if it pinned, the turn records its model and says it was
    # accepted: one write (chat.turns.journal) with the pin as its guard.
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    key = sql.conversation_key(conversation.pk)
    model = resolved.model
    with_model = bool(turn.requested_model)
    pin = [resolved.tier, now, model.pk, key, resolved.tier] if with_model else [resolved.tier, now, key, resolved.tier]
    accepted = {
        "model": str(model),
        "tier": resolved.tier,
        "offline_demo": model.provider.kind == ProviderKind.OFFLINE_DEMO,
    }
    pinned = journal.append(
        turn_id=turn.pk,
        group=emit.group,
        frames=[(ServerEvent.TURN_ACCEPTED, accepted)],
        when=(TurnStatus.RUNNING,),
        changes={"model_name": model.name, "provider_name": model.provider.name, "tier": resolved.tier},
        guard=(sql.pin(with_model), pin),
    )
    reject_reason = ""
    if pinned is None:
        current = Conversation.objects.filter(pk=conversation.pk).values_list("tier", "deleted_at").first()
        if current is None or current[1] is not None:
            reject_reason = _("This conversation was deleted.")
        else:
            reject_reason = _(
                "This conversation runs on %(tier)s models. To use %(model)s, start a new conversation."
            ) % {"tier": Tier(current[0]).label, "model": resolved.model}
    if reject_reason:
        lifecycle.reject(turn, emit, reject_reason)
        return

    turn.model_name = model.name
    turn.provider_name = model.provider.name
    turn.tier = resolved.tier
    ctx = _turn_context(turn, conversation, model, tier=resolved.tier)
    _converse(turn, emit, ctx, model, ToolSession(ctx=ctx, approvals=ConnectorApprovalGate()))


def _resume(turn: Turn) -> None:
    """A turn queued again after its approval was decided (or expired): the
    same model, tier and user as when it stopped, the loop continued from its
    stored state (nothing that ran is run again)."""
    emit = lifecycle.emitter_for(turn)
    conversation = turn.conversation
    try:
        state = LoopState.from_json(turn.loop_state)
        stored_session = state.session or {}
        model = (
            LlmModel.objects.select_related("provider")
            .filter(provider__name=turn.provider_name, name=turn.model_name)
            .first()
        )
    except Exception:
        logger.exception("turn %s: its stored state cannot be resumed", turn.pk)
        lifecycle.fail(turn, emit, _("The turn could not be resumed."), failure="resume")
        return
    if model is None or not model.usable or model.provider.tier != turn.tier:
        lifecycle.fail(turn, emit, _("The model of this turn is no longer available."), failure="model_gone")
        return
    ctx = _turn_context(turn, conversation, model, tier=turn.tier)
    try:
        # The tools' per-run state and the decided approval, as the run stored them.
        session = ToolSession.from_json(ctx, stored_session, approvals=ConnectorApprovalGate())
    except ValueError:
        logger.exception("turn %s: its stored tool session cannot be restored", turn.pk)
        lifecycle.fail(turn, emit, _("The turn could not be resumed."), failure="resume")
        return
    _converse(turn, emit, ctx, model, session, resume=state)


def _converse(
    turn: Turn,
    emit: TurnEmitter,
    ctx: TurnContext,
    model: LlmModel,
    session: ToolSession,
    *,
    resume: LoopState | None = None,
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
        client = turn.clock.timed(client) if getattr(turn, "clock", None) else client
        # The run's tool session (the tools' per-run state, e.g. connector
        # sessions reused by their calls) closes when this block ends:
        # finished, failed or waiting.
        with session:
            try:
                result = run_agent_loop(
                    ctx=ctx,
                    client=client,
                    messages=messages,
                    # Asked again before every model call: e.g. read_spill is offered
                    # once a result of this turn was spilled, connector tools once loaded.
                    tools=_offered_tools(session, resources, first=inputs.tools if resume is None else None),
                    execute=execute_tool_call,
                    emit=emit,
                    max_steps=settings.OWLAI_AGENT_MAX_STEPS,
                    # Stop before the next model or tool call when the owner deleted
                    # the conversation or pressed Stop, or the recovery job already
                    # failed this turn.
                    interruption=lambda: _interruption(turn.pk, emit),
                    resume=resume,
                    session=session,
                )
            except TurnSuspended as suspended:
                _suspend(turn, emit, suspended, session)
                return
            except TurnHandedOver as handed:
                # Stopped just before the call an approval was decided for:
                # the decision travels with it (the gate applies it only to that call).
                waited = session.resuming if handed.state.pending and handed.state.first_announced else None
                stored = {**handed.state.as_json(), "session": session.as_json(waiting_for=waited)}
                handover.hand_over(turn, emit, stored)
                return
    except TurnCancelled as cancelled:
        lifecycle.finish(turn, emit, TurnStatus.CANCELLED, messages=cancelled.new_messages)
        return
    except TurnAbandoned:
        lifecycle.reject(turn, emit, _("This conversation was deleted."))
        return
    except AuditWriteError:
        logger.exception("audit write failed; tool result withheld")
        message = _("The action could not be recorded in the audit log, so its result was withheld.")
        lifecycle.fail(turn, emit, message, failure="audit_write")
        return
    except ModelError as exc:
        lifecycle.fail(turn, emit, _("The model call failed: %(error)s") % {"error": exc}, failure="model")
        return
    except CONNECTION_LOST:
        logger.exception("turn %s: the application database connection was lost", turn.pk)
        lifecycle.fail(turn, emit, _database_lost())
        return
    except Exception:
        logger.exception("turn %s crashed", turn.pk)
        lifecycle.fail(turn, emit, _("The turn failed unexpectedly."), failure="crash")
        return

    final_text = result.final_text
    frames: list[tuple[str, dict]] = []
    if result.step_limit_hit:
        final_text = _("I stopped after %(steps)d steps without a final answer.") % {
            "steps": settings.OWLAI_AGENT_MAX_STEPS
        }
        frames.append((ServerEvent.MESSAGE_COMPLETED, {"text": final_text}))
        result.new_messages.append({"role": "assistant", "content": final_text})
    lifecycle.finish(turn, emit, TurnStatus.COMPLETED, frames=frames, messages=result.new_messages)


def _offered_tools(session: ToolSession, resources, *, first: list[dict] | None):
    """The tools before each model call: `first` (the ones just built with
    the turn's inputs) for the first call, asked for again before every
    later one."""
    pending = [first] if first is not None else []

    def offered() -> list[dict]:
        return pending.pop() if pending else tool_definitions(session, resources)

    return offered


def _interruption(turn_id: int, emit: TurnEmitter) -> str | None:
    """Whether the turn should stop before its next model or tool call, in
    one query: ABANDONED when it is no longer running (the recovery job
    failed it), its conversation was deleted, or its events can no longer be
    written as ours; CANCELLED when the owner pressed Stop."""
    rows = prepared.fetchall(sql.interruption(), [turn_id])
    row = rows[0] if rows else None
    if row is None or row[0] != TurnStatus.RUNNING or row[2] is not None or emit.lost:
        return ABANDONED
    if row[1] is not None:
        return CANCELLED
    if handover.requested():
        return HANDOVER
    return None


def _suspend(turn: Turn, emit: TurnEmitter, suspended: TurnSuspended, session: ToolSession) -> bool:
    """The turn waits for an approval, holding no worker: the pending request,
    the loop's state (with the run's tool session, waiting for that request)
    and the `approval.requested` event in one transaction,
    conditional on the turn still running (lifecycle.wait_for_approval). The
    task then ends; the decision or the expiry job queues the turn again."""
    state = suspended.state
    with transaction.atomic():
        approval = tool_approval_create(turn=turn, request=suspended.request, tool_call_id=state.pending[0]["id"])
        stored = {**state.as_json(), "session": session.as_json(waiting_for=str(approval.pk))}
        if not lifecycle.wait_for_approval(turn, emit, loop_state=stored, requested=requested_payload(approval)):
            transaction.set_rollback(True)
            logger.warning("turn %s was finished elsewhere (recovery); not waiting for its approval", turn.pk)
            return False
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


def _turn_context(turn: Turn, conversation: Conversation, model, *, tier: str) -> TurnContext:
    """What every tool call of this run sees, the same for a first run and a
    resumed one (a resumed run kept its language too)."""
    return TurnContext(
        user_id=conversation.owner_id,
        username=conversation.owner.get_username(),
        tier=tier,
        model_name=model.name,
        provider_name=model.provider.name,
        conversation_id=conversation.pk,
        turn_id=turn.pk,
        origin=turn.origin,
        origin_ref=turn.origin_ref,
        language=lifecycle.turn_language(turn),
    )
