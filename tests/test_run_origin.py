"""A second origin of runs: `manage.py run_script` starts a non-chat run that
goes through the same lifecycle, runner, executor and audit as a chat turn,
and every audit row it writes names its origin (chat.turns.origins)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from audit.models import ToolCallAudit
from chat.context import TurnContext
from chat.models import Conversation, Turn, TurnEvent, TurnStatus, VaultEntry
from chat.turns import origins

pytestmark = pytest.mark.usefixtures("english")


@pytest.mark.django_db(transaction=True)
def test_a_scripted_run_is_audited_with_its_origin(personas, install_models, capsys):
    call_command("run_script", "@sales SELECT name FROM customers", user=personas.staff.username, ref="nightly-7")

    turn = Turn.objects.get(origin="script")
    assert turn.status == TurnStatus.COMPLETED and turn.origin_ref == "nightly-7"
    # The same lifecycle: claimed, numbered events from the one writer, ended.
    kinds = list(TurnEvent.objects.filter(turn=turn).order_by("seq").values_list("type", flat=True))
    assert kinds[0] == "turn.accepted" and kinds[-1] == "turn.finished" and "tool.finished" in kinds
    assert turn.last_seq == len(kinds)
    # The same executor and audit: its tool call is on the record, as the script's.
    rows = list(ToolCallAudit.objects.filter(turn_id=turn.pk))
    assert rows and {(r.origin, r.origin_ref) for r in rows} == {("script", "nightly-7")}
    assert {r.actor_id for r in rows} == {personas.staff.pk} and rows[0].tool == "run_sql"
    # Its vault rule: the originals go with the run; and it is not a chat of the user's.
    assert not VaultEntry.objects.filter(conversation_id=turn.conversation_id).exists()
    assert not Conversation.objects.live().filter(pk=turn.conversation_id).exists()
    assert f"run {turn.pk}: completed" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_a_chat_turn_keeps_the_chat_origin(personas, install_models):
    from chat.services import conversation_create
    from chat.turns.runner import turn_run
    from chat.turns.start import turn_start

    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(
        conversation=conversation, user=personas.staff, text="@sales SELECT name FROM customers", model=None
    )
    turn_run(turn_id=turn.pk)
    rows = list(ToolCallAudit.objects.filter(turn_id=turn.pk))
    assert rows and {(r.origin, r.origin_ref) for r in rows} == {("chat", "")}


@pytest.mark.django_db(transaction=True)
def test_a_run_of_an_unknown_origin_is_rejected_before_any_model_call(personas, install_models):
    from chat.services import conversation_create
    from chat.turns.runner import turn_run

    conversation = conversation_create(owner=personas.staff)
    turn = Turn.objects.create(conversation=conversation, origin="nobody-defined-this")
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.REJECTED and turn.model_name == ""
    assert not ToolCallAudit.objects.filter(turn_id=turn.pk).exists()


def test_only_origins_with_somebody_to_answer_may_wait_for_an_approval():
    from chat.approvals import _may_ask

    def ctx(origin: str) -> TurnContext:
        return TurnContext(
            user_id=1,
            username="u",
            tier="private",
            model_name="m",
            provider_name="p",
            conversation_id=None,
            turn_id=1,
            origin=origin,
        )

    assert _may_ask(ctx("chat")) is True
    assert _may_ask(ctx("script")) is False
    assert _may_ask(ctx("unknown")) is False  # fails closed
    assert origins.origin_named("script").vault_scope == origins.VaultScope.RUN


@pytest.mark.django_db
def test_run_script_refuses_an_unknown_user(personas):
    with pytest.raises(CommandError):
        call_command("run_script", "hello", user="nobody")
    assert not Turn.objects.exists()
