"""Continue in a new conversation: a viewer's own copy of a shared
snapshot, on the same tier, that the viewer goes on with.

What the fork's vault holds: the originals behind the tokens the snapshot
shows, and nothing else, numbered anew in the fork (tokens count per
conversation, so `[전화번호-3]` of the original may be `[전화번호-1]` in the
fork; every copied text is renumbered to match). The copied tokens keep
their meaning for follow-up questions (a query with a token still reaches
the right row), and the model of the fork never sees an original: every
copied message and event is renumbered and then masked again with the
fork's vault and the detectors, the owner's own messages included (a value
the owner typed is the owner's to give a model, not the viewer's). The
originals are revealed in the fork only under the viewer's own permission,
as in any conversation, and go when the viewer deletes the fork. Revoking
the link or deleting the original does not reach into a fork made before.
Credentialed URL references ([URL-2]) are not copied: they open nothing in
the fork.
"""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import ResourceKind
from chat.models import Conversation, Message, Turn, TurnEvent
from chat.services import conversation_create
from chat.vault import DbVault
from governance.pii.masking import LABEL_BY_KIND, TOKEN_PATTERN, mask_any, mask_known_any
from sharing import event_types
from sharing.models import ShareLink
from sharing.services import link_tokens, share_link_open
from sharing.snapshot import snapshot_turns


def _renumbering(source: DbVault, fork: DbVault, tokens: set[tuple[str, int]]) -> dict[str, str]:
    """{token of the original: token of the fork}. A token whose original
    cannot be read back becomes its bare kind (it means nothing in the fork)."""
    mapping: dict[str, str] = {}
    for kind, number in sorted(tokens):
        old = f"[{LABEL_BY_KIND.get(kind, kind)}-{number}]"
        original = source.original_for(kind, number)
        if not original:
            mapping[old] = f"[{LABEL_BY_KIND.get(kind, kind)}]"
        elif source.is_derived(kind, number):
            # A computed value stays one in the fork: its own token, never a known value there.
            (mapping[old],) = fork.derived_tokens([(kind, original)])
        else:
            mapping[old] = fork.token_for(kind, original)
    return mapping


class _Copier:
    """Every value copied: first as the snapshot shows it (a value the
    source's vault knows becomes its token, wherever it was typed), then
    renumbered (a token the link does not cover becomes its bare kind), then
    masked with the fork's vault and the detectors. Copying the stored text
    as it stands would let a value the owner typed, known to the source's
    vault only through a later, unshared turn, reach the fork's model."""

    def __init__(self, mapping: dict[str, str], vault: DbVault, source: DbVault) -> None:
        self.mapping = mapping
        self.vault = vault
        self.known = vault.known_values()
        self.source_known = source.known_values()

    def _renumber(self, value):
        if isinstance(value, str):
            # Tokens the snapshot did not show cannot occur here; fail closed anyway.
            return TOKEN_PATTERN.sub(lambda m: self.mapping.get(m.group(0), f"[{m.group(1)}]"), value)
        if isinstance(value, list):
            return [self._renumber(v) for v in value]
        if isinstance(value, dict):
            return {self._renumber(k) if isinstance(k, str) else k: self._renumber(v) for k, v in value.items()}
        return value

    def __call__(self, value):
        shown = mask_known_any(value, self.source_known)
        return mask_any(self._renumber(shown), self.vault, known=self.known)


@transaction.atomic
def share_link_fork(*, key: str, actor, request=None) -> Conversation:
    """`actor`: the viewer, who owns the fork."""
    viewer = actor
    link: ShareLink = share_link_open(key=key, viewer=viewer)
    source = link.conversation
    turns = snapshot_turns(conversation=source, up_to_turn_id=link.up_to_turn_id)
    fork = conversation_create(owner=viewer, title=_("Shared conversation"), model=source.model)
    vault, source_vault = DbVault(fork.pk), DbVault(source.pk)
    copy = _Copier(_renumbering(source_vault, vault, link_tokens(link=link)), vault, source_vault)
    # Same tier: the fork's first turn may not move the conversation to another one.
    # The title is the owner's first message: copied as every text is.
    fork.tier, fork.title = source.tier, (copy(source.title) if source.title else fork.title)
    Conversation.objects.filter(pk=fork.pk).update(tier=fork.tier, title=fork.title)
    for turn in turns:
        events = list(TurnEvent.objects.filter(turn=turn).order_by("seq"))
        copied = Turn.objects.create(
            conversation=fork,
            status=turn.status,
            requested_model=turn.requested_model,
            model_name=turn.model_name,
            provider_name=turn.provider_name,
            tier=turn.tier,
            error=copy(turn.error),
            language=turn.language,
            started_at=turn.started_at,
            finished_at=turn.finished_at,
            last_seq=max((e.seq for e in events), default=0),
        )
        Message.objects.bulk_create(
            Message(
                conversation=fork,
                turn=copied,
                role=m.role,
                content=copy(m.content),
                tool_calls=copy(m.tool_calls),
                tool_call_id=m.tool_call_id,
            )
            for m in Message.objects.filter(turn=turn).order_by("created_at", "id")
        )
        TurnEvent.objects.bulk_create(
            TurnEvent(turn=copied, seq=e.seq, type=e.type, payload=copy(e.payload)) for e in events
        )
    audit_event_write(
        kind=event_types.SHARE_LINK_FORKED,
        request=request,
        actor=viewer,
        resource_kind=ResourceKind.SHARE_LINK,
        resource_id=link.pk,
        owner_id=link.owner_id,
        owner_username=link.owner.get_username(),
        details={"conversation": str(source.pk), "fork": str(fork.pk), "turns": len(turns)},
    )
    return fork
