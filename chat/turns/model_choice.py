"""Which model a run uses: the one asked for, else the conversation's,
else the chat default; never a guess (ModelUnresolvable).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from chat.models import Conversation, Turn
from chat.turns import statements as sql
from governance.models import Feature, FeatureDefault, LlmModel, Provider, Tier
from owlai import prepared

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedModel:
    model: LlmModel
    tier: str


class ModelUnresolvable(Exception):
    pass


def resolve_turn_model(*, turn: Turn) -> ResolvedModel:
    """The turn's model: the one asked for, else the conversation's, else the
    chat default. No guessing: anything unusable raises ModelUnresolvable."""
    conversation = turn.conversation
    model: LlmModel | None
    if turn.requested_model:
        model = lookup_model(turn.requested_model)
    elif conversation.model_id:
        model = LlmModel.objects.select_related("provider").filter(pk=conversation.model_id).first()
    else:
        model = chat_default_model()
    if model is None or not model.usable:
        raise ModelUnresolvable
    if model.provider.tier not in Tier.values:
        raise ModelUnresolvable
    return ResolvedModel(model=model, tier=model.provider.tier)


def chat_default_model() -> LlmModel | None:
    """The chat default with its provider (a prepared statement: most turns ask)."""
    rows = prepared.fetchall(sql.chat_default(), [Feature.CHAT])
    if not rows:
        return None
    model = prepared.instances(LlmModel, rows[0])
    model.provider = prepared.instances(Provider, rows[0], len(LlmModel._meta.concrete_fields))
    return model


def mention_tier(*, conversation: Conversation, model_ref: str) -> str | None:
    """The tier whose resources may be offered as @mention targets: the pinned
    tier, else that of the selected (or default) model; None when unknown."""
    if conversation.tier:
        return conversation.tier
    if model_ref:
        model = lookup_model(model_ref)
    else:
        default = FeatureDefault.objects.select_related("model__provider").filter(feature=Feature.CHAT).first()
        model = default.model if default else None
    return model.provider.tier if model is not None and model.usable else None


def lookup_model(ref: str) -> LlmModel | None:
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
