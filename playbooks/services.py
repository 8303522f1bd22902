"""Governed changes of playbooks: create, update, share, delete, save from
a conversation's turn. Each writes its audit event in its transaction; only
the owner edits and shares (an admin may delete)."""

from __future__ import annotations

from django.db import transaction
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import ResourceKind
from chat.models import Message, MessageRole, Turn
from governance.models import LlmModel
from governance.visibility import visible_connector_tools
from playbooks import events, spec
from playbooks.models import Playbook


class PlaybookError(Exception):
    """Refused; str() is for the person (translated)."""


def _check_model(model: LlmModel | None, tier: str) -> LlmModel:
    if model is None or not model.usable or model.provider.tier != tier:
        raise PlaybookError(_("Pick an enabled model of this playbook's tier."))
    return model


def visible_tool_names(*, user_id: int, tier: str) -> set[str]:
    """The tools a run of this person on this tier is offered (the built-in
    ones and the connector tools their roles reach at that tier)."""
    from chat.prompt import turn_inputs

    names = {t["function"]["name"] for t in turn_inputs(user_id=user_id, tier=tier).tools}
    return names | {view.model_name for view in visible_connector_tools(user_id=user_id, tier=tier)}


def _checked(*, owner, tier: str, parameters, nodes) -> tuple[list[dict], list[dict]]:
    try:
        parameters = spec.check_parameters(parameters)
        nodes = spec.check_nodes(nodes, parameters)
    except spec.SpecError as exc:
        raise PlaybookError(str(exc)) from None
    visible = visible_tool_names(user_id=owner.pk, tier=tier)
    for index, node in enumerate(nodes):
        # The same words as for a tool that does not exist: a public-tier
        # playbook does not learn what an internal-only tool is called.
        if node["kind"] == "tool" and node["tool"] not in visible:
            raise PlaybookError(_("Step %(n)d: no such tool.") % {"n": index + 1})
    return parameters, nodes


def _event(kind: str, playbook: Playbook, actor, request=None, **details) -> None:
    audit_event_write(
        kind=kind,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.PLAYBOOK,
        resource_id=playbook.pk,
        owner_id=playbook.owner_id,
        owner_username=playbook.owner.get_username(),
        details={"name": playbook.name, **details},
    )


def _owner_only(playbook: Playbook, actor) -> None:
    if actor is None or actor.pk != playbook.owner_id:
        raise PlaybookError(_("Only the playbook's owner can change it."))


@transaction.atomic
def playbook_create(
    *,
    owner,
    name: str,
    model: LlmModel,
    nodes,
    parameters=(),
    description: str = "",
    tier: str = "",
    allow_overlap: bool = False,
    source_conversation_id=None,
    actor,
    request=None,
) -> Playbook:
    """`tier`: the conversation's it was made from; else its model's."""
    if actor is None or actor.pk != owner.pk:
        raise PlaybookError(_("A playbook is created by its owner."))
    name = (name or "").strip()[:200]
    if not name:
        raise PlaybookError(_("The playbook needs a name."))
    tier = tier or (model.provider.tier if model is not None else "")
    model = _check_model(model, tier)
    parameters, nodes = _checked(owner=owner, tier=tier, parameters=list(parameters), nodes=nodes)
    playbook = Playbook.objects.create(
        owner=owner,
        name=name,
        description=description[:4000],
        tier=tier,
        model=model,
        parameters=parameters,
        nodes=nodes,
        allow_overlap=allow_overlap,
        source_conversation_id=source_conversation_id,
    )
    _event(events.PLAYBOOK_CREATED, playbook, actor, request, tier=tier, steps=len(nodes))
    return playbook


_EDITABLE = ("name", "description", "model", "parameters", "nodes", "allow_overlap")


@transaction.atomic
def playbook_update(*, playbook: Playbook, actor, request=None, **changes) -> Playbook:
    """Only the owner; the tier never changes (the model stays of it)."""
    locked = Playbook.objects.select_for_update().select_related("owner", "model__provider").get(pk=playbook.pk)
    _owner_only(locked, actor)
    unknown = set(changes) - set(_EDITABLE)
    if unknown:
        raise PlaybookError(_("This cannot be changed: %(field)s.") % {"field": sorted(unknown)[0]})
    for field, value in changes.items():
        setattr(locked, field, value)
    locked.name = (locked.name or "").strip()[:200]
    if not locked.name:
        raise PlaybookError(_("The playbook needs a name."))
    _check_model(locked.model, locked.tier)
    locked.parameters, locked.nodes = _checked(
        owner=locked.owner, tier=locked.tier, parameters=locked.parameters, nodes=locked.nodes
    )
    locked.save()
    _event(events.PLAYBOOK_UPDATED, locked, actor, request, changed=sorted(changes))
    return locked


@transaction.atomic
def playbook_share(*, playbook: Playbook, roles=(), users=(), actor, request=None) -> Playbook:
    """Who may run it besides the owner (replaces the lists)."""
    locked = Playbook.objects.select_for_update().select_related("owner").get(pk=playbook.pk)
    _owner_only(locked, actor)
    locked.shared_roles.set(list(roles))
    locked.shared_users.set([u for u in users if u.pk != locked.owner_id])
    _event(
        events.PLAYBOOK_SHARED,
        locked,
        actor,
        request,
        roles=sorted(r.name for r in locked.shared_roles.all()),
        users=sorted(u.get_username() for u in locked.shared_users.all()),
    )
    return locked


@transaction.atomic
def playbook_delete(*, playbook: Playbook, actor, request=None) -> None:
    locked = Playbook.objects.select_for_update().select_related("owner").get(pk=playbook.pk)
    if actor is None or (actor.pk != locked.owner_id and not actor.has_perm("playbooks.delete_playbook")):
        raise PlaybookError(_("Only the playbook's owner can change it."))
    _event(events.PLAYBOOK_DELETED, locked, actor, request)
    for schedule in locked.schedules.all():
        if schedule.periodic_task_id:
            schedule.periodic_task.delete()
    locked.delete()


def playbook_from_turn(*, turn: Turn, actor, name: str = "", request=None) -> Playbook:
    """ "Save as playbook": the turn's question becomes an agent step, the
    playbook takes the conversation's tier and the model the turn ran on."""
    turn = Turn.objects.select_related("conversation").filter(pk=turn.pk).first()
    if turn is None or actor is None or turn.conversation.owner_id != actor.pk:
        raise PlaybookError(_("No such turn."))
    if turn.conversation.deleted_at is not None or not turn.conversation.tier:
        raise PlaybookError(_("Only a turn of a conversation that ran can be saved as a playbook."))
    question = Message.objects.filter(turn=turn, role=MessageRole.USER).order_by("id").first()
    if question is None or not question.content.strip():
        raise PlaybookError(_("This turn has no question to save."))
    tier = turn.conversation.tier
    model = (
        LlmModel.objects.select_related("provider")
        .filter(provider__name=turn.provider_name, name=turn.model_name)
        .first()
    )
    if model is None or model.provider.tier != tier or not model.usable:
        model = (
            LlmModel.objects.select_related("provider").filter(provider__tier=tier, enabled=True).order_by("id").first()
        )
    # A `$` in the question is a dollar sign, not a placeholder.
    prompt = question.content.strip().replace("$", "$$")
    return playbook_create(
        owner=actor,
        name=name or turn.conversation.title or _("Saved question"),
        model=model,
        tier=tier,
        nodes=[{"key": "answer", "kind": "agent", "prompt": prompt}],
        source_conversation_id=turn.conversation_id,
        actor=actor,
        request=request,
    )


def may_run(playbook: Playbook, user) -> bool:
    """The owner, a person it is shared with (directly or by a role they
    hold now); an inactive person never."""
    if user is None or not user.is_active:
        return False
    if user.pk == playbook.owner_id:
        return True
    if playbook.shared_users.filter(pk=user.pk).exists():
        return True
    return playbook.shared_roles.filter(users=user).exists()
