"""What a shared link shows: the conversation's ended turns up to the
link's turn, as the owner's page shows them (chat.turns.timeline), with every
value the conversation's vault knows shown as its token.

The owner's own messages are not masked in the owner's chat (what a person
types is theirs to give the model), but a viewer is somebody else: a value
the owner typed that the vault also holds is shown as its token here too.
"""

from __future__ import annotations

from chat.models import ACTIVE_TURN_STATUSES, Turn, VaultEntry
from chat.turns.timeline import conversation_timeline
from chat.vault import DbVault
from governance.pii.masking import mask_known_any, tokens_in

# The timeline fields that carry text somebody or something wrote.
TEXT_FIELDS = ("content", "sql", "query", "result", "reason")


def snapshot_turns(*, conversation, up_to_turn_id: int) -> list[Turn]:
    """The conversation's turns up to and including `up_to_turn_id`, ended ones only."""
    return list(
        Turn.objects.filter(conversation=conversation, pk__lte=up_to_turn_id)
        .exclude(status__in=ACTIVE_TURN_STATUSES)
        .order_by("created_at", "id")
    )


def snapshot_items(*, conversation, up_to_turn_id: int) -> list[dict]:
    turns = snapshot_turns(conversation=conversation, up_to_turn_id=up_to_turn_id)
    shown = {turn.pk for turn in turns}
    if not shown:
        return []
    items = conversation_timeline(conversation=conversation, turns=turns)
    known = DbVault(conversation.pk).known_values()
    out = []
    for item in items:
        if item.get("turn_id") not in shown:
            continue
        out.append(
            {k: (mask_known_any(v, known) if k in TEXT_FIELDS or k == "approval" else v) for k, v in item.items()}
        )
    return out


def shared_title(*, conversation) -> str:
    """The conversation's title as a viewer sees it: it is the owner's first
    message, so a value the vault knows is its token here too."""
    title = conversation.title or ""
    return mask_known_any(title, DbVault(conversation.pk).known_values()) if title else title


def tokens_of(items: list[dict]) -> set[tuple[str, int]]:
    """(kind, number) of every token the snapshot shows."""
    found: set[tuple[str, int]] = set()

    def walk(value) -> None:
        if isinstance(value, str):
            found.update((kind, number) for kind, number, _start, _end in tokens_in(value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(items)
    return found


def shared_tokens(*, conversation, up_to_turn: Turn, items: list[dict]) -> set[tuple[str, int]]:
    """The tokens of the snapshot a viewer may reveal and a fork copies: the
    ones it shows whose originals the vault held when the shared turn ended.
    A token-shaped text can be shown before its token exists (planted in a
    customer row or a connector's output, or guessed by a model); a later,
    unshared turn may then mint that very token for another value, which is
    not part of the link. (Entries are stamped by the worker that minted
    them and the turn's end by the worker that ran it: a later turn starts
    only after this one ended.)"""
    shown = tokens_of(items)
    if not shown or up_to_turn.finished_at is None:
        return set()
    minted = VaultEntry.objects.filter(
        conversation_id=conversation.pk,
        kind__in={kind for kind, _number in shown},
        created_at__lte=up_to_turn.finished_at,
    ).values_list("kind", "number")
    return shown & set(minted)
