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
