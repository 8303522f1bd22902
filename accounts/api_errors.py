"""The API's errors in the reader's language, with the true reason.

* DRF ships its Korean as `ko_KR`, which Django's `ko` never loads: its
  messages ("Not found.", "This field is required.") came in English in a
  Korean session. They are in our catalogue (marked below) and read in the
  request's language like every other text.
* `get_object_or_404` raises Django's Http404 with an English sentence
  naming the model ("No Conversation matches the given query."): the API
  answers DRF's own, translated "Not found." instead (the model's name is
  no business of the client's either).
* A request with an API token to an endpoint that takes only the browser
  session (managing tokens) was told it sent no credentials; it is told the
  endpoint does not accept tokens.
"""

from __future__ import annotations

from django.http import Http404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.views import exception_handler

from accounts.authentication import ApiTokenAuthentication


def api_exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, exceptions.NotAuthenticated) and _token_not_accepted(context.get("request")):
        exc = exceptions.PermissionDenied(_("This endpoint does not accept API tokens: sign in with the browser."))
    return exception_handler(exc, context)


def _token_not_accepted(request) -> bool:
    """Did the request send a token to a view none of whose authenticators
    reads tokens?"""
    if request is None:
        return False
    parts = get_authorization_header(request).split()
    if not parts or parts[0].lower() != ApiTokenAuthentication.keyword:
        return False
    return not any(isinstance(a, ApiTokenAuthentication) for a in getattr(request, "authenticators", ()))


# DRF's messages our clients meet, so that makemessages keeps their
# translations in our catalogue (nothing reads this tuple).
DRF_STRINGS = (
    gettext_noop("A server error occurred."),
    gettext_noop("Invalid input."),
    gettext_noop("Malformed request."),
    gettext_noop("Incorrect authentication credentials."),
    gettext_noop("Authentication credentials were not provided."),
    gettext_noop("You do not have permission to perform this action."),
    gettext_noop("Not found."),
    gettext_noop('Method "{method}" not allowed.'),
    gettext_noop("Could not satisfy the request Accept header."),
    gettext_noop('Unsupported media type "{media_type}" in request.'),
    gettext_noop("Request was throttled."),
    gettext_noop("This field is required."),
    gettext_noop("This field may not be null."),
    gettext_noop("This field may not be blank."),
    gettext_noop("Not a valid string."),
    gettext_noop("A valid integer is required."),
    gettext_noop("Must be a valid boolean."),
    gettext_noop("Ensure this field has no more than {max_length} characters."),
    gettext_noop("Datetime has wrong format. Use one of these formats instead: {format}."),
    gettext_noop("Invalid data. Expected a dictionary, but got {datatype}."),
)
