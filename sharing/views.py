"""Share links over HTTP: the owner's API and pages, the viewer's page and
API. Thin: sharing.services and sharing.fork do the work and the audit."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from chat import serializers as chat_api
from chat.models import Conversation
from chat.reveal import REFUSAL_MESSAGES, may_reveal
from chat.views import CHAT_PAGE_CSP, RevealSerializer, _page_text
from governance.models import PiiKindChoice, Tier
from governance.pii.kinds import TOKEN_LABELS, PiiKind
from owlai.times import api_time
from sharing import serializers as api
from sharing.fork import share_link_fork
from sharing.models import ShareLink
from sharing.services import (
    EXPIRY_DAYS,
    ShareLinkUnavailable,
    ShareRefused,
    share_link_create,
    share_link_open,
    share_link_revoke,
    shared_items,
    shared_token_reveal,
)
from sharing.snapshot import shared_title


def _status(link: ShareLink) -> str:
    if link.revoked_at is not None:
        return "revoked"
    if link.conversation.deleted_at is not None:
        return "deleted"
    return "open" if link.expires_at > timezone.now() else "expired"


def _link_json(link: ShareLink) -> dict:
    return {
        "id": str(link.pk),
        "url": reverse("sharing:shared-page", args=[link.key]),
        "conversation": str(link.conversation_id),
        "title": link.conversation.title,
        "up_to_turn": link.up_to_turn_id,
        "created_at": api_time(link.created_at),
        "expires_at": api_time(link.expires_at),
        "revoked_at": api_time(link.revoked_at),
        "status": _status(link),
    }


def _own_links(user):
    return ShareLink.objects.filter(owner=user).select_related("conversation").order_by("-created_at")


@extend_schema(methods=["GET"], responses=api.ShareLinkSerializer(many=True), summary="Share links of a conversation")
@extend_schema(
    methods=["POST"],
    request=api.ShareLinkCreateSerializer,
    responses={201: api.ShareLinkSerializer, 400: chat_api.DetailSerializer},
    summary="Share a conversation up to a turn (a read-only link for signed-in members; audited)",
)
@api_view(["GET", "POST"])
def conversation_share_links(request: Request, conversation_id) -> Response:
    conversation = get_object_or_404(Conversation.objects.live(), pk=conversation_id, owner=request.user)
    if request.method == "GET":
        return Response([_link_json(link) for link in _own_links(request.user).filter(conversation=conversation)])
    serializer = api.ShareLinkCreateSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    try:
        link = share_link_create(
            conversation=conversation,
            actor=request.user,
            up_to_turn_id=serializer.validated_data.get("up_to_turn"),
            expires_in_days=int(serializer.validated_data["expires_in_days"]),
            request=request,
        )
    except ShareRefused as refused:
        return Response({"detail": str(refused)}, status=status.HTTP_400_BAD_REQUEST)
    return Response(_link_json(link), status=status.HTTP_201_CREATED)


@extend_schema(responses=api.ShareLinkSerializer(many=True), summary="Your share links")
@api_view(["GET"])
def share_links(request: Request) -> Response:
    return Response([_link_json(link) for link in _own_links(request.user)[:200]])


@extend_schema(responses={204: None}, summary="Revoke one of your share links (audited)")
@api_view(["DELETE"])
def share_link_detail(request: Request, link_id) -> Response:
    link = get_object_or_404(ShareLink, pk=link_id, owner=request.user)
    share_link_revoke(link=link, actor=request.user, request=request)
    return Response(status=status.HTTP_204_NO_CONTENT)


def _open_or_404(key: str, user) -> ShareLink:
    try:
        return share_link_open(key=key, viewer=user)
    except ShareLinkUnavailable:
        raise Http404(_("This link does not exist, was revoked or has expired.")) from None


def _shared_json(link: ShareLink, viewer) -> dict:
    permitted = may_reveal(user=viewer)
    return {
        "title": shared_title(conversation=link.conversation),
        "owner": link.owner.get_username(),
        "is_owner": link.owner_id == viewer.pk,
        "tier": link.conversation.tier,
        "expires_at": api_time(link.expires_at),
        "may_reveal": permitted,
        "reveal_refusal": "" if permitted else str(REFUSAL_MESSAGES["not permitted"]),
        "items": shared_items(link=link),
    }


@extend_schema(responses=api.SharedConversationSerializer, summary="A conversation shared with you (read-only)")
@api_view(["GET"])
def shared_conversation(request: Request, key: str) -> Response:
    return Response(_shared_json(_open_or_404(key, request.user), request.user))


@extend_schema(
    request=RevealSerializer,
    responses={200: chat_api.RevealedSerializer, 403: chat_api.DetailSerializer},
    summary="Reveal a token of a shared conversation under your own permission (audited with the owner)",
)
@api_view(["POST"])
def shared_reveal(request: Request, key: str) -> Response:
    link = _open_or_404(key, request.user)
    serializer = RevealSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    token = serializer.validated_data["token"]
    result = shared_token_reveal(link=link, token=token, actor=request.user, request=request)
    if not result.allowed:
        return Response({"detail": result.message}, status=status.HTTP_403_FORBIDDEN)
    return Response({"token": token, "original": result.original})


@extend_schema(
    request=None,
    responses={201: api.ForkedSerializer},
    summary="Continue a shared conversation in a new conversation of your own (same tier; audited)",
)
@api_view(["POST"])
def shared_fork(request: Request, key: str) -> Response:
    _open_or_404(key, request.user)
    fork = share_link_fork(key=key, actor=request.user, request=request)
    return Response(
        {"conversation": str(fork.pk), "url": reverse("chat:page") + "#" + str(fork.pk)},
        status=status.HTTP_201_CREATED,
    )


# --- pages ---------------------------------------------------------------------


def _page_config(request, key: str) -> dict:
    return {
        "text": {
            **_page_text(),
            "sharedBy": _("Shared by %(owner)s · read-only"),
            "expires": _("Link open until %(time)s"),
            "fork": _("Continue in a new conversation"),
            "forkHint": _("A copy for you on the same tier. The tokens keep their meaning; originals stay masked."),
            "revealNotYours": _(
                "Revealing uses your own permission, not the permission of the person who shared this."
            ),
        },
        "apiUrl": reverse("sharing:shared-api", args=[key]),
        "revealUrl": reverse("sharing:shared-reveal", args=[key]),
        "forkUrl": reverse("sharing:shared-fork", args=[key]),
        "loginUrl": reverse("login"),
        "mayReveal": may_reveal(user=request.user),
        "tokenKinds": {TOKEN_LABELS[PiiKind(value)]: str(name) for value, name in PiiKindChoice.choices},
        "tierLabels": {value: str(label) for value, label in Tier.choices},
    }


@login_required
def shared_page(request, key: str):
    try:
        share_link_open(key=key, viewer=request.user)
    except ShareLinkUnavailable:
        response = render(request, "sharing/gone.html", status=404)
    else:
        response = render(request, "sharing/shared.html", {"config": _page_config(request, key)})
    response["Content-Security-Policy"] = CHAT_PAGE_CSP
    return response


@login_required
def share_links_page(request):
    links = [(link, _status(link)) for link in _own_links(request.user)[:200]]
    response = render(request, "sharing/links.html", {"links": links, "expiry_days": EXPIRY_DAYS})
    response["Content-Security-Policy"] = CHAT_PAGE_CSP
    return response


@login_required
@require_POST
def share_links_page_revoke(request, link_id):
    link = get_object_or_404(ShareLink, pk=link_id, owner=request.user)
    share_link_revoke(link=link, actor=request.user, request=request)
    return redirect("sharing:links-page")


@login_required
def chat_page_text(request):
    """The chat page's share dialog: its words in the request's language
    (the page's CSP forbids inline scripts, so its script asks for them)."""
    return JsonResponse(
        {
            "text": {
                "share": _("Share"),
                "shareHint": _("Share this conversation as a read-only link"),
                "title": _("Share this conversation"),
                "explain": _(
                    "Signed-in members who have the link see the conversation up to the message you choose, "
                    "with personal data masked. Each of them reveals values only under their own permission."
                ),
                "upTo": _("Up to"),
                "expiresIn": _("Open for"),
                "days": {str(days): ngettext("%(n)d day", "%(n)d days", days) % {"n": days} for days in EXPIRY_DAYS},
                "create": _("Create link"),
                "copy": _("Copy link"),
                "copied": _("Copied"),
                "close": _("Close"),
                "manage": _("My shared links"),
                "nothing": _("There is nothing to share yet: a link shows answered messages."),
            },
            "expiryDays": list(EXPIRY_DAYS),
            "linksPageUrl": reverse("sharing:links-page"),
        }
    )
