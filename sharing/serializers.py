"""What the sharing API takes and answers, for its OpenAPI schema."""

from __future__ import annotations

from rest_framework import serializers

from chat import serializers as chat_api
from sharing.services import EXPIRY_DAYS

LINK_STATUSES = ["open", "revoked", "expired", "deleted"]


class ShareLinkCreateSerializer(serializers.Serializer):
    up_to_turn = serializers.IntegerField(
        required=False, allow_null=True, help_text="the last turn shown (default: the latest ended turn)"
    )
    expires_in_days = serializers.ChoiceField(choices=list(EXPIRY_DAYS), default=EXPIRY_DAYS[0])


class ShareLinkSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    url = serializers.CharField(help_text="the page that shows the snapshot (signed-in members only)")
    conversation = serializers.UUIDField()
    title = serializers.CharField(allow_blank=True)
    up_to_turn = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    revoked_at = serializers.DateTimeField(allow_null=True)
    status = serializers.ChoiceField(choices=LINK_STATUSES)


class SharedConversationSerializer(serializers.Serializer):
    title = serializers.CharField(allow_blank=True)
    owner = serializers.CharField(help_text="who shared it")
    is_owner = serializers.BooleanField()
    tier = serializers.CharField(allow_blank=True)
    expires_at = serializers.DateTimeField()
    may_reveal = serializers.BooleanField(help_text="whether the viewer's own role may reveal personal data")
    reveal_refusal = serializers.CharField(allow_blank=True, help_text="why not, when the viewer may not")
    items = chat_api.TimelineItems


class ForkedSerializer(serializers.Serializer):
    conversation = serializers.UUIDField(help_text="the viewer's new conversation")
    url = serializers.CharField()
