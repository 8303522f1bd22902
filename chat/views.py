"""Chat page and the small JSON API it uses. Thin: services do the work."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from chat import serializers as api
from chat.export import EXPORT_FORMATS, conversation_export_json, conversation_export_markdown
from chat.models import Conversation
from chat.reveal import may_reveal, token_reveal
from chat.services import (
    TITLE_MAX_CHARS,
    ConversationRenameRefused,
    conversation_create,
    conversation_rename,
    models_for_conversation,
)
from chat.services import conversation_delete as conversation_delete_service
from chat.turns.model_choice import mention_tier
from chat.turns.timeline import conversation_timeline
from governance.models import Feature, FeatureDefault, LlmModel, PiiKindChoice, Tier
from governance.pii.kinds import TOKEN_LABELS, PiiKind
from governance.visibility import visible_resources
from owlai.install_config import ProviderKind
from owlai.times import api_time
from owlai.tool_names import ToolName

# The page runs only its own static scripts: model output that got past the
# sanitiser still could not run code, load a remote image (a way to send
# data out without a click) or be framed.
CHAT_PAGE_CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def _page_text() -> dict:
    """The page script's strings, in the request's language."""
    return {
        "send": _("Send"),
        "sendHint": _("Send (Enter); Shift+Enter for a new line"),
        "stop": _("Stop"),
        "stopHint": _("Stop this answer: the turn ends before its next model or tool call"),
        "stopping": _("Stopping…"),
        "stopped": _("Stopped. What ran before the stop is kept and audited."),
        "working": _("Working…"),
        "running": _("Running…"),
        "rejected": _("Turn rejected: %(reason)s"),
        "failed": _("The turn failed."),
        "emptyTitle": _("What would you like to know?"),
        "emptyHint": _("Ask a question, or write SQL. Mention a database with @name."),
        "tools": {ToolName.RUN_SQL: _("Database query"), ToolName.SEARCH_DOCUMENTS: _("Document search")},
        "outcomes": {"success": _("Succeeded"), "denied": _("Refused"), "failed": _("Failed")},
        # Both forms, picked by count in the page (Korean has one, English two).
        "rows": {
            "one": ngettext("%(count)s row", "%(count)s rows", 1),
            "other": ngettext("%(count)s row", "%(count)s rows", 2),
        },
        "duration": _("%(ms)s ms"),
        "sql": _("SQL as the model wrote it"),
        "query": _("Search as the model wrote it"),
        "reason": _("Reason"),
        "result": _("Result the model read"),
        "resultTruncated": _("Only the start of the result is shown."),
        "revealHint": _("Masked %(kind)s. Click to reveal the original (recorded in the audit log)."),
        "revealedHint": _("Revealed %(token)s (recorded in the audit log)"),
        "maskedHint": _(
            "Masked %(kind)s. Only people whose role may view personal data can reveal it; "
            "ask an administrator to grant you such a role."
        ),
        "revealRefused": _("You may not reveal this value."),
        "sessionExpired": _("Your session has expired; please sign in again."),
        "networkError": _("The request failed; please try again."),
        "notConnected": _("Not connected; reconnecting…"),
        "gone": _("This conversation is no longer available."),
        "untitled": _("New conversation"),
        "rename": _("Rename"),
        "delete": _("Delete"),
        "tierNotice": {
            "private": _("Private tier: data stays on-prem"),
            "public": _("Public tier: data leaves the network"),
        },
        "tierPinned": _("A conversation keeps the tier of its first answer."),
        "copy": _("Copy"),
        "copied": _("Copied"),
        "copyFailed": _("Could not copy"),
        "copyCode": _("Copy code"),
        "edit": _("Edit"),
        "editSend": _("Save and send"),
        "cancel": _("Cancel"),
        "regenerate": _("Regenerate"),
        "earlierVersion": _("Earlier version"),
        "noMatches": _("No conversation matches."),
        "groups": {
            "today": _("Today"),
            "yesterday": _("Yesterday"),
            "week": _("Previous 7 days"),
            "month": _("Previous 30 days"),
        },
        "themes": {"system": _("Theme: system"), "light": _("Theme: light"), "dark": _("Theme: dark")},
        "approval": {
            "title": _("Approve this call?"),
            "explain": _("%(tool)s of %(connector)s wants to run with these arguments:"),
            "approve": _("Approve"),
            "alwaysAllow": _("Always allow"),
            "alwaysAllowHint": _("Approve, and run this tool without asking from now on (revocable)"),
            "deny": _("Deny"),
            "expiresIn": _("Expires in %(time)s"),
            "expiredWaiting": _("Time is up; the call will not run."),
            "sending": _("Sending your answer…"),
            "manage": _("Always-allowed tools"),
            "decisions": {
                "approved": _("Approved"),
                "always_allowed": _("Always allowed"),
                "denied": _("Denied"),
                "expired": _("Expired: nobody answered in time"),
                "auto_approved": _("Approved automatically (always allowed)"),
                "auto_blocked": _("Blocked automatically (denied before)"),
            },
        },
    }


@login_required
def chat_page(request):
    response = render(
        request,
        "chat/page.html",
        {
            "config": {
                "text": _page_text(),
                "mayReveal": may_reveal(user=request.user),
                # The page finds tokens ([전화번호-3]) by these labels and
                # names their kind in the user's language.
                "tokenKinds": {TOKEN_LABELS[PiiKind(value)]: str(name) for value, name in PiiKindChoice.choices},
                "tierLabels": {value: str(label) for value, label in Tier.choices},
                "loginUrl": reverse("login"),
                "alwaysAllowedUrl": reverse("chat:always-allowed-page"),
            },
        },
    )
    response["Content-Security-Policy"] = CHAT_PAGE_CSP
    return response


def _model_json(model: LlmModel, default_id: int | None = None) -> dict:
    return {
        "id": model.pk,
        "name": model.name,
        "label": str(model),
        "provider": model.provider.name,
        "tier": model.provider.tier,
        "tier_label": str(Tier(model.provider.tier).label) if model.provider.tier in Tier.values else "",
        "offline_demo": model.provider.kind == ProviderKind.OFFLINE_DEMO,
        # The chat default: preselected for a new conversation.
        "is_default": model.pk == default_id,
    }


def _default_chat_model_id() -> int | None:
    default = FeatureDefault.objects.filter(feature=Feature.CHAT).first()
    return default.model_id if default else None


def _conversation_json(conversation: Conversation) -> dict:
    return {
        "id": str(conversation.pk),
        "title": conversation.title,
        "tier": conversation.tier,
        "model": conversation.model_id,
        "updated_at": api_time(conversation.updated_at),
    }


class ConversationCreateSerializer(serializers.Serializer):
    title = serializers.CharField(max_length=TITLE_MAX_CHARS, required=False, allow_blank=True, default="")


class ConversationRenameSerializer(serializers.Serializer):
    title = serializers.CharField(max_length=TITLE_MAX_CHARS, trim_whitespace=True)


@extend_schema(
    methods=["GET"],
    parameters=[OpenApiParameter("q", str, description="only conversations whose title or messages contain this")],
    responses=api.ConversationSerializer(many=True),
    summary="Your conversations",
)
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
    items = Conversation.objects.live().filter(owner=request.user)
    query = " ".join(request.query_params.get("q", "").split())[:200]
    if query:
        # The stored text is masked: a search finds tokens, never originals.
        items = items.filter(
            Q(title__icontains=query) | Q(messages__role__in=["user", "assistant"], messages__content__icontains=query)
        ).distinct()
    return Response([_conversation_json(c) for c in items.order_by("-updated_at")[:100]])


@extend_schema(responses=api.ModelSerializer(many=True), summary="Models a new conversation may use")
@api_view(["GET"])
def models_for_new_conversation(request: Request) -> Response:
    default_id = _default_chat_model_id()
    return Response([_model_json(m, default_id) for m in models_for_conversation(conversation=None)])


@extend_schema(
    responses=api.ModelSerializer(many=True), summary="Models this conversation may use (its tier, once pinned)"
)
@api_view(["GET"])
def conversation_models(request: Request, conversation_id) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    default_id = _default_chat_model_id()
    return Response([_model_json(m, default_id) for m in models_for_conversation(conversation=conversation)])


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


@extend_schema(methods=["GET"], responses=api.ConversationSerializer, summary="A conversation")
@extend_schema(
    methods=["PATCH"],
    request=ConversationRenameSerializer,
    responses={200: api.ConversationSerializer, 400: api.DetailSerializer},
    summary="Rename a conversation",
)
@extend_schema(methods=["DELETE"], responses={204: None}, summary="Delete a conversation")
@api_view(["GET", "PATCH", "DELETE"])
def conversation_detail(request: Request, conversation_id) -> Response:
    """GET: the conversation. PATCH {"title"}: rename it. DELETE: hides it and
    deletes its token vault at once; the rest is purged 30 days later
    (chat.services.conversation_delete). The audit rows of what it touched
    stay (they hold no foreign key to it)."""
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    if request.method == "DELETE":
        conversation_delete_service(conversation=conversation)
        return Response(status=status.HTTP_204_NO_CONTENT)
    if request.method == "PATCH":
        serializer = ConversationRenameSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            conversation = conversation_rename(
                conversation=conversation, title=serializer.validated_data["title"], actor=request.user
            )
        except ConversationRenameRefused as refused:
            return Response({"detail": str(refused)}, status=status.HTTP_400_BAD_REQUEST)
    return Response(_conversation_json(conversation))


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


@extend_schema(responses=api.TimelineItems, summary="The conversation as its owner sees it")
@api_view(["GET"])
def conversation_messages(request: Request, conversation_id) -> Response:
    """What the user sees, in order: their messages (`user`), the assistant's
    texts (`assistant`), each tool call as a `step` (tool, resource, SQL or
    query, outcome, rows, duration, reason, result) and, for turns that ended
    without an answer, their `status` (chat.turns.timeline.conversation_timeline)."""
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    return Response(conversation_timeline(conversation=conversation))


@extend_schema(
    parameters=[OpenApiParameter("as", str, enum=list(EXPORT_FORMATS), description="markdown (default) or json")],
    responses={(200, "text/markdown"): str, (200, "application/json"): dict},
    summary="Download the conversation (masked, as stored)",
)
@api_view(["GET"])
def conversation_export(request: Request, conversation_id) -> HttpResponse:
    """The conversation as a file (chat.export): personal data stays masked."""
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    # `as`, not `format`: DRF reads `format` for its own renderers.
    kind = request.query_params.get("as", "markdown")
    if kind not in EXPORT_FORMATS:
        return Response({"detail": _("Unknown export format.")}, status=status.HTTP_400_BAD_REQUEST)
    stem = re.sub(r"[^\w-]+", "-", conversation.title, flags=re.UNICODE).strip("-")[:60] or "conversation"
    if kind == "json":
        body = json.dumps(conversation_export_json(conversation=conversation), ensure_ascii=False, indent=2)
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
        name = f"{stem}.json"
    else:
        response = HttpResponse(
            conversation_export_markdown(conversation=conversation), content_type="text/markdown; charset=utf-8"
        )
        name = f"{stem}.md"
    # RFC 6266: an ASCII fallback and the UTF-8 name (titles are often Korean).
    response["Content-Disposition"] = (
        f"attachment; filename=\"conversation.{name.rsplit('.', 1)[1]}\"; filename*=UTF-8''{quote(name)}"
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response
