"""What the chat API answers, for its OpenAPI schema (/api/schema/).
tests/test_api_schema.py checks that each answer has exactly these fields."""

from __future__ import annotations

from rest_framework import serializers

from chat.models import MessageRole
from governance.models import Tier


class ModelSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    label = serializers.CharField(help_text="provider/name as shown to people")
    provider = serializers.CharField()
    tier = serializers.ChoiceField(choices=Tier.choices)
    offline_demo = serializers.BooleanField(help_text="the offline demo model (no network)")


class ConversationSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()
    tier = serializers.ChoiceField(choices=Tier.choices, allow_blank=True, help_text="empty until the first turn")
    model = serializers.IntegerField(allow_null=True, help_text="the model id the conversation asked for, if any")
    updated_at = serializers.DateTimeField()


class MentionSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["database", "documents"])


class MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=[MessageRole.USER, MessageRole.ASSISTANT])
    content = serializers.CharField()
    created_at = serializers.DateTimeField()


class RevealedSerializer(serializers.Serializer):
    token = serializers.CharField()
    original = serializers.CharField()


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()
