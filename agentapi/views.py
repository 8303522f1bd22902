"""The agent API: start a turn, follow its events (Server-Sent Events or
polling), answer its approval requests, stop it. Thin: chat.turns and
chat.approvals do the work and write the audit; every request is a token's
(an `api_token_used` event, accounts.services) with the `agent` scope."""

from __future__ import annotations

import json

from django.http import StreamingHttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import api_view, authentication_classes, permission_classes, renderer_classes
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from agentapi import serializers as api
from agentapi.access import AUTHENTICATION, PERMISSIONS, throttle_turn_start
from agentapi.streams import KEEPALIVE, follow, sse
from agentapi.turns import ConversationNotFound, agent_turn_start
from chat import events
from chat.approvals import ApprovalError, tool_approval_decide
from chat.models import Turn
from chat.protocol import ServerEvent
from chat.turns.cancel import TurnCancelRefused, turn_cancel
from chat.turns.start import TurnRefused

TAGS = ["agent"]


class EventStreamRenderer(BaseRenderer):
    """Lets a client send `Accept: text/event-stream`; the stream itself is a
    StreamingHttpResponse, only refusals are rendered (as JSON text)."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return json.dumps(data, ensure_ascii=False).encode("utf-8")


def agent_view(methods, renderers=None):
    """A DRF view of the agent API: token authentication only, `agent` scope."""

    def wrap(func):
        func = permission_classes(PERMISSIONS)(func)
        func = authentication_classes(AUTHENTICATION)(func)
        if renderers is not None:
            func = renderer_classes(renderers)(func)
        return api_view(methods)(func)

    return wrap


def _owned_turn(request: Request, turn_id: int) -> Turn:
    turn = (
        Turn.objects.select_related("conversation")
        .filter(pk=turn_id, conversation__owner_id=request.user.pk, conversation__deleted_at__isnull=True)
        .first()
    )
    if turn is None:
        raise NotFound()
    return turn


def _after_seq(request: Request) -> int:
    """`after_seq`, else the SSE reconnect header Last-Event-ID, else 0."""
    raw = request.query_params.get("after_seq") or request.headers.get("Last-Event-ID") or "0"
    if not raw.isdigit() or len(raw) > 18:
        raise ValidationError({"after_seq": "a non-negative integer"})
    return int(raw)


@extend_schema(
    request=api.TurnStartSerializer,
    responses={
        201: api.TurnStartedSerializer,
        404: api.DetailSerializer,
        409: api.DetailSerializer,
        429: api.DetailSerializer,
    },
    summary="Ask the agent: start a turn in one of your conversations or a new one (token with the agent scope)",
    tags=TAGS,
)
@agent_view(["POST"])
def turn_create(request: Request) -> Response:
    """The same turn the chat page's websocket starts (same checks, model and
    tier rules, audit rows); its events then come from `stream_url` or
    `events_url`. 409: refused (a turn already running in the conversation,
    one waiting for an approval, an unknown model, …) with the reason."""
    serializer = api.TurnStartSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    data = serializer.validated_data
    throttle_turn_start(request.user.pk)
    try:
        turn = agent_turn_start(
            user=request.user, text=data["text"], conversation_id=data["conversation_id"], model=data["model"]
        )
    except ConversationNotFound:
        raise NotFound()
    except TurnRefused as refused:
        return Response({"detail": str(refused)}, status=status.HTTP_409_CONFLICT)
    return Response(_started(turn), status=status.HTTP_201_CREATED)


def _started(turn: Turn) -> dict:
    return {
        "turn_id": turn.pk,
        "conversation_id": str(turn.conversation_id),
        "status": turn.status,
        "events_url": reverse("agentapi:turn-events", args=[turn.pk]),
        "stream_url": reverse("agentapi:turn-stream", args=[turn.pk]),
    }


AFTER_SEQ = OpenApiParameter(
    "after_seq", int, description="only events after this sequence number (default 0: all of them)"
)


@extend_schema(
    parameters=[AFTER_SEQ],
    responses={200: api.TurnEventsSerializer, 404: api.DetailSerializer},
    summary="A turn's events after a sequence number (polling)",
    tags=TAGS,
)
@agent_view(["GET"])
def turn_events(request: Request, turn_id: int) -> Response:
    turn = _owned_turn(request, turn_id)
    after = _after_seq(request)
    frames = events.replay(turn_id=turn.pk, after_seq=after)
    return Response(
        {
            "turn_id": turn.pk,
            "conversation_id": str(turn.conversation_id),
            "status": turn.status,
            "events": frames,
            "last_seq": frames[-1]["seq"] if frames else after,
            "finished": any(f["type"] == ServerEvent.TURN_FINISHED for f in frames),
        }
    )


@extend_schema(
    parameters=[
        AFTER_SEQ,
        OpenApiParameter("Last-Event-ID", int, OpenApiParameter.HEADER, description="as after_seq, on reconnect"),
    ],
    responses={
        (200, "text/event-stream"): OpenApiResponse(
            OpenApiTypes.STR,
            description="One event per stored turn event: `event:` its type, `id:` its seq, `data:` the event "
            "as JSON (as the websocket sends it), up to `turn.finished`; `: keep-alive` comments meanwhile.",
        ),
        404: api.DetailSerializer,
    },
    summary="A turn's events as Server-Sent Events, to its end",
    tags=TAGS,
)
@agent_view(["GET"], renderers=[EventStreamRenderer, JSONRenderer])
def turn_stream(request: Request, turn_id: int) -> StreamingHttpResponse:
    turn = _owned_turn(request, turn_id)
    after = _after_seq(request)

    async def stream():
        async for frame in follow(turn_id=turn.pk, group=turn.conversation.group_name, after_seq=after):
            yield KEEPALIVE if frame is None else sse(frame)

    response = StreamingHttpResponse(stream(), content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a buffering proxy would hold the events back
    return response


@extend_schema(
    request=None,
    responses={200: api.CancelledSerializer, 404: api.DetailSerializer, 409: api.DetailSerializer},
    summary="Stop a turn (what ran before stays, audited)",
    tags=TAGS,
)
@agent_view(["POST"])
def turn_stop(request: Request, turn_id: int) -> Response:
    turn = _owned_turn(request, turn_id)
    try:
        outcome = turn_cancel(conversation=turn.conversation, actor=request.user, turn_id=turn.pk)
    except TurnCancelRefused as refused:
        return Response({"detail": str(refused)}, status=status.HTTP_409_CONFLICT)
    return Response({"turn_id": turn.pk, "status": outcome})


@extend_schema(
    request=api.DecisionSerializer,
    responses={200: api.DecidedSerializer, 409: api.DetailSerializer},
    summary="Answer an approval request of your turn (`approval.requested`'s approval_id); the turn goes on",
    tags=TAGS,
)
@agent_view(["POST"])
def approval_decide(request: Request, approval_id) -> Response:
    """{"decision": "approve" | "always_allow" | "deny"}, as the page's
    buttons: the decision's audit event and `approval.decided` are written
    by chat.approvals, and the turn continues (its events keep coming on the
    stream)."""
    serializer = api.DecisionSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    try:
        approval = tool_approval_decide(
            approval_id=approval_id,
            decision=serializer.validated_data["decision"],
            actor=request.user,
            request=request._request,
        )
    except ApprovalError as refused:
        return Response({"detail": str(refused)}, status=status.HTTP_409_CONFLICT)
    return Response({"id": str(approval.pk), "status": approval.status})
