"""What the agent API takes and answers, for its OpenAPI schema."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers

from chat.approval_views import DecidedSerializer, DecisionSerializer  # noqa: F401 (the same answers as chat's)
from chat.serializers import DetailSerializer  # noqa: F401


class TurnStartSerializer(serializers.Serializer):
    text = serializers.CharField(max_length=settings.OWLAI_MAX_MESSAGE_CHARS, trim_whitespace=False)
    conversation_id = serializers.UUIDField(
        required=False, allow_null=True, default=None, help_text="one of your conversations; omit for a new one"
    )
    model = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=300,
        help_text="a model id, provider/name or unique name (GET /api/models/); default: the conversation's, "
        "else the chat default. Once a conversation's tier is pinned only models of that tier are accepted.",
    )


class TurnStartedSerializer(serializers.Serializer):
    turn_id = serializers.IntegerField()
    conversation_id = serializers.UUIDField()
    status = serializers.CharField(
        help_text="the turn's: queued, running, waiting_approval, completed, rejected, failed, cancelled"
    )
    events_url = serializers.CharField(help_text="poll: the turn's events after a sequence number")
    stream_url = serializers.CharField(help_text="the turn's events as Server-Sent Events")


class TurnEventSerializer(serializers.Serializer):
    """A turn event exactly as the websocket sends it: `type` (README
    "Websocket protocol": turn.accepted, tool.started, message.delta,
    approval.requested, turn.finished, …), `turn_id`, `seq` and the fields of
    that type."""

    type = serializers.CharField()
    turn_id = serializers.IntegerField()
    seq = serializers.IntegerField()


class TurnEventsSerializer(serializers.Serializer):
    turn_id = serializers.IntegerField()
    conversation_id = serializers.UUIDField()
    status = serializers.CharField(
        help_text="the turn's: queued, running, waiting_approval, completed, rejected, failed, cancelled"
    )
    events = TurnEventSerializer(many=True)
    last_seq = serializers.IntegerField(help_text="pass as after_seq to get only what comes next")
    finished = serializers.BooleanField(help_text="turn.finished is among the events: nothing more comes")


class CancelledSerializer(serializers.Serializer):
    turn_id = serializers.IntegerField()
    status = serializers.CharField(help_text="what Stop did (chat.turns.cancel)")
