"""The owner's side of URL references: the URL behind a `[URL-n]` the
conversation's results showed (chat.url_references decides who may)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from chat.models import Conversation
from chat.url_references import url_reference_resolve


class UrlReferenceSerializer(serializers.Serializer):
    reference = serializers.CharField(max_length=40)


@api_view(["POST"])
def conversation_url_reference(request: Request, conversation_id) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    serializer = UrlReferenceSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    reference = serializer.validated_data["reference"]
    result = url_reference_resolve(conversation=conversation, user=request.user, reference=reference, request=request)
    if not result.allowed:
        return Response({"detail": result.reason}, status=status.HTTP_403_FORBIDDEN)
    return Response({"reference": reference, "url": result.url})
