"""Approvals over HTTP: answer a pending request, list and revoke the
tools one always allows (JSON API and a small page). Thin: chat.approvals
does the work and writes the audit events."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.authentication import TokensNeedAgentScope
from chat import serializers as api
from chat.approvals import DECISIONS, ApprovalError, always_allow_revoke, tool_approval_decide
from chat.models import AlwaysAllow
from owlai.times import api_time


class DecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=sorted(DECISIONS))


class DecidedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField(help_text="approved, always_allowed or denied")


class AlwaysAllowedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    connector = serializers.CharField()
    tool = serializers.CharField()
    created_at = serializers.DateTimeField()


@extend_schema(
    request=DecisionSerializer,
    responses={200: DecidedSerializer, 409: api.DetailSerializer},
    summary="Answer a pending approval request of a connector call (the turn then goes on; audited)",
)
@api_view(["POST"])
@permission_classes([IsAuthenticated, TokensNeedAgentScope])
def approval_decide(request: Request, approval_id) -> Response:
    """{"decision": "approve" | "always_allow" | "deny"} on a pending request
    of one of the user's conversations; the turn then goes on."""
    serializer = DecisionSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    try:
        approval = tool_approval_decide(
            approval_id=approval_id,
            decision=serializer.validated_data["decision"],
            actor=request.user,
            request=request,
        )
    except ApprovalError as refused:
        return Response({"detail": str(refused)}, status=status.HTTP_409_CONFLICT)
    return Response({"id": str(approval.pk), "status": approval.status})


def _active(user):
    return (
        AlwaysAllow.objects.filter(user=user, revoked_at__isnull=True)
        .select_related("connector_tool__connector")
        .order_by("connector_tool__connector__name", "connector_tool__name")
    )


def _grant_json(grant: AlwaysAllow) -> dict:
    tool = grant.connector_tool
    return {
        "id": grant.pk,
        "connector": tool.connector.name,
        "tool": tool.name,
        "created_at": api_time(grant.created_at),
    }


@extend_schema(
    responses={200: AlwaysAllowedSerializer(many=True)},
    summary="The connector tools this user always allows (calls run without asking)",
)
@api_view(["GET"])
def always_allowed(request: Request) -> Response:
    """The connector tools this user always allows (not revoked)."""
    return Response([_grant_json(grant) for grant in _active(request.user)])


@extend_schema(
    responses={204: None}, summary="Revoke an always-allowed tool: its calls are asked about again (audited)"
)
@api_view(["DELETE"])
def always_allowed_revoke(request: Request, grant_id: int) -> Response:
    grant = get_object_or_404(AlwaysAllow, pk=grant_id, user=request.user, revoked_at__isnull=True)
    always_allow_revoke(grant=grant, actor=request.user, request=request)
    return Response(status=status.HTTP_204_NO_CONTENT)


@login_required
def always_allowed_page(request):
    return render(request, "chat/always_allowed.html", {"grants": _active(request.user)})


@login_required
@require_POST
def always_allowed_page_revoke(request, grant_id: int):
    grant = get_object_or_404(AlwaysAllow, pk=grant_id, user=request.user, revoked_at__isnull=True)
    try:
        always_allow_revoke(grant=grant, actor=request.user, request=request)
    except ApprovalError:
        pass  # only the user's own grants reach here
    return redirect("chat:always-allowed-page")
