"""An OpenAI-compatible facade over governed conversations, so existing
OpenAI clients and chat front ends can use the governed agent:

* `POST /v1/chat/completions`: the request's last message (the user's)
  becomes a turn of a governed conversation; the answer comes back as a
  `chat.completion`, or with `"stream": true` as `chat.completion.chunk`
  Server-Sent Events ending with `data: [DONE]`. Earlier messages of the
  request are not sent to the model: the conversation's own stored history
  is its context (a client could otherwise put words in the assistant's or a
  tool's mouth that never passed the executor).
* The conversation: `X-OwlAI-Conversation: <id>` or `metadata.conversation_id`
  continues one; without either a new one starts. Its id comes back in the
  `X-OwlAI-Conversation` response header and in `owlai.conversation_id` of
  the completion and of every chunk.
* `model`: one of `GET /v1/models`, the enabled models the conversation may
  use (its tier once pinned).
* The key is a personal API token with the `agent` scope.

Sampling parameters (temperature, max_tokens, tools …) are not honoured:
the platform's model settings and tools are governed, not the client's."""

from __future__ import annotations

import json

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import StreamingHttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from agentapi.access import AUTHENTICATION, PERMISSIONS, throttle_turn_start
from agentapi.completions import DONE, Answer, last_user_text
from agentapi.streams import follow
from agentapi.turns import ConversationNotFound, agent_turn_start, owned_conversation, visible_model
from chat.protocol import ServerEvent
from chat.services import models_for_conversation
from chat.turns.start import TurnRefused

CONVERSATION_HEADER = "X-OwlAI-Conversation"
TAGS = ["openai"]


class OpenAIError(exceptions.APIException):
    def __init__(self, message: str, *, status_code: int, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status_code, self.code, self.param = status_code, code, param


class OpenAIView(APIView):
    """Token authentication with the `agent` scope; errors in OpenAI's shape
    ({"error": {"message", "type", "param", "code"}}), which its clients
    turn into their exceptions (AuthenticationError, NotFoundError, …)."""

    authentication_classes = AUTHENTICATION
    permission_classes = PERMISSIONS
    renderer_classes = [JSONRenderer]

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        data = response.data if isinstance(response.data, dict) else {}
        message = str(data.get("detail") or exc)
        if isinstance(exc, exceptions.ValidationError) and isinstance(exc.detail, dict):
            message = "; ".join(f"{field}: {problem}" for field, problem in exc.detail.items())
        kinds = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_exceeded"}
        response.data = {
            "error": {
                "message": message,
                "type": kinds.get(
                    response.status_code, "invalid_request_error" if response.status_code < 500 else "server_error"
                ),
                "param": getattr(exc, "param", None),
                "code": getattr(exc, "code", None) or getattr(exc, "default_code", None),
            }
        }
        return response


def model_ids(models) -> list[tuple[str, object]]:
    """(id as /v1/models lists it, model): the name, or provider/name when
    two providers serve that name (chat.turns.model_choice.lookup_model
    reads both)."""
    names = [m.name for m in models]
    return [(m.name if names.count(m.name) == 1 else f"{m.provider.name}/{m.name}", m) for m in models]


class MessageSerializer(serializers.Serializer):
    role = serializers.CharField(help_text="system, developer, user, assistant or tool")
    content = serializers.JSONField(
        required=False, allow_null=True, help_text="a string, or a list of content parts (only text parts are read)"
    )


class ChatCompletionRequestSerializer(serializers.Serializer):
    model = serializers.CharField(max_length=300, help_text="an id of GET /v1/models")
    messages = MessageSerializer(many=True, help_text="only the last one, the user's, is read")
    stream = serializers.BooleanField(required=False, default=False)
    metadata = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="`conversation_id`: continue that conversation"
    )
    user = serializers.CharField(required=False, help_text="ignored: the token says who asks")


class AssistantMessageSerializer(serializers.Serializer):
    role = serializers.CharField(help_text="assistant")
    content = serializers.CharField()


class ChoiceSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    message = AssistantMessageSerializer()
    finish_reason = serializers.CharField()
    logprobs = serializers.JSONField(allow_null=True)


class OwlExtraSerializer(serializers.Serializer):
    conversation_id = serializers.UUIDField()
    turn_id = serializers.IntegerField()
    status = serializers.CharField(help_text="the turn's: completed, rejected, failed, cancelled, waiting_approval")
    approval = serializers.JSONField(
        required=False, help_text="an approval request (approval_id, tool, connector, arguments masked, expires_at)"
    )


class ChatCompletionSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.ChoiceField(choices=["chat.completion"])
    created = serializers.IntegerField()
    model = serializers.CharField()
    choices = ChoiceSerializer(many=True)
    owlai = OwlExtraSerializer()


class ErrorBodySerializer(serializers.Serializer):
    message = serializers.CharField()
    type = serializers.CharField()
    param = serializers.CharField(allow_null=True)
    code = serializers.CharField(allow_null=True)


class ErrorSerializer(serializers.Serializer):
    error = ErrorBodySerializer()


class ModelItemSerializer(serializers.Serializer):
    id = serializers.CharField()
    object = serializers.ChoiceField(choices=["model"])
    created = serializers.IntegerField()
    owned_by = serializers.CharField(help_text="the provider")


class ModelListSerializer(serializers.Serializer):
    object = serializers.ChoiceField(choices=["list"])
    data = ModelItemSerializer(many=True)


class ModelsView(OpenAIView):
    @extend_schema(
        responses={200: ModelListSerializer, 401: ErrorSerializer, 403: ErrorSerializer},
        summary="OpenAI-compatible: the models a new conversation may use",
        tags=TAGS,
    )
    def get(self, request):
        data = [
            {"id": ident, "object": "model", "created": 0, "owned_by": model.provider.name}
            for ident, model in model_ids(models_for_conversation(conversation=None))
        ]
        return Response({"object": "list", "data": data})


class ChatCompletionsView(OpenAIView):
    @extend_schema(
        request=ChatCompletionRequestSerializer,
        parameters=[
            OpenApiParameter(
                CONVERSATION_HEADER, str, OpenApiParameter.HEADER, description="continue this conversation"
            )
        ],
        responses={
            (200, "application/json"): ChatCompletionSerializer,
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR,
                description="with stream: `data: <chat.completion.chunk>` events, then `data: [DONE]`",
            ),
            400: ErrorSerializer,
            401: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
            429: ErrorSerializer,
        },
        summary="OpenAI-compatible chat completion: the last user message becomes a governed turn",
        tags=TAGS,
    )
    def post(self, request):
        serializer = ChatCompletionRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        text = last_user_text(request.data.get("messages"))
        if text is None:
            raise OpenAIError(
                _("The last message must be the user's, with text content."),
                status_code=400,
                code="invalid_messages",
                param="messages",
            )
        conversation_id = request.headers.get(CONVERSATION_HEADER) or (data.get("metadata") or {}).get(
            "conversation_id"
        )
        conversation = self._conversation(request.user, conversation_id)
        model = visible_model(ref=data["model"], conversation=conversation)
        if model is None:
            raise OpenAIError(
                _("The model '%(model)s' does not exist or is not available to this conversation.")
                % {"model": data["model"][:100]},
                status_code=404,
                code="model_not_found",
                param="model",
            )
        throttle_turn_start(request.user.pk)
        try:
            turn = agent_turn_start(
                user=request.user,
                text=text,
                conversation_id=None if conversation is None else conversation.pk,
                model=str(model.pk),
            )
        except TurnRefused as refused:
            raise OpenAIError(str(refused), status_code=409, code="turn_refused")
        answer = Answer(turn_id=turn.pk, conversation_id=str(turn.conversation_id), model=data["model"])
        group = turn.conversation.group_name
        if data["stream"]:
            response = StreamingHttpResponse(_chunks(answer, group), content_type="text/event-stream; charset=utf-8")
            response["Cache-Control"] = "no-cache"
            response["X-Accel-Buffering"] = "no"
        else:
            # Streamed too, as one JSON body at the end: under daphne the wait
            # for the turn is on the event loop, not a thread.
            response = StreamingHttpResponse(_whole(answer, group), content_type="application/json")
        response[CONVERSATION_HEADER] = answer.conversation_id
        return response

    @staticmethod
    def _conversation(user, conversation_id):
        if not conversation_id:
            return None
        try:
            return owned_conversation(user=user, conversation_id=conversation_id)
        except (ConversationNotFound, ValueError, DjangoValidationError):
            raise OpenAIError(
                _("No such conversation."), status_code=404, code="conversation_not_found", param="conversation_id"
            )


STOP_AT = frozenset({ServerEvent.APPROVAL_REQUESTED})


async def _whole(answer: Answer, group: str):
    shown = ""
    async for frame in follow(turn_id=answer.turn_id, group=group, stop_at=STOP_AT):
        if frame is None:
            yield "\n"  # JSON may start with whitespace: keeps proxies from timing out
        else:
            shown += answer.take(frame)
    yield json.dumps(answer.completion(shown), ensure_ascii=False)


async def _chunks(answer: Answer, group: str):
    yield answer.chunk({"role": "assistant", "content": ""})
    async for frame in follow(turn_id=answer.turn_id, group=group, stop_at=STOP_AT):
        if frame is None:
            yield ": keep-alive\n\n"
            continue
        piece = answer.take(frame)
        if piece:
            yield answer.chunk({"content": piece})
    yield answer.chunk({}, finish_reason="stop")
    yield DONE
