"""Attacks on share links (in-process, the offline demo model, a customer
database with a hostile row).

* A token-shaped text planted in customer data ("[전화번호-1]") is shown by a
  shared turn before any such token exists; a later, unshared turn then
  mints that token for a real phone. The link must not reveal that later
  original, nor copy it into a fork's vault.
* A link's id (on audit rows) opens nothing; a revoked or expired link
  neither reveals nor forks; a viewer's reveal never uses the owner's
  permission.
* A fork's model never sees an original: its copied history and the viewer's
  next question reach the model with tokens only.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent, EventKind
from chat.models import Conversation, VaultEntry
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from chat.vault import DbVault
from governance.field_crypto import decrypt_text
from governance.models import Role
from sharing.fork import share_link_fork
from sharing.models import ShareLink
from sharing.services import share_link_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("english")]

LATER_PHONE = "010-4444-5555"  # customer 3, read only by the unshared turn


def run(conversation, user, text):
    turn = turn_start(conversation=conversation, user=user, text=text, model=None)
    turn_run(turn_id=turn.pk)
    return turn


def as_user(user) -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(user)
    return client


@pytest.fixture
def hostile(personas, install_models, sample_sqlite_db, django_user_model):
    """staff's conversation: turn 1 reads a note planted with "[전화번호-1]"
    (no token exists yet), turn 2 (not shared) mints [전화번호-1] for
    customer 3's phone. rita may reveal; the link covers turn 1 only."""
    path = sample_sqlite_db.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes VALUES (1, '연락처는 [전화번호-1] 입니다')")

    class W:
        pass

    w = W()
    w.owner = personas.staff
    w.rita = django_user_model.objects.create_user("rita", password="pw-rita-123")
    Role.objects.create(name="revealers", can_view_raw_pii=True).users.add(w.rita)
    w.conversation = conversation_create(owner=w.owner)
    w.first = run(w.conversation, w.owner, "@sales SELECT body FROM notes")
    w.second = run(w.conversation, w.owner, "@sales SELECT phone FROM customers WHERE id = 3")
    assert DbVault(w.conversation.pk).original_for("phone", 1) == LATER_PHONE
    w.link = share_link_create(conversation=w.conversation, actor=w.owner, up_to_turn_id=w.first.pk)
    return w


def test_a_planted_token_does_not_reveal_a_value_of_a_later_turn(hostile):
    rita = as_user(hostile.rita)
    shown = json.dumps(rita.get(f"/api/shared/{hostile.link.key}/").json(), ensure_ascii=False)
    assert "[전화번호-1]" in shown  # the planted text, as the shared turn showed it
    response = rita.post(
        f"/api/shared/{hostile.link.key}/reveal/", {"token": "[전화번호-1]"}, content_type="application/json"
    )
    assert LATER_PHONE not in response.content.decode()
    assert response.status_code == 403
    assert not AuditEvent.objects.filter(kind=EventKind.PII_REVEAL).exists()


def test_a_planted_token_does_not_carry_a_later_original_into_the_fork(hostile):
    fork = share_link_fork(key=hostile.link.key, actor=hostile.rita)
    originals = [decrypt_text(e.ciphertext) for e in VaultEntry.objects.filter(conversation=fork)]
    assert LATER_PHONE not in originals


def test_a_link_id_and_closed_links_open_nothing(hostile, personas):
    rita = as_user(hostile.rita)
    for path in (f"/api/shared/{hostile.link.pk}/", f"/shared/{hostile.link.pk}/"):
        assert rita.get(path).status_code == 404
    good = share_link_create(conversation=hostile.conversation, actor=hostile.owner, up_to_turn_id=hostile.second.pk)
    ShareLink.objects.filter(pk=good.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    for key in (good.key,):
        assert rita.post(f"/api/shared/{key}/reveal/", {"token": "[전화번호-1]"}).status_code == 404
        assert rita.post(f"/api/shared/{key}/fork/").status_code == 404
    # The owner may reveal in their chat; a viewer without the permission may not through the link.
    live = share_link_create(conversation=hostile.conversation, actor=hostile.owner, up_to_turn_id=hostile.second.pk)
    refused = as_user(personas.outsider).post(
        f"/api/shared/{live.key}/reveal/", {"token": "[전화번호-1]"}, content_type="application/json"
    )
    assert refused.status_code == 403 and LATER_PHONE not in refused.content.decode()


def test_a_value_the_owner_typed_reaches_no_fork_in_clear_when_only_a_later_turn_minted_it(
    personas, install_models, django_user_model
):
    from chat.models import Message, TurnEvent
    from governance.models import ColumnClassification

    ColumnClassification.objects.create(
        connection=personas.sales,
        table_name="customers",
        column_name="name",
        pii_kind="name",
        source="manual",
        state="confirmed",
    )
    owner = personas.staff
    conversation = conversation_create(owner=owner)
    # The owner types a customer's name (not masked in their own chat; no
    # detector finds a bare name); only the later, unshared turn mints it.
    first = run(conversation, owner, "김민준 고객에 대해 알려 주세요")
    run(conversation, owner, "@sales SELECT name FROM customers WHERE id = 1")
    assert DbVault(conversation.pk).original_for("name", 1) == "김민준"
    link = share_link_create(conversation=conversation, actor=owner, up_to_turn_id=first.pk)
    shown = json.dumps(as_user(personas.outsider).get(f"/api/shared/{link.key}/").json(), ensure_ascii=False)
    assert "김민준" not in shown
    fork = share_link_fork(key=link.key, actor=personas.outsider)
    copied = json.dumps(
        [
            list(Message.objects.filter(conversation=fork).values_list("content", "tool_calls")),
            list(TurnEvent.objects.filter(turn__conversation=fork).values_list("payload", flat=True)),
        ],
        ensure_ascii=False,
    )
    assert "김민준" not in copied
    assert "김민준" not in Conversation.objects.get(pk=fork.pk).title
