"""What the chat API answers, for its OpenAPI schema (/api/schema/).
tests/test_api_schema.py checks that each answer has exactly these fields."""

from __future__ import annotations

from drf_spectacular.utils import PolymorphicProxySerializer
from rest_framework import serializers

from governance.models import Tier


class ModelSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    label = serializers.CharField(help_text="provider/name as shown to people")
    provider = serializers.CharField()
    tier = serializers.ChoiceField(choices=Tier.choices)
    tier_label = serializers.CharField(help_text="the tier in the request's language")
    offline_demo = serializers.BooleanField(help_text="the offline demo model (no network)")
    is_default = serializers.BooleanField(help_text="the chat default, preselected for a new conversation")


class ConversationSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()
    tier = serializers.ChoiceField(choices=Tier.choices, allow_blank=True, help_text="empty until the first turn")
    model = serializers.IntegerField(allow_null=True, help_text="the model id the conversation asked for, if any")
    updated_at = serializers.DateTimeField()


class MentionSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["database", "documents"])


class UserItemSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["user"])
    content = serializers.CharField()
    turn_id = serializers.IntegerField()
    supersedes = serializers.IntegerField(
        allow_null=True, help_text="the turn this one is a new version of (regenerated or edited), if any"
    )
    at = serializers.DateTimeField(allow_null=True, help_text="when the message was sent")


class AssistantItemSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["assistant"])
    content = serializers.CharField()
    turn_id = serializers.IntegerField()
    model = serializers.CharField(help_text="the model's label, as the page shows it live")
    tier = serializers.ChoiceField(choices=Tier.choices, allow_blank=True)
    at = serializers.DateTimeField(allow_null=True, help_text="when the answer ended")


class StepItemSerializer(serializers.Serializer):
    """One tool call, as its `tool.started` / `tool.finished` events told it."""

    role = serializers.ChoiceField(choices=["step"])
    turn_id = serializers.IntegerField()
    call_id = serializers.CharField()
    tool = serializers.CharField(required=False)
    resource = serializers.CharField(required=False, help_text="the database or collection the call named")
    sql = serializers.CharField(required=False, help_text="the SQL as the model wrote it (tokens included)")
    query = serializers.CharField(required=False, help_text="the search as the model wrote it")
    input_truncated = serializers.BooleanField(required=False)
    outcome = serializers.ChoiceField(choices=["success", "denied", "failed"], required=False)
    row_count = serializers.IntegerField(required=False, allow_null=True)
    duration_ms = serializers.IntegerField(required=False)
    reason = serializers.CharField(required=False, help_text="why it was refused or failed, in the turn's language")
    result = serializers.CharField(required=False, help_text="the start of the result the model read (masked)")
    result_truncated = serializers.BooleanField(required=False)
    finished = serializers.BooleanField(required=False)
    approval = serializers.DictField(
        required=False,
        help_text="a call that needed approval: what was asked (`approval_id`, `tool`, `connector`, `arguments`, "
        "`expires_at`) and the `decision` (approved, always_allowed, denied, expired, auto_approved, auto_blocked)",
    )


class StatusItemSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["status"])
    turn_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["rejected", "failed", "cancelled"])
    content = serializers.CharField(help_text="why the turn ended without an answer", allow_blank=True)


# The messages API's answer: a list of these, told apart by `role`.
TimelineItems = PolymorphicProxySerializer(
    component_name="TimelineItem",
    serializers={
        "user": UserItemSerializer,
        "assistant": AssistantItemSerializer,
        "step": StepItemSerializer,
        "status": StatusItemSerializer,
    },
    resource_type_field_name="role",
    many=True,
)


class RevealedSerializer(serializers.Serializer):
    token = serializers.CharField()
    original = serializers.CharField()


class DetailSerializer(serializers.Serializer):
    detail = serializers.CharField()
