"""Shared conversations: the owner's links (API with session and token,
others' conversations 404), what a viewer sees and may reveal (under the
viewer's own permission only, tokens of the snapshot only, the event naming
viewer and owner), when a link stops working (revoked, expired, deleted,
deactivated viewer or owner), the fork's copy, and the admin's list events."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.services import api_token_create
from audit.models import AuditEvent, EventKind, ResourceKind
from chat.models import Conversation, Message, VaultEntry
from chat.services import conversation_create, conversation_delete
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from governance.models import Role
from sharing import event_types
from sharing.models import ShareLink

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("english")]

PHONES = ["010-1234-5678", "010-2222-3333", "010-4444-5555"]


def run(conversation, user, text):
    turn = turn_start(conversation=conversation, user=user, text=text, model=None)
    turn_run(turn_id=turn.pk)
    return turn


class World:
    pass


@pytest.fixture
def world(personas, install_models, django_user_model):
    """staff's conversation: turn 1 shows phones 1-2, turn 2 phone 3. A
    viewer without reveal permission, and `rita` who may reveal."""
    w = World()
    w.owner, w.viewer = personas.staff, personas.outsider
    w.rita = django_user_model.objects.create_user("rita", password="pw-rita-123")
    Role.objects.create(name="revealers", can_view_raw_pii=True).users.add(w.rita)
    w.conversation = conversation_create(owner=w.owner)
    w.first = run(w.conversation, w.owner, "@sales SELECT name, phone FROM customers WHERE id <= 2")
    w.second = run(w.conversation, w.owner, "@sales SELECT phone FROM customers WHERE id = 3")
    assert VaultEntry.objects.filter(conversation=w.conversation).count() == 3
    w.client = Client(HTTP_ACCEPT_LANGUAGE="en")
    w.client.force_login(w.owner)
    return w


def share(w, **body) -> dict:
    response = w.client.post(
        f"/api/conversations/{w.conversation.pk}/share-links/",
        {"up_to_turn": w.first.pk, **body},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    return response.json()


def key_of(link: dict) -> str:
    return link["url"].rstrip("/").rsplit("/", 1)[1]


def as_user(user) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return client


def reveal(client, key, token):
    return client.post(f"/api/shared/{key}/reveal/", {"token": token}, content_type="application/json")


def test_the_owner_shares_up_to_a_turn_and_a_viewer_sees_only_that_masked(world):
    link = share(world)
    assert link["status"] == "open" and link["up_to_turn"] == world.first.pk
    event = AuditEvent.objects.get(kind=event_types.SHARE_LINK_CREATED)
    assert (event.actor_username, event.owner_username, event.resource_kind) == ("staff", "staff", "share_link")
    assert event.resource_id == link["id"] and key_of(link) not in json.dumps(event.details)

    shown = as_user(world.viewer).get(f"/api/shared/{key_of(link)}/")
    assert shown.status_code == 200
    body = shown.json()
    assert body["owner"] == "staff" and body["is_owner"] is False and body["may_reveal"] is False
    assert "role" in body["reveal_refusal"]
    assert {item["turn_id"] for item in body["items"]} == {world.first.pk}
    text = json.dumps(body, ensure_ascii=False)
    assert "[전화번호-1]" in text and "[전화번호-2]" in text and "[전화번호-3]" not in text
    assert not any(phone in text for phone in PHONES)
    # The page itself: signed-in members only.
    assert as_user(world.viewer).get(link["url"]).status_code == 200
    anonymous = Client().get(link["url"])
    assert anonymous.status_code == 302 and "/login" in anonymous["Location"]
    assert Client().get(f"/api/shared/{key_of(link)}/").status_code in (401, 403)


def test_a_value_the_owner_typed_is_shown_as_its_token_to_a_viewer(world):
    run(world.conversation, world.owner, f"{PHONES[0]} 고객은 어디에 사나요?")
    latest = world.conversation.turns.order_by("-id").first()
    link = share(world, up_to_turn=latest.pk)
    text = json.dumps(as_user(world.viewer).get(f"/api/shared/{key_of(link)}/").json(), ensure_ascii=False)
    assert PHONES[0] not in text and "[전화번호-1] 고객은" in text


def test_links_of_another_users_conversation_are_404_with_session_and_token(world):
    other = as_user(world.viewer)
    base = f"/api/conversations/{world.conversation.pk}/share-links/"
    assert other.post(base, {}, content_type="application/json").status_code == 404
    assert other.get(base).status_code == 404
    link = share(world)
    assert other.delete(f"/api/share-links/{link['id']}/").status_code == 404
    assert other.get("/api/share-links/").json() == []
    # A personal API token: the owner's works, another user's is refused alike.
    _token, key = api_token_create(user=world.owner, name="script", actor=world.owner)
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    created = bearer.post(base, {"expires_in_days": 1}, content_type="application/json")
    assert created.status_code == 201 and created.json()["up_to_turn"] == world.second.pk
    assert {item["id"] for item in bearer.get("/api/share-links/").json()} == {link["id"], created.json()["id"]}
    _token, viewer_key = api_token_create(user=world.viewer, name="script", actor=world.viewer)
    viewer_bearer = Client(HTTP_AUTHORIZATION=f"Bearer {viewer_key}")
    assert viewer_bearer.post(base, {}, content_type="application/json").status_code == 404
    assert viewer_bearer.get(f"/api/shared/{key_of(link)}/").status_code == 200  # a member with the address
    assert bearer.delete(f"/api/share-links/{link['id']}/").status_code == 204
    assert ShareLink.objects.get(pk=link["id"]).revoked_at is not None


def test_bad_requests_get_a_reason(world):
    base = f"/api/conversations/{world.conversation.pk}/share-links/"
    assert world.client.post(base, {"expires_in_days": 5}, content_type="application/json").status_code == 400
    empty = conversation_create(owner=world.owner)
    refused = world.client.post(f"/api/conversations/{empty.pk}/share-links/", {}, content_type="application/json")
    assert refused.status_code == 400 and "nothing to share" in refused.json()["detail"]
    foreign = world.client.post(base, {"up_to_turn": 10**9}, content_type="application/json")
    assert foreign.status_code == 400


def test_a_viewer_reveals_only_under_their_own_permission_and_the_event_names_both(world):
    Role.objects.create(name="owner-reveals", can_view_raw_pii=True).users.add(world.owner)
    key = key_of(share(world))
    # The owner may reveal; that permission does not travel with the link.
    refused = reveal(as_user(world.viewer), key, "[전화번호-1]")
    assert refused.status_code == 403 and "role" in refused.json()["detail"]
    assert PHONES[0] not in refused.content.decode()
    event = AuditEvent.objects.get(kind=EventKind.PII_REVEAL_REFUSED)
    assert (event.actor_username, event.owner_username, event.details["reason"]) == (
        "outsider",
        "staff",
        "not permitted",
    )

    allowed = reveal(as_user(world.rita), key, "[전화번호-1]")
    assert allowed.status_code == 200 and allowed.json()["original"] == PHONES[0]
    event = AuditEvent.objects.get(kind=EventKind.PII_REVEAL)
    assert (event.actor_username, event.owner_id, event.owner_username) == ("rita", world.owner.pk, "staff")
    assert event.resource_kind == ResourceKind.CONVERSATION and event.resource_id == str(world.conversation.pk)
    assert PHONES[0] not in json.dumps(event.details)


def test_a_link_reveals_nothing_beyond_its_snapshot_or_of_another_conversation(world):
    key = key_of(share(world))
    rita = as_user(world.rita)
    # Turn 2's token is in the same vault, but was not shared.
    beyond = reveal(rita, key, "[전화번호-3]")
    assert beyond.status_code == 403 and PHONES[2] not in beyond.content.decode()
    assert AuditEvent.objects.get(kind=EventKind.PII_REVEAL_REFUSED).details["reason"] == "unknown token"
    # Another conversation of the owner: neither its id nor its tokens open through this link.
    other = conversation_create(owner=world.owner)
    run(other, world.owner, "@sales SELECT phone FROM customers WHERE id = 3")
    for path in (f"/api/shared/{other.pk}/", f"/api/conversations/{other.pk}/messages/"):
        assert rita.get(path).status_code == 404
    assert rita.post(f"/api/conversations/{other.pk}/reveal/", {"token": "[전화번호-1]"}).status_code == 404
    assert rita.get(f"/api/shared/{key}x/").status_code == 404


@pytest.mark.parametrize("how", ["revoked", "expired", "deleted", "owner deactivated"])
def test_a_link_that_is_closed_opens_nothing(world, how):
    link = share(world)
    key = key_of(link)
    if how == "revoked":
        assert world.client.delete(f"/api/share-links/{link['id']}/").status_code == 204
        assert AuditEvent.objects.filter(kind=event_types.SHARE_LINK_REVOKED).count() == 1
    elif how == "expired":
        ShareLink.objects.filter(pk=link["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    elif how == "deleted":
        conversation_delete(conversation=world.conversation)
    else:
        type(world.owner).objects.filter(pk=world.owner.pk).update(is_active=False)
    rita = as_user(world.rita)
    for response in (
        rita.get(f"/api/shared/{key}/"),
        rita.get(link["url"]),
        reveal(rita, key, "[전화번호-1]"),
        rita.post(f"/api/shared/{key}/fork/"),
    ):
        assert response.status_code == 404
    assert not AuditEvent.objects.filter(kind=EventKind.PII_REVEAL).exists()
    assert Conversation.objects.filter(owner=world.rita).count() == 0


def test_a_deactivated_viewer_cannot_use_a_link(world):
    link = share(world)
    key = key_of(link)
    rita = as_user(world.rita)
    _token, token_key = api_token_create(user=world.rita, name="script", actor=world.rita)
    assert rita.get(f"/api/shared/{key}/").status_code == 200
    type(world.rita).objects.filter(pk=world.rita.pk).update(is_active=False)
    assert rita.get(f"/api/shared/{key}/").status_code in (401, 403)
    assert reveal(rita, key, "[전화번호-1]").status_code in (401, 403)
    assert rita.get(link["url"]).status_code == 302  # to the login page
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {token_key}")
    assert bearer.get(f"/api/shared/{key}/").status_code == 401
    # The service refuses by itself too (fail closed, whatever the view did).
    from chat.reveal import RevealResult  # noqa: F401
    from sharing.services import ShareLinkUnavailable, share_link_open, shared_token_reveal

    world.rita.refresh_from_db()
    with pytest.raises(ShareLinkUnavailable):
        share_link_open(key=key, viewer=world.rita)
    link_row = ShareLink.objects.get(pk=link["id"])
    assert shared_token_reveal(link=link_row, token="[전화번호-1]", actor=world.rita).allowed is False
    assert not AuditEvent.objects.filter(kind=EventKind.PII_REVEAL).exists()


def test_the_fork_is_the_viewers_on_the_same_tier_with_the_snapshots_tokens_renumbered(world):
    link = share(world, up_to_turn=world.second.pk)
    world.conversation.refresh_from_db()
    forked = as_user(world.viewer).post(f"/api/shared/{key_of(link)}/fork/")
    assert forked.status_code == 201
    fork = Conversation.objects.get(pk=forked.json()["conversation"])
    assert fork.owner == world.viewer and fork.tier == world.conversation.tier == "private"
    assert VaultEntry.objects.filter(conversation=fork).count() == 3  # the snapshot showed all three
    copied = " ".join(Message.objects.filter(conversation=fork).values_list("content", flat=True))
    assert not any(phone in copied for phone in PHONES) and "[전화번호-3]" in copied
    event = AuditEvent.objects.get(kind=event_types.SHARE_LINK_FORKED)
    assert (event.actor_username, event.owner_username, event.details["fork"]) == ("outsider", "staff", str(fork.pk))
    # The viewer's own conversation now: the chat API shows it; the original stays the owner's.
    viewer = as_user(world.viewer)
    assert viewer.get(f"/api/conversations/{fork.pk}/messages/").status_code == 200
    assert viewer.get(f"/api/conversations/{world.conversation.pk}/messages/").status_code == 404


def test_the_fork_holds_only_the_originals_the_snapshot_shows_numbered_anew(world):
    from chat.vault import DbVault
    from sharing.fork import share_link_fork

    # Up to turn 1 only: phones 1-2; turn 2's phone is not copied.
    link = ShareLink.objects.get(pk=share(world)["id"])
    fork = share_link_fork(key=link.key, actor=world.rita)
    vault = DbVault(fork.pk)
    assert VaultEntry.objects.filter(conversation=fork).count() == 2
    assert {vault.original_for("phone", 1), vault.original_for("phone", 2)} == set(PHONES[:2])
    # Its tokens keep their meaning: the same value is the same token in the fork.
    assert vault.token_for("phone", PHONES[0]) == "[전화번호-1]"
    assert vault.token_for("phone", PHONES[2]) == "[전화번호-3]"  # a new value numbers after them


def test_the_admin_share_link_list_writes_one_view_event_with_rows_and_filters(world, personas):
    share(world)
    share(world, expires_in_days=30)
    admin = as_user(personas.admin)
    assert admin.get("/admin/sharing/sharelink/?state=open").status_code == 200
    (event,) = AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW)
    assert event.resource_kind == ResourceKind.SHARE_LINK and event.row_count == 2
    assert event.filters == {"state": "open"}
    link = ShareLink.objects.first()
    page = admin.get(f"/admin/sharing/sharelink/{link.pk}/change/")
    assert page.status_code == 200 and link.key not in page.content.decode()
    detail = AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW).order_by("-id").first()
    assert (detail.owner_username, detail.resource_id) == ("staff", str(link.pk))
    # The admin revokes through the service (on the record).
    admin.post("/admin/sharing/sharelink/", {"action": "revoke_selected", "_selected_action": [str(link.pk)]})
    assert ShareLink.objects.get(pk=link.pk).revoked_at is not None
    assert AuditEvent.objects.get(kind=event_types.SHARE_LINK_REVOKED).actor_username == "admin"


def test_an_admin_viewing_only_their_own_links_writes_no_event(world, personas):
    conversation = conversation_create(owner=personas.admin)
    run(conversation, personas.admin, "SELECT 1")
    admin = as_user(personas.admin)
    admin.post(f"/api/conversations/{conversation.pk}/share-links/", {}, content_type="application/json")
    assert admin.get(f"/admin/sharing/sharelink/?owner_id={personas.admin.pk}").status_code == 200
    assert not AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW).exists()


def test_my_shared_links_page_lists_and_revokes(world):
    link = share(world)
    page = world.client.get("/shared-links/")
    html = page.content.decode()
    assert page.status_code == 200 and link["url"] in html
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert as_user(world.viewer).get("/shared-links/").content.decode().count("/shared/") == 0
    # Another user's link cannot be revoked from the page.
    assert as_user(world.viewer).post(f"/shared-links/{link['id']}/revoke/").status_code == 404
    assert world.client.post(f"/shared-links/{link['id']}/revoke/").status_code == 302
    assert ShareLink.objects.get(pk=link["id"]).revoked_at is not None


@pytest.mark.django_db(transaction=False)
def test_share_and_feedback_endpoints_are_in_the_openapi_schema_with_token_auth():
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    expected = {
        "/api/conversations/{conversation_id}/share-links/": {"get", "post"},
        "/api/share-links/": {"get"},
        "/api/share-links/{link_id}/": {"delete"},
        "/api/shared/{key}/": {"get"},
        "/api/shared/{key}/reveal/": {"post"},
        "/api/shared/{key}/fork/": {"post"},
        "/api/conversations/{conversation_id}/feedback/": {"get"},
        "/api/conversations/{conversation_id}/turns/{turn_id}/feedback/": {"put"},
        "/api/feedback/tags/": {"get"},
    }
    for path, methods in expected.items():
        assert set(paths[path]) == methods, path
        for method in methods:
            assert {"apiToken": []} in paths[path][method]["security"], (path, method)
            assert {"cookieAuth": []} in paths[path][method]["security"], (path, method)


def test_the_shared_pages_speak_korean_and_english(world):
    link = share(world)
    for language, words in (
        ("ko", ["새 대화로 이어 가기", "내 공유 링크"]),
        ("en", ["Continue in a new conversation"]),
    ):
        client = Client(HTTP_ACCEPT_LANGUAGE=language)
        client.force_login(world.viewer)
        html = client.get(link["url"]).content.decode()
        assert all(w in html for w in words), language
        config = client.get("/shared-links/page.json").json()["text"]
        assert config["share"] == ("공유" if language == "ko" else "Share")
        assert client.get("/feedback/page.json").json()["text"]["send"] == (
            "피드백 보내기" if language == "ko" else "Send feedback"
        )
        gone = client.get("/shared/nope/")
        assert gone.status_code == 404 and ("공유한 사람에게" if language == "ko" else "Ask the person") in (
            gone.content.decode()
        )
