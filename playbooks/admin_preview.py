"""The admin's turn preview for a playbook: what a run of it would be given
now — its tier, the person it would act as (the owner, or a person it is
shared with), the resources, tool schemas and system prompt of its agent
steps (chat.prompt.turn_inputs, the same function a run's turns use) and,
per step, whether its tool is offered to that person on that tier. It shows
a person's permissions, so it needs the rights chat's turn preview needs,
and each preview is an admin view event (fail closed)."""

from __future__ import annotations

import json
import logging

from django.contrib.auth import get_user_model
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _

from audit.events import AuditWriteError, audit_event_write
from audit.models import EventKind, ResourceKind
from chat.admin import _grant_scope, _hidden_names
from chat.context import TurnContext
from chat.prompt import turn_inputs
from chat.turns import origins
from governance.models import Tier
from playbooks.models import Playbook
from playbooks.services import may_run, visible_tool_names

logger = logging.getLogger(__name__)


def _run_as(request, playbook: Playbook):
    """The owner unless ?user= names someone who may run it now."""
    chosen = request.GET.get("user")
    if not chosen:
        return playbook.owner
    user = get_user_model().objects.filter(pk=chosen if chosen.isdigit() else 0).first()
    if user is None or not may_run(playbook, user):
        raise Http404
    return user


def playbook_turn_preview(model_admin, request, object_id: str):
    playbook = get_object_or_404(Playbook.objects.select_related("owner", "model__provider"), pk=object_id)
    if not (
        model_admin.has_view_permission(request, playbook)
        and request.user.has_perm("governance.view_role")
        and request.user.has_perm("auth.view_user")
    ):
        raise Http404
    user = _run_as(request, playbook)
    tier = playbook.tier
    ctx = TurnContext(
        user_id=user.pk,
        username=user.get_username(),
        tier=tier,
        model_name=playbook.model.name,
        provider_name=playbook.model.provider.name,
        conversation_id=None,
        turn_id=None,
        origin=origins.PLAYBOOK,
        origin_ref="preview",
    )
    inputs = turn_inputs(user_id=user.pk, tier=tier, ctx=ctx)
    try:
        audit_event_write(
            kind=EventKind.ADMIN_VIEW,
            request=request,
            resource_kind=ResourceKind.TURN_PREVIEW,
            resource_id=user.pk,
            owner_id=user.pk,
            owner_username=user.get_username(),
            row_count=len(inputs.resources.connections) + len(inputs.resources.collections),
            details={"tier": tier, "playbook_id": playbook.pk, "playbook": playbook.name},
        )
    except AuditWriteError:
        logger.exception("playbook turn preview view event could not be written")
        return HttpResponse(_("This view could not be recorded in the audit log, so it is not shown."), status=503)
    offered = visible_tool_names(user_id=user.pk, tier=tier)
    steps = [
        {
            "index": i + 1,
            "key": node["key"],
            "kind": node["kind"],
            "text": node.get("prompt") or json.dumps(node.get("arguments") or {}, ensure_ascii=False),
            "tool": node.get("tool", ""),
            "offered": node["kind"] == "agent" or node.get("tool") in offered,
        }
        for i, node in enumerate(playbook.nodes)
    ]
    context = {
        **model_admin.admin_site.each_context(request),
        "title": _("Turn preview"),
        "opts": model_admin.model._meta,
        "playbook": playbook,
        "preview_user": user,
        "tier_label": dict(Tier.choices).get(tier, tier),
        "inputs": inputs,
        "connections": [(c, _grant_scope(user.pk, c.pk)) for c in inputs.resources.connections],
        "hidden": _hidden_names(tier),
        "tools_json": json.dumps(inputs.tools, ensure_ascii=False, indent=2),
        "steps": steps,
    }
    return TemplateResponse(request, "admin/playbooks/turn_preview.html", context)
