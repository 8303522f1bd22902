"""Answer feedback: the owner rates an answer (thumbs, tags, comment, the
conversation optionally attached) through the API with session or token;
another user's conversation is 404; the admin's list and detail each write a
view event (the detail with the conversation's owner), none for one's own;
the attachment is masked and goes when its owner deletes the conversation."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts.services import api_token_create
from audit.models import AuditEvent, EventKind, ResourceKind
from chat.services import conversation_create, conversation_delete
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from feedback import event_types
from feedback.models import AnswerFeedback

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("english")]

PHONE = "010-1234-5678"
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'


def as_user(user) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return client


@pytest.fixture
def rated(personas, install_models):
    conversation = conversation_create(owner=personas.staff)
    first = turn_start(
        conversation=conversation,
        user=personas.staff,
        text=f"@sales SELECT name, phone FROM customers -- {PHONE}",
        model=None,
    )
    turn_run(turn_id=first.pk)
    return conversation, first


def give(client, conversation, turn, **body):
    payload = {"rating": "down", "tags": ["wrong_data", "incomplete"], "comment": "행이 빠졌어요", **body}
    return client.put(
        f"/api/conversations/{conversation.pk}/turns/{turn.pk}/feedback/", payload, content_type="application/json"
    )


def test_the_owner_rates_an_answer_and_rating_again_changes_it(personas, rated):
    conversation, turn = rated
    client = as_user(personas.staff)
    response = give(client, conversation, turn, attach_conversation=True)
    assert response.status_code == 200, response.content
    assert response.json()["rating"] == "down" and response.json()["tags"] == ["incomplete", "wrong_data"]
    event = AuditEvent.objects.get(kind=event_types.ANSWER_FEEDBACK_GIVEN)
    assert (event.actor_username, event.owner_username, event.resource_kind) == ("staff", "staff", "answer_feedback")
    assert event.details["attached"] is True and "행이 빠졌어요" not in json.dumps(event.details, ensure_ascii=False)
    again = give(client, conversation, turn, rating="up", tags=["accurate"], comment="")
    assert again.status_code == 200
    assert AnswerFeedback.objects.count() == 1 and AnswerFeedback.objects.get().rating == "up"
    listed = client.get(f"/api/conversations/{conversation.pk}/feedback/").json()
    assert [(f["turn_id"], f["rating"]) for f in listed] == [(turn.pk, "up")]
    assert {t["id"] for t in client.get("/api/feedback/tags/").json()} >= {"accurate", "wrong_data", "other"}


def test_another_users_conversation_is_404_with_session_and_token(personas, rated):
    conversation, turn = rated
    assert give(as_user(personas.outsider), conversation, turn).status_code == 404
    assert as_user(personas.outsider).get(f"/api/conversations/{conversation.pk}/feedback/").status_code == 404
    _token, key = api_token_create(user=personas.outsider, name="s", actor=personas.outsider)
    assert give(Client(HTTP_AUTHORIZATION=f"Bearer {key}"), conversation, turn).status_code == 404
    _token, own_key = api_token_create(user=personas.staff, name="s", actor=personas.staff)
    assert give(Client(HTTP_AUTHORIZATION=f"Bearer {own_key}"), conversation, turn).status_code == 200
    assert Client().put(f"/api/conversations/{conversation.pk}/turns/{turn.pk}/feedback/").status_code in (401, 403)
    assert not AnswerFeedback.objects.filter(user=personas.outsider).exists()


def test_bad_feedback_gets_a_reason(personas, rated):
    conversation, turn = rated
    client = as_user(personas.staff)
    assert give(client, conversation, turn, tags=["nonsense"]).status_code == 400
    assert give(client, conversation, turn, rating="meh").status_code == 400
    assert give(client, conversation, turn, comment="x" * 2001).status_code == 400
    other = conversation_create(owner=personas.staff)
    refused = client.put(
        f"/api/conversations/{other.pk}/turns/{turn.pk}/feedback/", {"rating": "up"}, content_type="application/json"
    )
    assert refused.status_code == 400 and "ended turn" in refused.json()["detail"]
    assert not AnswerFeedback.objects.exists()


def test_admin_list_and_detail_write_view_events_and_show_the_masked_conversation(personas, rated):
    conversation, turn = rated
    give(as_user(personas.staff), conversation, turn, comment=HOSTILE, attach_conversation=True)
    admin = as_user(personas.admin)
    assert admin.get("/admin/feedback/answerfeedback/?rating__exact=down").status_code == 200
    (listed,) = AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW)
    assert listed.resource_kind == ResourceKind.ANSWER_FEEDBACK and listed.row_count == 1
    assert listed.filters == {"rating__exact": "down"}
    feedback = AnswerFeedback.objects.get()
    page = admin.get(f"/admin/feedback/answerfeedback/{feedback.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200
    detail = AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW).order_by("-id").first()
    assert (detail.owner_id, detail.owner_username, detail.resource_id) == (
        personas.staff.pk,
        "staff",
        str(feedback.pk),
    )
    assert HOSTILE not in html and "&lt;script&gt;" in html  # the comment, escaped
    # The attached conversation as the model saw it: tokens, never the originals,
    # not even the value the owner typed.
    assert "[전화번호-1]" in html and PHONE not in html and "010-2222-3333" not in html
    assert "SELECT name, phone FROM customers" in html


def test_an_admin_viewing_only_their_own_feedback_writes_no_event(personas, install_models):
    conversation = conversation_create(owner=personas.admin)
    turn = turn_start(conversation=conversation, user=personas.admin, text="SELECT 1", model=None)
    turn_run(turn_id=turn.pk)
    admin = as_user(personas.admin)
    assert give(admin, conversation, turn).status_code == 200
    assert admin.get(f"/admin/feedback/answerfeedback/?user_id={personas.admin.pk}").status_code == 200
    feedback = AnswerFeedback.objects.get()
    assert admin.get(f"/admin/feedback/answerfeedback/{feedback.pk}/change/").status_code == 200
    assert not AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW).exists()


def test_deleting_the_conversation_takes_the_attachment_with_it(personas, rated):
    conversation, turn = rated
    give(as_user(personas.staff), conversation, turn, attach_conversation=True)
    conversation_delete(conversation=conversation)
    feedback = AnswerFeedback.objects.get()
    html = as_user(personas.admin).get(f"/admin/feedback/answerfeedback/{feedback.pk}/change/").content.decode()
    assert "deleted the conversation" in html and "SELECT name, phone" not in html
    assert "행이 빠졌어요" in html  # the rating, tags and comment stay
