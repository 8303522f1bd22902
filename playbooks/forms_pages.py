"""The owner's forms on the playbook pages: a new playbook, "save as
playbook" from a conversation's turn, sharing and schedules. Each calls the
governed service (its audit event) and comes back to the page with the
service's reason when it refused."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from chat.models import Turn
from governance.models import LlmModel, Role
from playbooks.models import Playbook, PlaybookSchedule
from playbooks.schedules import schedule_delete, schedule_set
from playbooks.services import PlaybookError, playbook_create, playbook_from_turn, playbook_share


def _own(request, playbook_id: int) -> Playbook:
    return get_object_or_404(Playbook.objects.select_related("owner"), pk=playbook_id, owner=request.user)


@login_required
@require_POST
def playbook_new(request):
    model = LlmModel.objects.select_related("provider").filter(pk=request.POST.get("model") or 0).first()
    try:
        playbook = playbook_create(
            owner=request.user,
            name=request.POST.get("name", ""),
            model=model,
            nodes=[{"key": "answer", "kind": "agent", "prompt": request.POST.get("prompt", "")}],
            actor=request.user,
            request=request,
        )
    except PlaybookError as exc:
        messages.error(request, str(exc))
        return redirect("playbooks:list")
    return redirect("playbooks:page", playbook_id=playbook.pk)


@login_required
@require_POST
def playbook_new_from_turn(request):
    turn = Turn.objects.filter(pk=request.POST.get("turn") or 0, conversation__owner=request.user).first()
    try:
        if turn is None:
            raise PlaybookError(_("No such turn."))
        playbook = playbook_from_turn(turn=turn, actor=request.user, name=request.POST.get("name", ""), request=request)
    except PlaybookError as exc:
        messages.error(request, str(exc))
        return redirect("playbooks:list")
    return redirect("playbooks:page", playbook_id=playbook.pk)


@login_required
@require_POST
def playbook_share_page(request, playbook_id: int):
    playbook = _own(request, playbook_id)
    roles = Role.objects.filter(pk__in=request.POST.getlist("roles"))
    names = [n.strip() for n in request.POST.get("users", "").replace(",", " ").split() if n.strip()]
    users = list(get_user_model().objects.filter(username__in=names, is_active=True))
    unknown = sorted(set(names) - {u.get_username() for u in users})
    if unknown:
        messages.error(request, _("No such user: %(name)s.") % {"name": unknown[0]})
        return redirect("playbooks:page", playbook_id=playbook.pk)
    try:
        playbook_share(playbook=playbook, roles=roles, users=users, actor=request.user, request=request)
    except PlaybookError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Sharing saved."))
    return redirect("playbooks:page", playbook_id=playbook.pk)


@login_required
@require_POST
def schedule_add(request, playbook_id: int):
    playbook = _own(request, playbook_id)
    values = {p["name"]: request.POST.get(f"s_{p['name']}", "") for p in playbook.parameters}
    try:
        minutes = int(request.POST.get("every_minutes") or 0) or None
    except ValueError:
        minutes = 0
    try:
        schedule_set(
            playbook=playbook,
            kind=request.POST.get("kind", ""),
            cron=request.POST.get("cron", "").strip(),
            every_minutes=minutes,
            tz=request.POST.get("timezone", "Asia/Seoul").strip(),
            parameters={k: v for k, v in values.items() if v != ""},
            enabled=True,
            actor=request.user,
            request=request,
        )
    except PlaybookError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("Schedule saved."))
    return redirect("playbooks:page", playbook_id=playbook.pk)


@login_required
@require_POST
def schedule_remove(request, playbook_id: int, schedule_id: int):
    playbook = _own(request, playbook_id)
    schedule = get_object_or_404(PlaybookSchedule, pk=schedule_id, playbook=playbook)
    try:
        schedule_delete(schedule=schedule, actor=request.user, request=request)
    except PlaybookError as exc:
        messages.error(request, str(exc))
    return redirect("playbooks:page", playbook_id=playbook.pk)
