"""One language per user: Korean by default, or English.

Order, everywhere (pages, websocket, the worker's turn): the language the
user chose with the switcher (stored, `UserPreference`), else what the
browser asks for (the language cookie, then Accept-Language), else the
default (settings.LANGUAGE_CODE). The worker has no browser: a turn keeps the
language resolved when it started (chat.services.turn_start).
"""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.utils import translation
from django.utils.translation.trans_real import parse_accept_lang_header

from accounts.models import UserPreference
from owlai import prepared


def supported_language(code: str | None) -> str | None:
    """The supported language for `code` ("en-US" -> "en"), or None."""
    if not code or not isinstance(code, str):
        return None
    try:
        return translation.get_supported_language_variant(code)
    except LookupError:
        return None


def browser_language(*, cookie: str | None, accept_language: str | None) -> str | None:
    """What a browser asks for: the switcher's cookie, else its Accept-Language."""
    chosen = supported_language(cookie)
    if chosen:
        return chosen
    for code, _quality in parse_accept_lang_header(accept_language or ""):
        if code == "*":
            break
        found = supported_language(code)
        if found:
            return found
    return None


def user_language(*, user) -> str:
    """The language the user chose, or "" when they never chose one."""
    if user is None or not getattr(user, "is_authenticated", False):
        return ""
    rows = prepared.fetchall(_preference_sql(), [user.pk])
    return supported_language(rows[0][0] if rows else None) or ""


@cache
def _preference_sql() -> str:
    # Prepared: every turn start asks.
    return f"SELECT language FROM {UserPreference._meta.db_table} WHERE user_id = %s"


def language_from(*, stored: str | None, fallback: str | None) -> str:
    """The language to use for a user now: their `stored` choice (as
    `user_language` reads it, or a statement of the caller's with
    `stored_language_sql`), else `fallback` (what their browser asked for),
    else the default."""
    return supported_language(stored) or supported_language(fallback) or settings.LANGUAGE_CODE


@cache
def stored_language_sql() -> str:
    """A scalar subquery (one parameter: the user's id) for the user's stored
    choice, so that a hot path reads it in a statement it runs anyway."""
    return f"({_preference_sql()})"


def user_language_set(*, user, language: str) -> None:
    """Store the user's choice (the switcher). Refuses an unsupported code."""
    code = supported_language(language)
    if code is None or code not in dict(settings.LANGUAGES):
        raise ValueError(f"unsupported language {language!r}")
    UserPreference.objects.update_or_create(user_id=user.pk, defaults={"language": code})
