"""The owner's side of URL references: the URL behind a `[URL-n]` the
conversation's results showed (chat.url_references decides who may)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from chat import serializers as api
from chat.models import Conversation
from chat.url_references import url_reference_resolve


class UrlReferenceSerializer(serializers.Serializer):
    reference = serializers.CharField(max_length=40)


class ResolvedUrlSerializer(serializers.Serializer):
    reference = serializers.CharField()
    url = serializers.CharField()


@extend_schema(
    request=UrlReferenceSerializer,
    responses={200: ResolvedUrlSerializer, 403: api.DetailSerializer},
    summary="The URL behind a [URL-n] reference of this conversation (permitted roles only; audited)",
)
@api_view(["POST"])
def conversation_url_reference(request: Request, conversation_id) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    serializer = UrlReferenceSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    reference = serializer.validated_data["reference"]
    result = url_reference_resolve(conversation=conversation, user=request.user, reference=reference, request=request)
    if not result.allowed:
        return Response({"detail": result.message}, status=status.HTTP_403_FORBIDDEN)
    return Response({"reference": reference, "url": result.url})
