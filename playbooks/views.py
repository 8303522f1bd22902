"""The playbooks API: list, create, edit, save a turn as a playbook, run,
stop and re-run; a run's detail for its person and the playbook's owner.
Every change goes through the services (their audit events)."""

from __future__ import annotations

from django.db.models import Q
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from chat.models import Turn
from governance.models import LlmModel
from playbooks import serializers as api
from playbooks.models import NodeRun, Notification, Playbook, PlaybookRun
from playbooks.runs import (
    playbook_run_rerun,
    playbook_run_start,
    playbook_run_stop,
    runs_visible_to,
    shows_contents,
)
from playbooks.services import PlaybookError, playbook_create, playbook_from_turn, playbook_update


def _refused(exc: PlaybookError) -> Response:
    return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)


def _playbook_json(playbook: Playbook, user) -> dict:
    return {
        "id": playbook.pk,
        "name": playbook.name,
        "description": playbook.description,
        "owner": playbook.owner.get_username(),
        "tier": playbook.tier,
        "model": playbook.model_id,
        "parameters": playbook.parameters,
        "nodes": playbook.nodes,
        "allow_overlap": playbook.allow_overlap,
        "editable": playbook.owner_id == user.pk,
    }


def _run_json(run: PlaybookRun, viewer) -> dict:
    contents = shows_contents(run, viewer)
    return {
        "id": run.pk,
        "playbook": run.playbook_id,
        "runs_as": run.actor.get_username(),
        "trigger": run.trigger,
        "status": run.status,
        "reason": run.error,
        "parameters": run.parameters if contents else {},
        "conversation_id": run.conversation_id if contents else None,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "nodes": [
            {
                "index": n.index,
                "key": n.key,
                "kind": n.kind,
                "status": n.status,
                "input": n.rendered_input if contents else "",
                "output": n.output if contents else "",
                "reason": n.error,
            }
            for n in NodeRun.objects.filter(run=run)
        ],
    }


def _runnable(user):
    """The playbooks this person may run (own, shared with them or a role of theirs)."""
    return (
        Playbook.objects.select_related("owner")
        .filter(Q(owner=user) | Q(shared_users=user) | Q(shared_roles__users=user))
        .distinct()
    )


def _model(model_id) -> LlmModel | None:
    return LlmModel.objects.select_related("provider").filter(pk=model_id).first()


@extend_schema(methods=["GET"], responses=api.PlaybookSerializer(many=True), summary="Playbooks the requester may run")
@extend_schema(
    methods=["POST"],
    request=api.PlaybookWriteSerializer,
    responses={201: api.PlaybookSerializer, 400: api.DetailSerializer},
    summary="Create a playbook (its tier is its model's)",
)
@api_view(["GET", "POST"])
def playbooks(request: Request) -> Response:
    if request.method == "GET":
        return Response([_playbook_json(p, request.user) for p in _runnable(request.user)[:200]])
    data = api.PlaybookWriteSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    values = data.validated_data
    try:
        playbook = playbook_create(
            owner=request.user,
            name=values["name"],
            description=values["description"],
            model=_model(values["model"]),
            parameters=values["parameters"],
            nodes=values["nodes"],
            allow_overlap=values["allow_overlap"],
            actor=request.user,
            request=request,
        )
    except PlaybookError as exc:
        return _refused(exc)
    return Response(_playbook_json(playbook, request.user), status=status.HTTP_201_CREATED)


@extend_schema(
    request=api.FromTurnSerializer,
    responses={201: api.PlaybookSerializer, 400: api.DetailSerializer},
    summary="Save a conversation's turn as a playbook (its question and the conversation's tier)",
)
@api_view(["POST"])
def playbook_from_turn_view(request: Request) -> Response:
    data = api.FromTurnSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    turn = Turn.objects.filter(pk=data.validated_data["turn_id"], conversation__owner=request.user).first()
    try:
        if turn is None:
            raise PlaybookError(str(_no_such_turn()))
        playbook = playbook_from_turn(turn=turn, actor=request.user, name=data.validated_data["name"], request=request)
    except PlaybookError as exc:
        return _refused(exc)
    return Response(_playbook_json(playbook, request.user), status=status.HTTP_201_CREATED)


def _no_such_turn() -> str:
    from django.utils.translation import gettext as _

    return _("No such turn.")


@extend_schema(methods=["GET"], responses=api.PlaybookSerializer, summary="A playbook the requester may run")
@extend_schema(
    methods=["PATCH"],
    request=api.PlaybookPatchSerializer,
    responses={200: api.PlaybookSerializer, 400: api.DetailSerializer},
    summary="Change a playbook (its owner only)",
)
@api_view(["GET", "PATCH"])
def playbook_detail(request: Request, playbook_id: int) -> Response:
    playbook = get_object_or_404(_runnable(request.user), pk=playbook_id)
    if request.method == "PATCH":
        data = api.PlaybookPatchSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        changes = dict(data.validated_data)
        if "model" in changes:
            changes["model"] = _model(changes["model"])
        try:
            playbook = playbook_update(playbook=playbook, actor=request.user, request=request, **changes)
        except PlaybookError as exc:
            return _refused(exc)
    return Response(_playbook_json(playbook, request.user))


@extend_schema(methods=["GET"], responses=api.RunSerializer(many=True), summary="The requester's runs of a playbook")
@extend_schema(
    methods=["POST"],
    request=api.RunStartSerializer,
    responses={201: api.RunSerializer, 400: api.DetailSerializer},
    summary="Run a playbook as the requester (parameters checked first)",
)
@api_view(["GET", "POST"])
def playbook_runs(request: Request, playbook_id: int) -> Response:
    playbook = get_object_or_404(_runnable(request.user), pk=playbook_id)
    if request.method == "GET":
        runs = PlaybookRun.objects.filter(playbook=playbook, actor=request.user).select_related("actor")[:100]
        return Response([_run_json(r, request.user) for r in runs])
    data = api.RunStartSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    try:
        run = playbook_run_start(
            playbook=playbook, actor=request.user, parameters=data.validated_data["parameters"], request=request
        )
    except PlaybookError as exc:
        return _refused(exc)
    run = PlaybookRun.objects.select_related("actor").get(pk=run.pk)
    return Response(_run_json(run, request.user), status=status.HTTP_201_CREATED)


def _own_run(request: Request, run_id: int) -> PlaybookRun:
    """Its person's and its playbook owner's (others open it in the admin, on the record)."""
    return get_object_or_404(runs_visible_to(request.user), pk=run_id)


@extend_schema(responses=api.RunSerializer, summary="A run: its steps with their masked inputs and outputs")
@api_view(["GET"])
def run_detail(request: Request, run_id: int) -> Response:
    return Response(_run_json(_own_run(request, run_id), request.user))


@extend_schema(request=None, responses={200: api.RunSerializer, 400: api.DetailSerializer}, summary="Stop a run")
@api_view(["POST"])
def run_stop(request: Request, run_id: int) -> Response:
    run = _own_run(request, run_id)
    try:
        run = playbook_run_stop(run=run, actor=request.user, request=request)
    except PlaybookError as exc:
        return _refused(exc)
    return Response(_run_json(PlaybookRun.objects.select_related("actor").get(pk=run.pk), request.user))


@extend_schema(
    request=None,
    responses={201: api.RunSerializer, 400: api.DetailSerializer},
    summary="Run again with the same parameters, as the requester",
)
@api_view(["POST"])
def run_rerun(request: Request, run_id: int) -> Response:
    run = _own_run(request, run_id)
    try:  # the start asks again whether the requester may run it
        again = playbook_run_rerun(run=run, actor=request.user, request=request)
    except PlaybookError as exc:
        return _refused(exc)
    return Response(_run_json(PlaybookRun.objects.select_related("actor").get(pk=again.pk), request.user), status=201)


@extend_schema(
    methods=["GET"], responses=api.NoticesSerializer, summary="The requester's playbook notices and the unread count"
)
@extend_schema(methods=["POST"], request=None, responses=api.NoticesSerializer, summary="Mark every notice read")
@api_view(["GET", "POST"])
def notices(request: Request) -> Response:
    """Runs that wait for the requester's approval or failed (playbooks.notices)."""
    mine = Notification.objects.filter(user=request.user)
    if request.method == "POST":
        mine.filter(read_at__isnull=True).update(read_at=timezone.now())
    items = mine.select_related("run__playbook")[:50]
    return Response(
        {
            "unread": mine.filter(read_at__isnull=True).count(),
            "notices": [
                {
                    "id": n.pk,
                    "run": n.run_id,
                    "playbook": n.run.playbook.name,
                    "kind": n.kind,
                    "created_at": n.created_at,
                    "read": n.read_at is not None,
                }
                for n in items
            ],
        }
    )
