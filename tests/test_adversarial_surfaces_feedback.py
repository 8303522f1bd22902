"""Attacks on answer feedback (in-process, the offline demo model).

* A turn of another person's conversation cannot be rated (nor attached)
  through one's own conversation's address, with a session or a token.
* The comment, and a personal value typed into it, never reach an audit
  row: not the feedback's event, not the admin's view events.
* The attached conversation shows tokens, never the originals, and holds
  nothing of a turn after the rated one.
"""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.services import api_token_create
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from feedback.models import AnswerFeedback
from feedback.services import attached_conversation
from tests.support.connector_world import audit_dump

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("english")]

COMMENT_PHONE = "010-2718-2818"
COMMENT = f"고객 {COMMENT_PHONE} 의 행이 빠졌어요 COMMENT-MARKER"


def as_user(user) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return client


def ask(conversation, user, text):
    turn = turn_start(conversation=conversation, user=user, text=text, model=None)
    turn_run(turn_id=turn.pk)
    return turn


def put(client, conversation, turn, **body):
    payload = {"rating": "down", "comment": COMMENT, "attach_conversation": True, **body}
    return client.put(
        f"/api/conversations/{conversation.pk}/turns/{turn.pk}/feedback/", payload, content_type="application/json"
    )


def test_another_persons_turn_is_not_rated_through_ones_own_conversation(personas, install_models):
    theirs = conversation_create(owner=personas.staff)
    their_turn = ask(theirs, personas.staff, "@sales SELECT name, phone FROM customers")
    mine = conversation_create(owner=personas.outsider)
    ask(mine, personas.outsider, "hello")
    key = api_token_create(user=personas.outsider, name="s", actor=personas.outsider)[1]
    for client in (as_user(personas.outsider), Client(HTTP_AUTHORIZATION=f"Bearer {key}")):
        assert put(client, mine, their_turn).status_code == 400
        assert put(client, theirs, their_turn).status_code == 404
    assert not AnswerFeedback.objects.exists()


def test_the_comment_and_its_values_reach_no_audit_row(personas, install_models):
    conversation = conversation_create(owner=personas.staff)
    first = ask(conversation, personas.staff, "@sales SELECT name, phone FROM customers WHERE id = 1")
    ask(conversation, personas.staff, "@sales SELECT phone FROM customers WHERE id = 3")
    assert put(as_user(personas.staff), conversation, first).status_code == 200
    admin = as_user(personas.admin)
    assert admin.get("/admin/feedback/answerfeedback/").status_code == 200
    feedback = AnswerFeedback.objects.get()
    page = admin.get(f"/admin/feedback/answerfeedback/{feedback.pk}/change/").content.decode()
    assert "COMMENT-MARKER" in page  # the admin reads it; the record does not keep it
    dumped = audit_dump()
    assert "COMMENT-MARKER" not in dumped and COMMENT_PHONE not in dumped
    attached = " ".join(str(m) for m in attached_conversation(feedback))
    assert "010-1234-5678" not in attached and "[전화번호-1]" in attached
    # The later turn (customer 3) is not part of what was attached.
    assert "010-4444-5555" not in attached and "[전화번호-2]" not in attached
