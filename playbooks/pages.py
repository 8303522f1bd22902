"""The playbook pages (server-rendered in the chat page's look, Korean and
English, scripts only from static files): the playbooks a person may run
with their notices and the forms that make one; one playbook (run it with
its parameters; for its owner the step and parameter editor, sharing and
schedules with the time zone and the next run); one run, whose steps
playbooks.js reads from the run API whenever the run's websocket says it
changed (the same after reload: the database is the truth), with the chat
page's token chips and reveal."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from chat.models import Message, MessageRole
from chat.reveal import may_reveal
from chat.turns import origins
from chat.views import CHAT_PAGE_CSP
from governance.models import LlmModel, PiiKindChoice, Role
from governance.pii.kinds import TOKEN_LABELS, PiiKind
from playbooks.models import Notification, PlaybookRun, RunStatus
from playbooks.runs import playbook_run_rerun, playbook_run_start, playbook_run_stop, shows_contents
from playbooks.schedules import next_run
from playbooks.services import PlaybookError, visible_tool_names
from playbooks.spec import PARAMETER_KINDS
from playbooks.views import _own_run, _runnable

# Offered in the schedule form; any IANA name can be typed.
TIME_ZONES = ("Asia/Seoul", "UTC", "Asia/Tokyo", "Europe/London", "America/New_York")


def _page(request, template: str, context: dict):
    response = render(request, template, context)
    response["Content-Security-Policy"] = CHAT_PAGE_CSP
    return response


def _usable_models():
    return [m for m in LlmModel.objects.select_related("provider").filter(enabled=True) if m.usable]


def _recent_questions(user, limit: int = 30) -> list[dict]:
    """The person's latest questions, for "save as playbook"."""
    rows = (
        Message.objects.filter(role=MessageRole.USER, turn__conversation__owner=user)
        .filter(turn__conversation__deleted_at__isnull=True)
        .exclude(turn__conversation__tier="")
        .filter(turn__origin=origins.CHAT.name)  # a person's questions, not a run's rendered steps
        .select_related("turn__conversation")
        .order_by("-id")[:limit]
    )
    return [
        {"turn": m.turn_id, "title": m.turn.conversation.title or "", "text": m.content.strip()[:80]}
        for m in rows
        if m.content.strip()
    ]


@login_required
def chat_page_text(request):
    """The words of the chat page's "Save as playbook" action (save.js):
    the chat page's CSP forbids inline scripts, so the script asks."""
    return JsonResponse(
        {
            "saveAsPlaybook": _("Save as playbook"),
            "saveAsPlaybookHint": _("Make a playbook of this question: it keeps this conversation's tier"),
            "listUrl": reverse("playbooks:list"),
        }
    )


@login_required
def playbook_list(request):
    notices = Notification.objects.filter(user=request.user).select_related("run__playbook")
    unread = notices.filter(read_at__isnull=True).count()
    return _page(
        request,
        "playbooks/list.html",
        {
            "playbooks": _runnable(request.user),
            "notices": notices[:20],
            "unread": unread,
            "models": _usable_models(),
            "questions": _recent_questions(request.user),
            "chosen_turn": request.GET.get("turn", ""),
        },
    )


def _editor_config(playbook, user) -> dict:
    return {
        "detailUrl": reverse("playbooks:detail", args=[playbook.pk]),
        "parameters": playbook.parameters,
        "nodes": playbook.nodes,
        "kinds": {k: str(label) for k, label in _kind_labels().items()},
        "model": playbook.model_id,
        "models": [{"id": m.pk, "label": str(m)} for m in _usable_models() if m.provider.tier == playbook.tier],
        "tools": sorted(visible_tool_names(user_id=user.pk, tier=playbook.tier)),
        "text": {
            "parametersTitle": _("Parameters"),
            "stepsTitle": _("Steps"),
            "addParameter": _("Add a parameter"),
            "addAgent": _("Add a model step"),
            "addTool": _("Add a tool step"),
            "remove": _("Remove"),
            "moveUp": _("Move up"),
            "moveDown": _("Move down"),
            "moveUpLabel": _("Move step %(n)s up"),
            "moveDownLabel": _("Move step %(n)s down"),
            "removeStep": _("Remove step %(n)s"),
            "stepNumber": _("Step %(n)s"),
            "moved": _("Step %(key)s is now step %(n)s."),
            "name": _("Name"),
            "label": _("Label"),
            "kind": _("Type"),
            "model": _("Model"),
            "choices": _("Choices (comma-separated)"),
            "required": _("Required"),
            "default": _("Default"),
            "key": _("Key"),
            "prompt": _("Prompt ($parameter, $earlier_step)"),
            "tool": _("Tool"),
            "arguments": _("Arguments (JSON)"),
            "badJson": _("Step %(n)s: the arguments are not valid JSON."),
            "saved": _("Saved."),
            "networkError": _("The request failed; please try again."),
        },
    }


def _kind_labels() -> dict:
    labels = {"text": _("Text"), "number": _("Number"), "date": _("Date"), "choice": _("Choice")}
    return {k: labels[k] for k in PARAMETER_KINDS}


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
    context = {
        "playbook": playbook,
        "owner": owner,
        "error": error,
        "runs": PlaybookRun.objects.filter(playbook=playbook, actor=request.user)[:30],
        "now": timezone.now(),
        "time_zones": TIME_ZONES,
    }
    if owner:
        context.update(
            schedules=[(s, next_run(s)) for s in playbook.schedules.all()],
            pre_approvals=playbook.pre_approvals.filter(revoked_at__isnull=True).select_related(
                "connector_tool__connector"
            ),
            editor=_editor_config(playbook, request.user),
            roles=Role.objects.order_by("name"),
            shared_role_ids={r.pk for r in playbook.shared_roles.all()},
            shared_users=" ".join(sorted(u.get_username() for u in playbook.shared_users.all())),
        )
    return _page(request, "playbooks/playbook.html", context)


def _run_config(run) -> dict:
    return {
        "runUrl": reverse("playbooks:run-detail", args=[run.pk]),
        "socketPath": f"/ws/playbook-runs/{run.pk}/",  # playbooks.routing
        "pollSeconds": settings.OWLAI_PLAYBOOK_RUN_POLL_SECONDS,
        "revealUrl": reverse("chat:conversation-reveal", args=[run.conversation_id]) if run.conversation_id else "",
        "mayReveal": False,  # the page sets it for the person looking
        "active": [str(s) for s in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_APPROVAL)],
        "statuses": {value: str(label) for value, label in RunStatus.choices},
        "tokenKinds": {TOKEN_LABELS[PiiKind(value)]: str(name) for value, name in PiiKindChoice.choices},
        "text": {
            "input": _("Input"),
            "output": _("Output"),
            "reason": _("Reason"),
            "agent": _("ask the model"),
            "tool": _("tool"),
            "nodeStatus": {
                "queued": _("Queued"),
                "running": _("Running…"),
                "completed": _("Completed"),
                "failed": _("Failed"),
                "cancelled": _("Stopped"),
                "waiting_approval": _("Waiting for approval"),
            },
            # A running step's tool calls, as its turn's events say (live only).
            "callOutcome": {
                "running": _("Running…"),
                "success": _("Completed"),
                "denied": _("Refused"),
                "failed": _("Failed"),
                "waiting": _("Waiting for approval"),
            },
            "revealHint": _("Masked %(kind)s. Click to reveal the original (recorded in the audit log)."),
            "revealedHint": _("Revealed %(token)s (recorded in the audit log)"),
            "maskedHint": _(
                "Masked %(kind)s. Only people whose role may view personal data can reveal it; "
                "ask an administrator to grant you such a role."
            ),
            "revealRefused": _("You may not reveal this value."),
            "networkError": _("The request failed; please try again."),
        },
    }


@login_required
def run_page(request, run_id: int, error: str = ""):
    run = _own_run(request, run_id)
    Notification.objects.filter(user=request.user, run=run, read_at__isnull=True).update(read_at=timezone.now())
    config = _run_config(run)
    # Only the person the run acted for holds its conversation (its vault):
    # the playbook's owner watching someone else's run sees tokens only.
    config["mayReveal"] = run.actor_id == request.user.pk and may_reveal(user=request.user)
    if run.actor_id != request.user.pk:
        config["revealUrl"] = ""
    context = {"run": run, "nodes": run.node_runs.all(), "error": error, "config": config}
    context["contents"] = shows_contents(run, request.user)
    return _page(request, "playbooks/run.html", context)


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
        return run_page(request, run.pk, error=str(exc))
    return redirect("playbooks:run-page", run_id=run.pk)
