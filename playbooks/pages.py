"""The playbook pages (server-rendered, Korean and English): the playbooks a
person may run with their notices, one playbook (run it with its parameters,
its schedules with the next run, its runs), one run (its steps' masked inputs
and outputs; stop, re-run). A run that waits for an approval is answered on
the run's conversation in the chat page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from playbooks.models import Notification, PlaybookRun
from playbooks.runs import playbook_run_rerun, playbook_run_start, playbook_run_stop
from playbooks.schedules import next_run
from playbooks.services import PlaybookError
from playbooks.views import _own_run, _runnable


@login_required
def playbook_list(request):
    notices = Notification.objects.filter(user=request.user).select_related("run__playbook")
    unread = notices.filter(read_at__isnull=True).count()
    return render(
        request,
        "playbooks/list.html",
        {"playbooks": _runnable(request.user), "notices": notices[:20], "unread": unread},
    )


@login_required
def playbook_page(request, playbook_id: int):
    playbook = get_object_or_404(_runnable(request.user), pk=playbook_id)
    error = ""
    if request.method == "POST":
        values = {p["name"]: request.POST.get(p["name"], "") for p in playbook.parameters}
        try:
            run = playbook_run_start(playbook=playbook, actor=request.user, parameters=values, request=request)
            return redirect("playbooks:run-page", run_id=run.pk)
        except PlaybookError as exc:
            error = str(exc)
    owner = playbook.owner_id == request.user.pk
    schedules = [(s, next_run(s)) for s in playbook.schedules.all()] if owner else []
    pre_approvals = (
        playbook.pre_approvals.filter(revoked_at__isnull=True).select_related("connector_tool__connector")
        if owner
        else []
    )
    runs = PlaybookRun.objects.filter(playbook=playbook, actor=request.user)[:30]
    return render(
        request,
        "playbooks/playbook.html",
        {
            "playbook": playbook,
            "error": error,
            "schedules": schedules,
            "pre_approvals": pre_approvals,
            "runs": runs,
            "now": timezone.now(),
        },
    )


@login_required
def run_page(request, run_id: int):
    run = _own_run(request, run_id)
    Notification.objects.filter(user=request.user, run=run, read_at__isnull=True).update(read_at=timezone.now())
    return render(request, "playbooks/run.html", {"run": run, "nodes": run.node_runs.all(), "error": ""})


@login_required
@require_POST
def run_action(request, run_id: int, action: str):
    if action not in ("stop", "rerun"):
        raise Http404
    run = _own_run(request, run_id)
    try:
        if action == "stop":
            playbook_run_stop(run=run, actor=request.user, request=request)
        else:
            run = playbook_run_rerun(run=run, actor=request.user, request=request)
    except PlaybookError as exc:
        return render(request, "playbooks/run.html", {"run": run, "nodes": run.node_runs.all(), "error": str(exc)})
    return redirect("playbooks:run-page", run_id=run.pk)
