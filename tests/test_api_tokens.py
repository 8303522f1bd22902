"""Personal API tokens: created and revoked by their user or an admin, stored
as a hash, shown once; they authenticate the API (and nothing else), and
creation, revocation and each use are audit events."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.utils import timezone

from accounts.models import ApiToken
from accounts.services import api_token_create, api_token_revoke
from audit.models import AuditEvent, EventKind
from tests.support.confirm import post_confirmed

pytestmark = pytest.mark.django_db


def bearer(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


def test_a_user_creates_a_token_sees_the_key_once_and_uses_it(personas, install_models):
    session = Client()
    session.force_login(personas.staff)
    created = session.post("/api/tokens/", {"name": "laptop script"}, content_type="application/json")
    assert created.status_code == 201
    key = created.json()["key"]
    assert key.startswith("owlai_") and len(key) > 40
    token = ApiToken.objects.get()
    # Only a hash is stored; no field holds the key, and the list never shows it.
    assert token.digest == hashlib.sha256(key.encode()).hexdigest()
    assert all(key not in str(getattr(token, f.attname)) for f in ApiToken._meta.concrete_fields)
    assert all("key" not in item for item in session.get("/api/tokens/").json())
    event = AuditEvent.objects.get(kind=EventKind.API_TOKEN_CREATED)
    assert (event.actor_username, event.owner_username, event.resource_id) == ("staff", "staff", str(token.pk))
    assert key not in str(event.details)

    client = bearer(key)
    response = client.get("/api/models/")
    assert response.status_code == 200 and any(m["offline_demo"] for m in response.json())
    # A write needs no CSRF token with a bearer token (no cookie to ride on).
    assert (
        client.post("/api/conversations/", {"title": "from a script"}, content_type="application/json").status_code
        == 201
    )
    uses = AuditEvent.objects.filter(kind=EventKind.API_TOKEN_USED).order_by("id")
    assert [(u.actor_username, u.details["method"], u.details["path"]) for u in uses] == [
        ("staff", "GET", "/api/models/"),
        ("staff", "POST", "/api/conversations/"),
    ]
    assert all(key not in str(u.details) for u in uses)
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_revoked_expired_unknown_and_malformed_tokens_get_401(personas):
    token, key = api_token_create(user=personas.staff, name="a", actor=personas.staff)
    expired, expired_key = api_token_create(
        user=personas.staff, name="b", actor=personas.staff, expires_at=timezone.now() + timedelta(seconds=60)
    )
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(key).get("/api/conversations/").status_code == 200
    api_token_revoke(token=token, actor=personas.staff)
    for header in (f"Bearer {key}", f"Bearer {expired_key}", "Bearer owlai_nope", "Bearer", "Bearer a b"):
        response = Client(HTTP_AUTHORIZATION=header).get("/api/conversations/")
        assert response.status_code == 401, header
        assert response["WWW-Authenticate"].startswith("Bearer")
    # Without credentials at all: 401 with the challenge, not a login redirect.
    assert Client().get("/api/conversations/").status_code == 401
    # A deactivated user's token stops working at once.
    _, other_key = api_token_create(user=personas.staff, name="c", actor=personas.staff)
    personas.staff.is_active = False
    personas.staff.save()
    assert bearer(other_key).get("/api/conversations/").status_code == 401


def test_a_token_reaches_the_api_only(personas):
    _, key = api_token_create(user=personas.admin, name="admin script", actor=personas.admin)
    client = bearer(key)
    assert client.get("/api/conversations/").status_code == 200
    assert client.get("/admin/").status_code == 302  # the admin wants a session: login
    assert client.get("/").status_code == 302


def test_tokens_cannot_manage_tokens(personas):
    token, key = api_token_create(user=personas.staff, name="a", actor=personas.staff)
    client = bearer(key)
    assert client.post("/api/tokens/", {"name": "more"}, content_type="application/json").status_code in (401, 403)
    assert client.delete(f"/api/tokens/{token.pk}/").status_code in (401, 403)
    assert ApiToken.objects.count() == 1 and ApiToken.objects.get().revoked_at is None


def test_a_user_revokes_only_their_own_tokens(personas):
    mine, _ = api_token_create(user=personas.staff, name="mine", actor=personas.staff)
    theirs, _ = api_token_create(user=personas.outsider, name="theirs", actor=personas.outsider)
    session = Client()
    session.force_login(personas.staff)
    assert session.delete(f"/api/tokens/{theirs.pk}/").status_code == 404
    assert session.delete(f"/api/tokens/{mine.pk}/").status_code == 204
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.revoked_at is not None and mine.revoked_by_username == "staff" and theirs.revoked_at is None
    revoked = AuditEvent.objects.get(kind=EventKind.API_TOKEN_REVOKED)
    assert (revoked.actor_username, revoked.resource_id) == ("staff", str(mine.pk))
    # Revoking again records nothing more.
    api_token_revoke(token=mine, actor=personas.staff)
    assert AuditEvent.objects.filter(kind=EventKind.API_TOKEN_REVOKED).count() == 1
    with pytest.raises(PermissionDenied):
        api_token_revoke(token=theirs, actor=personas.staff)
    with pytest.raises(PermissionDenied):
        api_token_create(user=personas.outsider, name="x", actor=personas.staff)


def test_bad_input_gets_a_clear_error(personas):
    session = Client()
    session.force_login(personas.staff)
    for body in ({}, {"name": ""}, {"name": "x", "expires_at": "2001-01-01T00:00:00Z"}, {"name": "x" * 101}):
        response = session.post("/api/tokens/", body, content_type="application/json")
        assert response.status_code == 400, body
        assert response.json()
    assert not ApiToken.objects.exists() and not AuditEvent.objects.filter(kind=EventKind.API_TOKEN_CREATED).exists()


def test_an_admin_creates_and_revokes_tokens_in_the_admin(personas):
    admin = Client()
    admin.force_login(personas.admin)
    response = admin.post(
        "/admin/accounts/apitoken/add/", {"user": personas.staff.pk, "name": "report job"}, follow=True
    )
    assert response.status_code == 200
    token = ApiToken.objects.get()
    shown = [str(m) for m in response.context["messages"]]
    key = next(m.split(": ")[-1] for m in shown if "owlai_" in m)
    assert token.digest == hashlib.sha256(key.encode()).hexdigest() and token.user == personas.staff
    created = AuditEvent.objects.get(kind=EventKind.API_TOKEN_CREATED)
    assert (created.actor_username, created.owner_username) == ("admin", "staff")
    assert bearer(key).get("/api/conversations/").status_code == 200

    response = post_confirmed(
        admin,
        "/admin/accounts/apitoken/",
        {"action": "revoke_selected", "_selected_action": [token.pk]},
        follow=True,
    )
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.revoked_by_username == "admin"
    assert AuditEvent.objects.get(kind=EventKind.API_TOKEN_REVOKED).owner_username == "staff"
    assert bearer(key).get("/api/conversations/").status_code == 401
    # No deleting: a revoked token stays on the list.
    assert admin.post(f"/admin/accounts/apitoken/{token.pk}/delete/").status_code == 403


def test_a_token_request_that_cannot_be_recorded_is_refused(personas, monkeypatch):
    from audit.services import AuditWriteError

    _, key = api_token_create(user=personas.staff, name="a", actor=personas.staff)

    def down(**kwargs):
        raise AuditWriteError("audit store down")

    monkeypatch.setattr("accounts.services.audit_event_write", down)
    response = bearer(key).get("/api/conversations/")
    assert response.status_code == 503
    assert set(response.json()) == {"detail"}  # nothing of the answer
