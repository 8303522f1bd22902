"""Feedback over HTTP (the chat page's thumbs). Thin: feedback.services."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from chat import serializers as chat_api
from chat.models import Conversation
from feedback.models import COMMENT_MAX_CHARS, DOWN_TAGS, TAGS, UP_TAGS, AnswerFeedback, Rating
from feedback.services import FeedbackRefused, answer_feedback_give
from owlai.times import api_time


class FeedbackSerializer(serializers.Serializer):
    rating = serializers.ChoiceField(choices=Rating.choices)
    tags = serializers.ListField(child=serializers.ChoiceField(choices=list(TAGS)), required=False, default=list)
    comment = serializers.CharField(max_length=COMMENT_MAX_CHARS, required=False, allow_blank=True, default="")
    attach_conversation = serializers.BooleanField(
        required=False, default=False, help_text="attach the conversation, masked as the model saw it"
    )


class FeedbackAnswerSerializer(FeedbackSerializer):
    turn_id = serializers.IntegerField()
    updated_at = serializers.DateTimeField()


class TagSerializer(serializers.Serializer):
    id = serializers.CharField()
    label = serializers.CharField()


def _json(feedback: AnswerFeedback) -> dict:
    return {
        "turn_id": feedback.turn_ref,
        "rating": feedback.rating,
        "tags": feedback.tags,
        "comment": feedback.comment,
        "attach_conversation": feedback.attach_conversation,
        "updated_at": api_time(feedback.updated_at),
    }


@extend_schema(responses=FeedbackAnswerSerializer(many=True), summary="Your feedback on this conversation's answers")
@api_view(["GET"])
def conversation_feedback(request: Request, conversation_id) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    rows = AnswerFeedback.objects.filter(user=request.user, conversation=conversation).order_by("turn_ref")
    return Response([_json(f) for f in rows])


@extend_schema(
    request=FeedbackSerializer,
    responses={200: FeedbackAnswerSerializer, 400: chat_api.DetailSerializer},
    summary="Rate an answer (thumbs up or down, tags, comment, optionally the conversation; audited)",
)
@api_view(["PUT"])
def turn_feedback(request: Request, conversation_id, turn_id: int) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    serializer = FeedbackSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    try:
        feedback = answer_feedback_give(
            conversation=conversation, turn_id=turn_id, actor=request.user, request=request, **serializer.validated_data
        )
    except FeedbackRefused as refused:
        return Response({"detail": str(refused)}, status=status.HTTP_400_BAD_REQUEST)
    return Response(_json(feedback))


@extend_schema(responses=TagSerializer(many=True), summary="The tags feedback may carry, in your language")
@api_view(["GET"])
def feedback_tags(request: Request) -> Response:
    return Response([{"id": key, "label": str(label)} for key, label in TAGS.items()])


@login_required
def chat_page_text(request):
    """The chat page's feedback controls: words and tags in the request's
    language (the page's CSP forbids inline scripts, so its script asks)."""
    return JsonResponse(
        {
            "text": {
                "up": _("Good answer"),
                "down": _("Bad answer"),
                "tags": _("What was it?"),
                "comment": _("Comment (optional)"),
                "attach": _("Attach this conversation, masked as the model saw it"),
                "attachHint": _(
                    "Administrators can read an attached conversation (their reading is recorded). "
                    "It goes when you delete the conversation."
                ),
                "send": _("Send feedback"),
                "cancel": _("Cancel"),
                "thanks": _("Thanks for your feedback."),
                "failed": _("The feedback could not be sent."),
            },
            "tags": {"up": [[k, str(TAGS[k])] for k in UP_TAGS], "down": [[k, str(TAGS[k])] for k in DOWN_TAGS]},
        }
    )
