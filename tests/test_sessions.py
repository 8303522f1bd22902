"""accounts.sessions: the database session store read with a prepared
statement loads what Django's own store loads, and nothing expired."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.sessions.backends.db import SessionStore as DjangoStore
from django.utils import timezone

from accounts.sessions import SessionStore


@pytest.mark.django_db
def test_a_session_reads_as_djangos_store_reads_it():
    store = SessionStore()
    store["_auth_user_id"] = "7"
    store["nested"] = {"a": [1, 2]}
    store.save()
    assert SessionStore(session_key=store.session_key).load() == DjangoStore(session_key=store.session_key).load()
    assert SessionStore(session_key=store.session_key).load() == {"_auth_user_id": "7", "nested": {"a": [1, 2]}}


@pytest.mark.django_db
def test_an_expired_missing_or_empty_session_key_loads_nothing():
    from django.contrib.sessions.models import Session

    store = SessionStore()
    store["x"] = 1
    store.save()
    Session.objects.filter(session_key=store.session_key).update(expire_date=timezone.now() - timedelta(seconds=1))
    expired = SessionStore(session_key=store.session_key)
    assert expired.load() == {} and expired.session_key is None
    assert SessionStore(session_key="nosuchsessionkeyatall0123456789").load() == {}
    assert SessionStore(session_key=None).load() == {}


def test_the_engine_is_this_store(settings):
    assert settings.SESSION_ENGINE == "accounts.sessions"


# --- session_signs_in: what the websocket asks before every turn ---------------------------


class OtherBackend:
    """A configured backend other than ModelBackend: it loads users itself."""

    users: dict = {}

    def get_user(self, user_id):
        return self.users.get(int(user_id))


OTHER_BACKEND = f"{__name__}.OtherBackend"


def signed_in_key(user, backend="django.contrib.auth.backends.ModelBackend") -> str:
    from django.test import Client

    client = Client()
    client.force_login(user, backend=backend)
    return client.cookies["sessionid"].value


def as_django_sees_it(session_key: str) -> int | None:
    """The user Django's own request path signs in with this session (None: anonymous)."""
    from django.contrib.auth import get_user
    from django.http import HttpRequest

    request = HttpRequest()
    request.session = SessionStore(session_key=session_key)
    user = get_user(request)
    return user.pk if user.is_authenticated else None


@pytest.mark.django_db
def test_a_live_session_signs_its_user_in_and_no_other(django_user_model):
    from accounts.sessions import session_signs_in

    user = django_user_model.objects.create_user("s-live", password="pw-live-123")
    other = django_user_model.objects.create_user("s-other", password="pw-other-123")
    key = signed_in_key(user)
    assert session_signs_in(session_key=key, user_id=user.pk) is True
    assert session_signs_in(session_key=key, user_id=other.pk) is False
    assert session_signs_in(session_key=key, user_id=987654) is False
    assert session_signs_in(session_key=None, user_id=user.pk) is False
    assert session_signs_in(session_key="", user_id=user.pk) is False
    assert as_django_sees_it(key) == user.pk


@pytest.mark.django_db
@pytest.mark.parametrize("change", ["logout", "expired", "password", "inactive", "deleted", "backend_removed"])
def test_what_signs_a_request_out_signs_the_socket_out(django_user_model, settings, change):
    from django.contrib.sessions.models import Session

    from accounts.sessions import session_signs_in

    user = django_user_model.objects.create_user(f"s-{change}", password="pw-change-123")
    key = signed_in_key(user)
    if change == "logout":
        Session.objects.filter(session_key=key).delete()
    elif change == "expired":
        Session.objects.filter(session_key=key).update(expire_date=timezone.now() - timedelta(seconds=1))
    elif change == "password":
        user.set_password("a-new-password-42")
        user.save()
    elif change == "inactive":
        django_user_model.objects.filter(pk=user.pk).update(is_active=False)
    elif change == "deleted":
        django_user_model.objects.filter(pk=user.pk).delete()
    elif change == "backend_removed":
        settings.AUTHENTICATION_BACKENDS = [OTHER_BACKEND]
    assert session_signs_in(session_key=key, user_id=user.pk) is False
    assert as_django_sees_it(key) is None


@pytest.mark.django_db
def test_another_configured_backend_loads_its_user_itself(django_user_model, settings, monkeypatch):
    from accounts.sessions import session_signs_in

    settings.AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend", OTHER_BACKEND]
    user = django_user_model.objects.create_user("s-sso", password="pw-sso-123")
    key = signed_in_key(user, backend=OTHER_BACKEND)
    monkeypatch.setattr(OtherBackend, "users", {user.pk: user})
    assert session_signs_in(session_key=key, user_id=user.pk) is True
    assert as_django_sees_it(key) == user.pk
    # The backend no longer knows the user: signed out, although the row is active.
    monkeypatch.setattr(OtherBackend, "users", {})
    assert session_signs_in(session_key=key, user_id=user.pk) is False
    assert as_django_sees_it(key) is None
