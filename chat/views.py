"""Chat page and the small JSON API it uses. Thin: services do the work."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from chat import serializers as api
from chat.models import Conversation, MessageRole
from chat.reveal import may_reveal, token_reveal
from chat.services import conversation_create, mention_tier, models_for_conversation
from chat.services import conversation_delete as conversation_delete_service
from governance.models import LlmModel
from governance.visibility import visible_resources


@login_required
def chat_page(request):
    return render(request, "chat/page.html", {"may_reveal": may_reveal(user=request.user)})


def _model_json(model: LlmModel) -> dict:
    return {
        "id": model.pk,
        "name": model.name,
        "label": str(model),
        "provider": model.provider.name,
        "tier": model.provider.tier,
        "offline_demo": model.provider.kind == "offline-demo",
    }


def _conversation_json(conversation: Conversation) -> dict:
    return {
        "id": str(conversation.pk),
        "title": conversation.title,
        "tier": conversation.tier,
        "model": conversation.model_id,
        "updated_at": conversation.updated_at.isoformat(),
    }


class ConversationCreateSerializer(serializers.Serializer):
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


@extend_schema(methods=["GET"], responses=api.ConversationSerializer(many=True), summary="Your conversations")
@extend_schema(
    methods=["POST"],
    request=ConversationCreateSerializer,
    responses={201: api.ConversationSerializer},
    summary="Start a conversation",
)
@api_view(["GET", "POST"])
def conversations(request: Request) -> Response:
    if request.method == "POST":
        serializer = ConversationCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        conversation = conversation_create(owner=request.user, title=serializer.validated_data["title"])
        return Response(_conversation_json(conversation), status=status.HTTP_201_CREATED)
    items = Conversation.objects.live().filter(owner=request.user).order_by("-updated_at")[:100]
    return Response([_conversation_json(c) for c in items])


@extend_schema(responses=api.ModelSerializer(many=True), summary="Models a new conversation may use")
@api_view(["GET"])
def models_for_new_conversation(request: Request) -> Response:
    return Response([_model_json(m) for m in models_for_conversation(conversation=None)])


@extend_schema(
    responses=api.ModelSerializer(many=True), summary="Models this conversation may use (its tier, once pinned)"
)
@api_view(["GET"])
def conversation_models(request: Request, conversation_id) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    return Response([_model_json(m) for m in models_for_conversation(conversation=conversation)])


@extend_schema(
    parameters=[OpenApiParameter("model", str, description="the selected model (id, provider/name or unique name)")],
    responses=api.MentionSerializer(many=True),
    summary="Resources a turn of this conversation may @mention",
)
@api_view(["GET"])
def conversation_mentions(request: Request, conversation_id) -> Response:
    """@mention targets: only what a turn of this conversation may use. Before
    the tier is pinned, the tier of the model the user has selected decides."""
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    tier = mention_tier(conversation=conversation, model_ref=request.query_params.get("model", ""))
    if tier is None:
        return Response([])
    resources = visible_resources(user_id=request.user.pk, tier=tier)
    return Response(
        [{"name": c.name, "kind": "database"} for c in resources.connections]
        + [{"name": c.name, "kind": "documents"} for c in resources.collections]
    )


@extend_schema(responses={204: None}, summary="Delete a conversation")
@api_view(["DELETE"])
def conversation_delete(request: Request, conversation_id) -> Response:
    """Deleting a conversation hides it and deletes its token vault at once;
    the rest is purged 30 days later (chat.services.conversation_delete). The
    audit rows of what it touched stay (they hold no foreign key to it)."""
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    conversation_delete_service(conversation=conversation)
    return Response(status=status.HTTP_204_NO_CONTENT)


class RevealSerializer(serializers.Serializer):
    token = serializers.CharField(max_length=40)


@extend_schema(
    request=RevealSerializer,
    responses={200: api.RevealedSerializer, 403: api.DetailSerializer},
    summary="Reveal the original behind a masked token (permitted roles only; audited)",
)
@api_view(["POST"])
def conversation_reveal(request: Request, conversation_id) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    serializer = RevealSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    result = token_reveal(
        conversation=conversation, user=request.user, token=serializer.validated_data["token"], request=request
    )
    if not result.allowed:
        return Response({"detail": result.message}, status=status.HTTP_403_FORBIDDEN)
    return Response({"token": serializer.validated_data["token"], "original": result.original})


@extend_schema(responses=api.MessageSerializer(many=True), summary="The conversation's messages")
@api_view(["GET"])
def conversation_messages(request: Request, conversation_id) -> Response:
    """What the user sees: their messages and the assistant's final texts."""
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    items = conversation.messages.filter(role__in=[MessageRole.USER, MessageRole.ASSISTANT]).exclude(content="")
    return Response([{"role": m.role, "content": m.content, "created_at": m.created_at.isoformat()} for m in items])
