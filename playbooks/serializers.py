"""What the playbooks API takes and answers (its OpenAPI schema)."""

from __future__ import annotations

from rest_framework import serializers

# The chat API's: one "Detail" component in the schema.
from chat.serializers import DetailSerializer  # noqa: F401
from governance.models import Tier
from playbooks.models import RunStatus, Trigger


class PlaybookSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    owner = serializers.CharField(help_text="the owner's username")
    tier = serializers.ChoiceField(choices=Tier.choices)
    model = serializers.IntegerField(help_text="the model id (always of the playbook's tier)")
    parameters = serializers.JSONField(help_text="[{name, label, kind: text|number|date|choice, required, choices}]")
    nodes = serializers.JSONField(help_text="[{key, kind: agent, prompt} | {key, kind: tool, tool, arguments}]")
    allow_overlap = serializers.BooleanField()
    editable = serializers.BooleanField(help_text="whether the requester owns it (only the owner edits)")


class PlaybookWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    model = serializers.IntegerField()
    parameters = serializers.JSONField(required=False, default=list)
    nodes = serializers.JSONField()
    allow_overlap = serializers.BooleanField(required=False, default=False)


class PlaybookPatchSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    model = serializers.IntegerField(required=False)
    parameters = serializers.JSONField(required=False)
    nodes = serializers.JSONField(required=False)
    allow_overlap = serializers.BooleanField(required=False)


class FromTurnSerializer(serializers.Serializer):
    turn_id = serializers.IntegerField()
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class RunStartSerializer(serializers.Serializer):
    parameters = serializers.JSONField(required=False, default=dict)


class NodeRunSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    key = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.CharField()
    input = serializers.CharField(help_text="the rendered prompt or arguments (masked)")
    output = serializers.CharField(help_text="what the step produced as the model saw it (masked)")
    reason = serializers.CharField(allow_blank=True)


class RunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    playbook = serializers.IntegerField()
    runs_as = serializers.CharField(help_text="the username the run acts for")
    trigger = serializers.ChoiceField(choices=Trigger.choices)
    status = serializers.ChoiceField(choices=RunStatus.choices)
    reason = serializers.CharField(allow_blank=True)
    parameters = serializers.JSONField(help_text="as stored: personal data as tokens")
    conversation_id = serializers.UUIDField(allow_null=True, help_text="the run's own conversation (its approvals)")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    nodes = NodeRunSerializer(many=True)


class NoticeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    run = serializers.IntegerField()
    playbook = serializers.CharField()
    kind = serializers.ChoiceField(choices=["waiting_approval", "failed"])
    created_at = serializers.DateTimeField()
    read = serializers.BooleanField()


class NoticesSerializer(serializers.Serializer):
    unread = serializers.IntegerField(help_text="the badge: notices not yet read")
    notices = NoticeSerializer(many=True)
