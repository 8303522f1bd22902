"""The language switcher and the personal API token endpoints."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from django.views.i18n import set_language as django_set_language
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.language import supported_language, user_language_set
from accounts.models import ApiToken, TokenScope
from accounts.services import api_token_create, api_token_revoke


def set_language(request):
    """Django's switcher (the cookie, the redirect), and for a signed-in user
    the choice is stored, so every browser and the worker's turns use it."""
    response = django_set_language(request)
    chosen = supported_language(request.POST.get("language")) if request.method == "POST" else None
    if chosen in dict(settings.LANGUAGES) and request.user.is_authenticated:
        user_language_set(user=request.user, language=chosen)
    return response


class ApiTokenSerializer(serializers.ModelSerializer):
    active = serializers.BooleanField(read_only=True)
    scopes = serializers.ListField(child=serializers.ChoiceField(choices=TokenScope.choices), read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
            "active",
        ]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=TokenScope.choices),
        required=False,
        default=list,
        help_text="`agent`: may start turns and answer approvals (the agent API and /v1/chat/completions)",
    )


class ApiTokenCreatedSerializer(ApiTokenSerializer):
    key = serializers.CharField(read_only=True, help_text="The token itself. Shown only in this response.")

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "key"]
        read_only_fields = fields


# Managing tokens needs the browser session: a leaked token must not be able
# to mint more tokens or outlive its own revocation.
@extend_schema(
    methods=["GET"], responses=ApiTokenSerializer(many=True), summary="Your personal API tokens", tags=["tokens"]
)
@extend_schema(
    methods=["POST"],
    request=ApiTokenCreateSerializer,
    responses={201: ApiTokenCreatedSerializer},
    summary="Create a personal API token (its key is shown once)",
    tags=["tokens"],
)
@api_view(["GET", "POST"])
@authentication_classes([SessionAuthentication])
def api_tokens(request: Request) -> Response:
    if request.method == "POST":
        serializer = ApiTokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            token, key = api_token_create(
                user=request.user,
                name=serializer.validated_data["name"],
                expires_at=serializer.validated_data["expires_at"],
                scopes=serializer.validated_data["scopes"],
                actor=request.user,
                request=request._request,
            )
        except ValueError as exc:
            raise serializers.ValidationError({"detail": str(exc)})
        data = ApiTokenSerializer(token).data | {"key": key}
        return Response(data, status=status.HTTP_201_CREATED)
    tokens = ApiToken.objects.filter(user=request.user)
    return Response(ApiTokenSerializer(tokens, many=True).data)


@extend_schema(methods=["DELETE"], responses={204: None}, summary="Revoke one of your API tokens", tags=["tokens"])
@api_view(["DELETE"])
@authentication_classes([SessionAuthentication])
def api_token_detail(request: Request, token_id: int) -> Response:
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    api_token_revoke(token=token, actor=request.user, request=request._request)
    return Response(status=status.HTTP_204_NO_CONTENT)


def server_error(request):
    """The 500 page in the product's look, with the switcher: rendered with
    the request (its language, the switcher's CSRF token), unlike Django's
    default. If even that fails, a plain sentence."""
    from django.http import HttpResponseServerError
    from django.template import loader
    from django.utils.translation import gettext

    try:
        body = loader.render_to_string("500.html", request=request)
    except Exception:  # the page must not fail in turn
        body = gettext("Something went wrong")
    return HttpResponseServerError(body)


def favicon(request):
    """Browsers ask /favicon.ico whatever the page says: the product's icon."""
    from django.shortcuts import redirect
    from django.templatetags.static import static

    return redirect(static("accounts/favicon.svg"), permanent=True)
