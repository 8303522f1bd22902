"""Starting, stopping and re-running playbook runs (services).

A run always acts as a person: a scheduled run as the playbook's owner, a
run someone starts as that person (the owner, or a person it is shared
with). Their roles apply when each call executes (the executor reads the
grants of the moment), and before every node the engine asks again whether
they may still run it.
"""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import ResourceKind
from chat.models import Conversation
from chat.turns.cancel import TurnCancelRefused, turn_cancel
from playbooks import events, live, spec
from playbooks.models import ACTIVE_RUN_STATUSES, Playbook, PlaybookRun, RunStatus, Trigger
from playbooks.services import PlaybookError, may_run

logger = logging.getLogger(__name__)


def shows_contents(run: PlaybookRun, viewer) -> bool:
    """Whether `viewer` is shown a run's parameters and its steps' inputs
    and outputs: only its person. What a run read, it read under its
    person's grants; the playbook's owner watching a run someone it is
    shared with started sees its status and reasons, not what their access
    read (else a playbook would read for its owner what only others may)."""
    return viewer is not None and viewer.pk == run.actor_id


def runs_visible_to(user):
    """The runs a person may watch: those acting as them and those of their
    playbooks (anyone else opens a run in the admin, on the record). The
    run API, the run page and the run's socket all ask this."""
    if user is None or not user.is_authenticated:
        return PlaybookRun.objects.none()
    return PlaybookRun.objects.select_related("actor", "playbook").filter(Q(actor=user) | Q(playbook__owner=user))


def _run_event(kind: str, run: PlaybookRun, actor, request=None, **details) -> None:
    audit_event_write(
        kind=kind,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.PLAYBOOK_RUN,
        resource_id=run.pk,
        owner_id=run.actor_id,
        owner_username=run.actor.get_username(),
        details={"playbook_id": run.playbook_id, "playbook": run.playbook.name, **details},
    )


class _MintedTokens:
    """The run's vault, noting every token it hands out while the typed
    parameters are masked: these, and only these, are the parameters' own."""

    def __init__(self, vault) -> None:
        self.vault, self.tokens = vault, set()

    def token_for(self, kind: str, value: str) -> str:
        token = self.vault.token_for(kind, value)
        self.tokens.add(token)
        return token

    def original_for(self, kind: str, number: int) -> str | None:
        return self.vault.original_for(kind, number)


def _masked_values(values: dict[str, str], conversation_id) -> tuple[dict[str, str], list[str]]:
    """The values as every node and screen gets them: personal data a person
    typed into a parameter becomes this run's tokens (its originals in the
    run's vault, re-identified only where a chat run's would be); and the
    tokens that masking minted."""
    from chat.vault import DbVault
    from governance.pii.masking import mask_string

    vault = _MintedTokens(DbVault(conversation_id))
    masked = {name: mask_string(value, vault) if value else value for name, value in values.items()}
    return masked, sorted(vault.tokens)


def playbook_run_start(
    *,
    playbook: Playbook,
    actor,
    parameters=None,
    trigger: str = Trigger.MANUAL,
    schedule=None,
    rerun_of: PlaybookRun | None = None,
    request=None,
    dispatch_after_commit: bool = True,
) -> PlaybookRun:
    """A queued run acting as `actor` (who must be allowed to run it; a
    scheduled run passes the owner). Parameters are checked before anything
    is stored; raises PlaybookError with the reason for the person."""
    playbook = Playbook.objects.select_related("owner", "model__provider").get(pk=playbook.pk)
    if actor is None or not may_run(playbook, actor):
        raise PlaybookError(_("No such playbook."))
    try:
        values = spec.parameter_values(playbook.parameters, parameters or {})
    except spec.SpecError as exc:
        raise PlaybookError(str(exc)) from None
    model = playbook.model
    if not model.usable or model.provider.tier != playbook.tier:
        raise PlaybookError(_("The playbook's model is no longer available."))
    try:
        with transaction.atomic():
            run = PlaybookRun.objects.create(
                playbook=playbook,
                actor=actor,
                trigger=trigger,
                schedule=schedule,
                rerun_of=rerun_of,
                exclusive=not playbook.allow_overlap,
                nodes=playbook.nodes,
                status=RunStatus.QUEUED,
            )
            # The run's own conversation: its vault, its spill folder, its
            # turns; pinned to the playbook's tier before any node runs.
            conversation = Conversation.objects.create(
                owner=actor, title=f"▶ {playbook.name} #{run.pk}"[:200], tier=playbook.tier
            )
            run.conversation_id = conversation.pk
            run.parameters, run.parameter_tokens = _masked_values(values, conversation.pk)
            run.save(update_fields=["conversation_id", "parameters", "parameter_tokens"])
            _run_event(events.RUN_STARTED, run, actor, request, trigger=trigger, run_as=actor.get_username())
    except IntegrityError:
        # The partial unique index: an exclusive run of it is active.
        raise PlaybookError(_("This playbook is already running; wait for its run to end.")) from None
    if dispatch_after_commit:
        transaction.on_commit(lambda: advance_soon(run.pk))
    return run


def advance_soon(run_id: int) -> None:
    """Hand the run to a worker (its nodes run there, one after the other).
    Never raises: a run whose task was lost is taken up by the sweep."""
    from playbooks.tasks import advance_run

    try:
        advance_run.delay(run_id)
    except Exception as exc:
        logger.warning("playbook run %s stored but not enqueued: %s", run_id, exc)


def playbook_run_stop(*, run: PlaybookRun, actor, request=None) -> PlaybookRun:
    """The person the run acts for, or the playbook's owner, stops it: the
    node running now is stopped as a chat turn is (what ran stays, audited)
    and no further node starts."""
    run = PlaybookRun.objects.select_related("playbook", "actor").get(pk=run.pk)
    if actor is None or actor.pk not in (run.actor_id, run.playbook.owner_id):
        raise PlaybookError(_("Only the person it runs for or the playbook's owner can stop this run."))
    with transaction.atomic():
        locked = PlaybookRun.objects.select_for_update().get(pk=run.pk)
        if locked.status not in ACTIVE_RUN_STATUSES:
            raise PlaybookError(_("This run is not running."))
        locked.status, locked.finished_at = RunStatus.CANCELLED, timezone.now()
        locked.save(update_fields=["status", "finished_at"])
        run.status = locked.status
        _run_event(events.RUN_STOPPED, run, actor, request)
        live.publish_changed(locked)
    conversation = Conversation.objects.filter(pk=run.conversation_id).first()
    if conversation is not None:
        try:
            turn_cancel(conversation=conversation, actor=run.actor)
        except TurnCancelRefused:
            pass  # between nodes: nothing was running
    return run


def playbook_run_rerun(*, run: PlaybookRun, actor, request=None) -> PlaybookRun:
    """The same playbook again with the same parameters, acting as `actor`.
    A value that was masked is taken back from the first run's vault (never
    shown to anyone here) and masked again in the new run's; when its
    original is gone, the re-run is refused naming the parameter.

    Only the tokens the parameters themselves minted are taken back (any
    other token-shaped text stays as typed: the first run's steps may have
    minted that token for a value read from a database), and only for the
    person the first run acted for: the values they typed are not the
    playbook owner's to put in a vault of their own."""
    from chat.vault import DbVault
    from governance.pii.masking import format_token, replace_tokens, tokens_in

    vault = DbVault(run.conversation_id) if run.conversation_id else None
    minted = set(run.parameter_tokens or ())
    params = {}
    for name, value in (run.parameters or {}).items():
        found_tokens = tokens_in(value) if value else []
        if found_tokens:
            own = [t for t in found_tokens if format_token(t[0], t[1]) in minted]
            # Fail closed: a run stored before its minted tokens were noted
            # (which are the parameter's is not known), or another person's values.
            missing = (
                ["?"] if run.parameter_tokens is None or (own and (actor is None or actor.pk != run.actor_id)) else []
            )

            def original(kind: str, number: int, missing=missing):
                if format_token(kind, number) not in minted:
                    return None  # not the parameter's own: stays as typed
                found = vault.original_for(kind, number) if vault is not None else None
                if found is None:
                    missing.append(kind)
                return found

            value = replace_tokens(value, original) if not missing else value
            if missing:
                raise PlaybookError(
                    _("%(name)s can no longer be re-used; start the playbook again and enter it.") % {"name": name}
                )
        params[name] = value
    return playbook_run_start(
        playbook=run.playbook, actor=actor, parameters=params, trigger=Trigger.RERUN, rerun_of=run, request=request
    )
