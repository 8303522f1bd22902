"""A conversation is purged one year after its last activity, or
thirty days after its owner deleted it. Deleting hides it and deletes its
token vault at once; the audit rows of what it touched always stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from audit.models import ToolCallAudit
from audit.services import tool_call_audit_write
from chat.executor import spill_folder
from chat.models import Conversation, Message, Turn, TurnStatus, VaultEntry
from chat.retention import conversations_purge
from chat.services import conversation_create, conversation_delete
from chat.turns.runner import turn_run
from chat.turns.start import TurnRefused, turn_start
from chat.vault import DbVault

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(personas, install_models, settings, tmp_path):
    """A conversation of staff's with a message, a vault token, a spill file
    and an audit row."""
    settings.VAR_DIR = tmp_path
    conversation = conversation_create(owner=personas.staff, title="고객 문의")
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED)
    Message.objects.create(conversation=conversation, turn=turn, role="user", content="3번 고객 전화번호")
    DbVault(conversation.pk).token_for("phone", "010-1234-5678")
    folder = spill_folder(conversation.pk)
    folder.mkdir(parents=True)
    (folder / "turn1.json").write_text("{}", encoding="utf-8")
    tool_call_audit_write(
        actor_id=personas.staff.pk,
        actor_username="staff",
        tool="run_sql",
        outcome="success",
        row_count=1,
        conversation_id=conversation.pk,
        turn_id=turn.pk,
    )
    return conversation


def _age(conversation, *, deleted_days_ago=None, idle_days=None) -> None:
    now = timezone.now()
    if deleted_days_ago is not None:
        Conversation.objects.filter(pk=conversation.pk).update(deleted_at=now - timedelta(days=deleted_days_ago))
    if idle_days is not None:
        Conversation.objects.filter(pk=conversation.pk).update(updated_at=now - timedelta(days=idle_days))


def test_delete_hides_at_once_and_removes_the_vault_but_keeps_the_rest_until_the_purge(chat, personas, client):
    client.force_login(personas.staff)
    assert client.delete(reverse("chat:conversation-detail", args=[chat.pk])).status_code == 204

    assert VaultEntry.objects.filter(conversation_id=chat.pk).count() == 0  # originals gone at once
    assert Conversation.objects.get(pk=chat.pk).deleted_at is not None
    assert Message.objects.filter(conversation_id=chat.pk).count() == 1  # purged later
    listed = client.get(reverse("chat:conversations")).json()
    assert str(chat.pk) not in {c["id"] for c in listed}
    for name in ("chat:conversation-messages", "chat:conversation-models", "chat:conversation-mentions"):
        assert client.get(reverse(name, args=[chat.pk])).status_code == 404, name
    reveal = client.post(
        reverse("chat:conversation-reveal", args=[chat.pk]), {"token": "[전화번호-1]"}, content_type="application/json"
    )
    assert reveal.status_code == 404
    assert client.delete(reverse("chat:conversation-detail", args=[chat.pk])).status_code == 404


def test_no_new_turn_in_a_deleted_conversation(chat, personas):
    conversation_delete(conversation=chat)
    with pytest.raises(TurnRefused):
        turn_start(conversation=chat, user=personas.staff, text="계속", model=None)


def test_a_queued_turn_of_a_deleted_conversation_is_rejected_without_a_model_call(chat, personas, monkeypatch):
    turn = turn_start(conversation=chat, user=personas.staff, text="SELECT 1", model=None)
    conversation_delete(conversation=chat)
    monkeypatch.setattr("chat.turns.runner._run", lambda turn: pytest.fail("the turn must not run"))
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.REJECTED


def test_a_turn_running_while_its_conversation_is_deleted_leaves_no_vault_behind(chat, personas, monkeypatch):
    turn = turn_start(conversation=chat, user=personas.staff, text="SELECT 1", model=None)

    def run_while_the_owner_deletes(turn):
        conversation_delete(conversation=turn.conversation)
        # A row that got in anyway (the vault itself refuses allocations now,
        # see test_the_vault_of_a_deleted_conversation_accepts_nothing).
        VaultEntry.objects.create(conversation_id=turn.conversation_id, kind="email", number=9, digest="y" * 64)

    monkeypatch.setattr("chat.turns.runner._run", run_while_the_owner_deletes)
    turn_run(turn_id=turn.pk)
    assert VaultEntry.objects.filter(conversation_id=chat.pk).count() == 0


@pytest.mark.parametrize(
    ("deleted_days_ago", "idle_days", "purged"),
    [
        (31, None, True),  # deleted 31 days ago
        (29, None, False),  # deleted, still within 30 days
        (None, 366, True),  # no activity for a year
        (None, 364, False),
        (None, None, False),  # active
    ],
)
def test_purge(chat, deleted_days_ago, idle_days, purged):
    _age(chat, deleted_days_ago=deleted_days_ago, idle_days=idle_days)
    audit_rows = ToolCallAudit.objects.count()
    assert conversations_purge() == (1 if purged else 0)
    assert Conversation.objects.filter(pk=chat.pk).exists() is not purged
    assert Message.objects.filter(conversation_id=chat.pk).exists() is not purged
    assert spill_folder(chat.pk).exists() is not purged
    if purged:
        assert not VaultEntry.objects.filter(conversation_id=chat.pk).exists()
        assert not Turn.objects.filter(conversation_id=chat.pk).exists()
    # The audit trail outlives the conversation.
    assert ToolCallAudit.objects.count() == audit_rows
    assert ToolCallAudit.objects.filter(conversation_id=chat.pk).exists()


def test_purge_periods_come_from_settings(chat, settings):
    settings.OWLAI_CONVERSATION_IDLE_DAYS = 10
    _age(chat, idle_days=11)
    assert conversations_purge() == 1


def test_the_purge_runs_daily_from_beat(settings):
    from chat.tasks import purge_conversations

    entry = settings.CELERY_BEAT_SCHEDULE["conversation-retention"]
    assert entry["task"] == purge_conversations.name == "chat.purge_conversations"
    assert entry["schedule"] == 24 * 3600.0


# --- found in review: a deletion stops everything at once --------------------------


def test_a_running_turn_stops_when_its_conversation_is_deleted(chat, personas, monkeypatch):
    """The owner deletes while the model is working: the turn stops before its
    next tool call (no SQL runs, nothing lands in the vault, no answer)."""
    from chat.turns import runner as chat_services

    turn = turn_start(
        conversation=chat, user=personas.staff, text="@sales SELECT name, phone FROM customers", model=None
    )
    real_loop = chat_services.run_agent_loop

    def owner_deletes_meanwhile(**kwargs):
        conversation_delete(conversation=chat)
        return real_loop(**kwargs)

    monkeypatch.setattr(chat_services, "run_agent_loop", owner_deletes_meanwhile)
    audit_rows = ToolCallAudit.objects.count()
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.REJECTED
    assert ToolCallAudit.objects.count() == audit_rows  # no tool call ran
    assert not VaultEntry.objects.filter(conversation_id=chat.pk).exists()
    assert not Message.objects.filter(conversation_id=chat.pk, role="assistant").exists()


def test_the_vault_of_a_deleted_conversation_accepts_nothing(chat):
    from chat.vault import VaultClosed

    conversation_delete(conversation=chat)
    with pytest.raises(VaultClosed):
        DbVault(chat.pk).token_for("email", "late@example.com")
    with pytest.raises(VaultClosed):
        DbVault(chat.pk).prefetch([("email", "later@example.com")])
    assert not VaultEntry.objects.filter(conversation_id=chat.pk).exists()


def test_the_daily_purge_removes_vault_rows_left_in_deleted_conversations(chat):
    """E.g. a worker killed mid-turn never ran its clean-up: the vault goes
    with the next purge, not 30 days later."""
    conversation_delete(conversation=chat)
    VaultEntry.objects.create(conversation=chat, kind="phone", number=7, digest="x" * 64, ciphertext="opaque")
    assert conversations_purge() == 0  # the conversation itself waits for its 30 days
    assert not VaultEntry.objects.filter(conversation_id=chat.pk).exists()
    assert Conversation.objects.filter(pk=chat.pk).exists()


def test_deleting_never_extends_a_conversations_life(chat):
    _age(chat, deleted_days_ago=5, idle_days=400)
    assert conversations_purge() == 1


@pytest.mark.django_db(transaction=True)
def test_a_turn_starting_during_the_purge_is_refused_not_lost(
    require_postgres_app_db, personas, install_models, settings, tmp_path, monkeypatch
):
    """The purge locks what it deletes; a turn that starts meanwhile waits,
    then finds the conversation gone (its message is not silently lost), and
    the batch commits whole."""
    import threading

    from django.db import connections
    from django.db.models import deletion

    settings.VAR_DIR = tmp_path
    doomed = conversation_create(owner=personas.staff)
    others = [conversation_create(owner=personas.staff) for _ in range(3)]
    for conversation in [doomed, *others]:
        Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED)
        _age(conversation, idle_days=400)
    outcome: dict = {}
    real_related_objects = deletion.Collector.related_objects

    def user_writes() -> None:
        try:
            turn_start(conversation=doomed, user=personas.staff, text="아직 여기 있어요", model=None)
            outcome["turn"] = "started"
        except TurnRefused:
            outcome["turn"] = "refused"
        finally:
            connections.close_all()

    def related_objects(self, *args, **kwargs):
        if "thread" not in outcome:  # while the purge collects what to delete
            outcome["thread"] = threading.Thread(target=user_writes)
            outcome["thread"].start()
            outcome["thread"].join(timeout=2)  # blocked on the purge's row lock
        return real_related_objects(self, *args, **kwargs)

    monkeypatch.setattr(deletion.Collector, "related_objects", related_objects)
    assert conversations_purge() == 4
    outcome["thread"].join(timeout=30)
    assert outcome["turn"] == "refused"
    assert not Conversation.objects.exists()
    assert not Message.objects.filter(content="아직 여기 있어요").exists()
    assert not Turn.objects.exists()


def test_retention_periods_below_one_day_refuse_to_start(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL"))}
    env.update(OWLAI_VAR_DIR=str(tmp_path), OWLAI_CONVERSATION_IDLE_DAYS="0")
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0
    assert "OWLAI_CONVERSATION_IDLE_DAYS" in done.stderr
