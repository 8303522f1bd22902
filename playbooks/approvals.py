"""Pre-approvals: a connector tool that needs a person's approval in chat
runs without asking in this playbook's runs, for the definition it was
granted under (an admin accepting a changed definition voids it), until it
expires or is revoked. Granted and revoked by the playbook's owner or an
admin; grant, revoke and expiry are audit events, never with arguments.

The run core asks `standing` (registered for the playbook origin with
chat.approvals.register_standing_approvals) in its approval gate; a call
without a valid pre-approval waits for the person the run acts for.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.events import audit_event_write
from audit.models import ResourceKind
from governance.models import ConnectorTool
from governance.visibility import visible_connector_tools
from playbooks import events
from playbooks.models import NodeRun, Playbook, PlaybookRun, PreApproval
from playbooks.services import PlaybookError

logger = logging.getLogger(__name__)


def _may_manage(playbook: Playbook, actor, perm: str) -> bool:
    return actor is not None and actor.is_active and (actor.pk == playbook.owner_id or actor.has_perm(perm))


def _event(kind: str, pre: PreApproval, actor, request=None, **details) -> None:
    tool = pre.connector_tool
    audit_event_write(
        kind=kind,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.PLAYBOOK_PRE_APPROVAL,
        resource_id=pre.pk,
        owner_id=pre.playbook.owner_id,
        owner_username=pre.playbook.owner.get_username(),
        details={
            "playbook_id": pre.playbook_id,
            "playbook": pre.playbook.name,
            "connector": tool.connector.name,
            "tool": tool.name,
            "expires_at": pre.expires_at.isoformat(),
            **details,
        },
    )


@transaction.atomic
def pre_approval_grant(*, playbook: Playbook, connector_tool: ConnectorTool, expires_at, actor, request=None):
    """For the tool's pinned definition; one live pre-approval per playbook
    and tool (a new grant replaces the older one)."""
    playbook = Playbook.objects.select_for_update().select_related("owner").get(pk=playbook.pk)
    if not _may_manage(playbook, actor, "playbooks.add_preapproval"):
        raise PlaybookError(_("Only the playbook's owner or an admin can pre-approve its tools."))
    if expires_at <= timezone.now():
        raise PlaybookError(_("A pre-approval needs an expiry in the future."))
    tool = ConnectorTool.objects.select_related("connector").get(pk=connector_tool.pk)
    visible = {v.tool_id for v in visible_connector_tools(user_id=playbook.owner_id, tier=playbook.tier)}
    if tool.pk not in visible:
        raise PlaybookError(_("No such tool."))
    now = timezone.now()
    live = PreApproval.objects.filter(
        playbook=playbook, connector_tool=tool, revoked_at__isnull=True, expires_at__gt=now
    )
    for older in live:
        older.revoked_at, older.revoked_by = now, actor
        older.save(update_fields=["revoked_at", "revoked_by"])
        _event(events.PRE_APPROVAL_REVOKED, older, actor, request, replaced=True)
    pre = PreApproval.objects.create(
        playbook=playbook,
        connector_tool=tool,
        definition_hash=tool.definition_hash,
        expires_at=expires_at,
        granted_by=actor,
    )
    _event(events.PRE_APPROVAL_GRANTED, pre, actor, request)
    return pre


@transaction.atomic
def pre_approval_revoke(*, pre_approval: PreApproval, actor, request=None) -> PreApproval:
    pre = PreApproval.objects.select_for_update().select_related("playbook__owner", "connector_tool__connector")
    pre = pre.get(pk=pre_approval.pk)
    if not _may_manage(pre.playbook, actor, "playbooks.change_preapproval"):
        raise PlaybookError(_("Only the playbook's owner or an admin can pre-approve its tools."))
    if pre.revoked_at is None:
        pre.revoked_at, pre.revoked_by = timezone.now(), actor
        pre.save(update_fields=["revoked_at", "revoked_by"])
        _event(events.PRE_APPROVAL_REVOKED, pre, actor, request)
    return pre


def pre_approvals_expire(*, now=None) -> int:
    """Each pre-approval past its expiry gets its `expired` event, once."""
    now = now or timezone.now()
    done = 0
    due = PreApproval.objects.filter(expires_at__lte=now, revoked_at__isnull=True, expiry_recorded_at__isnull=True)
    for pk in due.values_list("pk", flat=True)[:500]:
        with transaction.atomic():
            pre = PreApproval.objects.select_for_update().filter(pk=pk, expiry_recorded_at__isnull=True).first()
            if pre is None:
                continue
            pre.expiry_recorded_at = now
            pre.save(update_fields=["expiry_recorded_at"])
            _event(events.PRE_APPROVAL_EXPIRED, pre, None)
            done += 1
    return done


def standing(ctx, view) -> int | None:
    """The pre-approval that lets this call of a playbook run go without
    asking: of the run's playbook, this tool, its current pinned definition,
    not revoked, not expired, made by the playbook's own tool step for that
    tool, in a run acting as the playbook's owner. None: the person is asked.

    Only a tool step's call: its tool and argument templates are what the
    owner pre-approved. A call the model chose in an agent step (steered,
    say, by a customer row or a connector's output) is not covered, or a
    pre-approval would let anything the model reads send through the tool."""
    from playbooks.engine import run_id_of

    run_id = run_id_of(ctx.origin_ref or "")
    if run_id is None or not ctx.turn_id:
        return None
    # Only a run acting as the playbook's owner (theirs, or scheduled): the
    # owner pre-approves what their own access reads leaving. A run someone
    # it is shared with starts reads under that person's grants, and that
    # person decides whether it leaves (the owner's pre-approval would let
    # the owner's step send what only they may read).
    run = PlaybookRun.objects.filter(
        pk=run_id, conversation_id=ctx.conversation_id, actor_id=ctx.user_id, playbook__owner_id=ctx.user_id
    ).first()
    if run is None:
        return None
    step = NodeRun.objects.filter(run=run, turn_id=ctx.turn_id, kind="tool").values_list("index", flat=True).first()
    nodes = run.nodes or []
    if step is None or step >= len(nodes) or nodes[step].get("tool") != view.model_name:
        return None
    return (
        PreApproval.objects.filter(
            playbook_id=run.playbook_id,
            connector_tool_id=view.tool_id,
            definition_hash=view.definition_hash,
            revoked_at__isnull=True,
            expires_at__gt=timezone.now(),
        )
        .values_list("pk", flat=True)
        .first()
    )
