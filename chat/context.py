"""The one immutable object every step of a turn reads."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class TurnContext:
    """Resolved once at turn start; nested runs receive this same object and
    never resolve a model or tier of their own."""

    user_id: int
    username: str
    tier: str
    model_name: str
    provider_name: str
    conversation_id: uuid.UUID | None
    turn_id: int | None
    origin: str = "chat"
    origin_ref: str = ""
    # The user's language, resolved when the turn started (accounts.language):
    # the worker runs the whole turn in it, so reasons, errors and the demo
    # model's replies reach the user in it. Empty means settings.LANGUAGE_CODE.
    language: str = ""
