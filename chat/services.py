"""Conversation and turn actions.

`turn_start` runs in the websocket consumer (fast: validate, record, enqueue);
`turn_run` runs in the worker and owns the whole governed turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from audit.services import AuditWriteError
from chat import events
from chat.agent import TurnAbandoned, run_agent_loop
from chat.context import TurnContext
from chat.executor import execute_tool_call
from chat.llm import ModelError, client_for
from chat.models import Conversation, Message, MessageRole, Turn, TurnStatus
from chat.prompt import mention_note, mentioned_targets, system_prompt
from chat.tools import tools_for
from governance.models import Feature, FeatureDefault, LlmModel, Tier
from governance.visibility import visible_resources

logger = logging.getLogger(__name__)

ACTIVE_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING)


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
    from chat.models import VaultEntry

    with transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk, deleted_at__isnull=True).update(deleted_at=timezone.now())
        VaultEntry.objects.filter(conversation_id=conversation.pk).delete()
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
    # A turn still "active" long after the worker's hard limit died with its
    # worker; without this the conversation would stay blocked forever.
    stale_before = timezone.now() - timedelta(seconds=settings.OWLAI_TURN_TIMEOUT_SECONDS + 120)
    Turn.objects.filter(conversation=conversation, status__in=ACTIVE_STATUSES, created_at__lt=stale_before).update(
        status=TurnStatus.FAILED, error="abandoned: the worker did not finish the turn", finished_at=timezone.now()
    )
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


def _finish(turn: Turn, status: str, error: str = "") -> None:
    turn.status = status
    turn.error = error
    turn.finished_at = timezone.now()
    turn.save(update_fields=["status", "error", "finished_at"])


def turn_run(*, turn_id: int) -> None:
    turn = Turn.objects.select_related("conversation__owner").filter(pk=turn_id).first()
    if turn is None or turn.status != TurnStatus.QUEUED:
        return  # already run (redelivered task) or gone with its conversation
    if turn.conversation.deleted_at is not None:
        emit = events.make_emitter(group=turn.conversation.group_name, turn_id=turn.pk)
        _reject(turn, emit, _("This conversation was deleted."))
        return
    try:
        with translation.override(turn.language or settings.LANGUAGE_CODE):
            _run(turn)
    finally:
        # Deleted while this turn ran: what the turn put in the vault goes too.
        if Conversation.objects.filter(pk=turn.conversation_id, deleted_at__isnull=False).exists():
            from chat.models import VaultEntry

            VaultEntry.objects.filter(conversation_id=turn.conversation_id).delete()


def _run(turn: Turn) -> None:
    conversation = turn.conversation
    emit = events.make_emitter(group=conversation.group_name, turn_id=turn.pk)
    turn.status = TurnStatus.RUNNING
    turn.save(update_fields=["status"])

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
            timeout=settings.OWLAI_MODEL_TIMEOUT_SECONDS,
        )
        result = run_agent_loop(
            ctx=ctx,
            client=client,
            messages=messages,
            tools=tools_for(resources),
            execute=execute_tool_call,
            emit=emit,
            max_steps=settings.OWLAI_AGENT_MAX_STEPS,
            still_wanted=lambda: not Conversation.objects.filter(pk=conversation.pk, deleted_at__isnull=False).exists(),
        )
    except TurnAbandoned:
        _reject(turn, emit, _("This conversation was deleted."))
        return
    except AuditWriteError:
        logger.exception("audit write failed; tool result withheld")
        _fail(turn, emit, _("The action could not be recorded in the audit log, so its result was withheld."))
        return
    except ModelError as exc:
        _fail(turn, emit, _("The model provider could not be reached: %(error)s") % {"error": exc})
        return
    except Exception:
        logger.exception("turn %s crashed", turn.pk)
        _fail(turn, emit, _("The turn failed unexpectedly."))
        return

    final_text = result.final_text
    if result.step_limit_hit:
        final_text = _("I stopped after %(steps)d steps without a final answer.") % {
            "steps": settings.OWLAI_AGENT_MAX_STEPS
        }
        emit(events.MESSAGE_COMPLETED, {"text": final_text})
        result.new_messages.append({"role": "assistant", "content": final_text})
    with transaction.atomic():
        for entry in result.new_messages:
            Message.objects.create(
                conversation=conversation,
                turn=turn,
                role=entry["role"],
                content=entry.get("content") or "",
                tool_calls=entry.get("tool_calls", []),
                tool_call_id=entry.get("tool_call_id", ""),
            )
        _finish(turn, TurnStatus.COMPLETED)
    emit(events.TURN_FINISHED, {"status": TurnStatus.COMPLETED})


def _reject(turn: Turn, emit, reason: str) -> None:
    _finish(turn, TurnStatus.REJECTED, reason)
    emit(events.TURN_REJECTED, {"reason": reason})
    emit(events.TURN_FINISHED, {"status": TurnStatus.REJECTED})


def _fail(turn: Turn, emit, message: str) -> None:
    _finish(turn, TurnStatus.FAILED, message)
    emit(events.ERROR, {"message": message})
    emit(events.TURN_FINISHED, {"status": TurnStatus.FAILED})
