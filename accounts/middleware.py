"""A signed-in user's stored language wins over the browser's."""

from __future__ import annotations

from django.conf import settings
from django.utils import translation

from accounts.language import user_language


class UserLanguageMiddleware:
    """After AuthenticationMiddleware (and LocaleMiddleware, which has already
    applied the browser's cookie or Accept-Language): the language the user
    chose with the switcher applies on every browser they sign in from. The
    language cookie is set to it as well, so the websocket, which reads the
    cookie (chat.consumers), answers in the same language as the page."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        language = user_language(user=user) if user is not None and user.is_authenticated else ""
        if language:
            translation.activate(language)
            request.LANGUAGE_CODE = language
        response = self.get_response(request)
        if language and request.COOKIES.get(settings.LANGUAGE_COOKIE_NAME) != language:
            response.set_cookie(
                settings.LANGUAGE_COOKIE_NAME,
                language,
                max_age=settings.LANGUAGE_COOKIE_AGE,
                path=settings.LANGUAGE_COOKIE_PATH,
                domain=settings.LANGUAGE_COOKIE_DOMAIN,
                secure=settings.LANGUAGE_COOKIE_SECURE,
                httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
                samesite=settings.LANGUAGE_COOKIE_SAMESITE,
            )
        return response
