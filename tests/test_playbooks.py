"""Playbooks on the run core (in-process: eager tasks, the offline demo
model): governed changes with their events, typed parameters checked before
a run starts, agent and fixed tool nodes through the one loop and executor
with the run's origin on every audit row, masked node outputs, a failed node
failing the run, identity at execution time, one active run at a time, stop
and re-run."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent, ToolCallAudit
from chat.models import Conversation, Message, MessageRole, Turn, TurnStatus
from governance.models import DbGrant
from playbooks import services
from playbooks.models import NodeRun, PlaybookRun, RunStatus
from playbooks.runs import playbook_run_rerun, playbook_run_start, playbook_run_stop
from playbooks.services import PlaybookError, playbook_create, playbook_share, playbook_update

pytestmark = [pytest.mark.usefixtures("english"), pytest.mark.django_db(transaction=True)]

SQL_NODE = {"key": "names", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "$sql"}}
PARAMS = [
    {"name": "sql", "kind": "text"},
    {"name": "city", "kind": "choice", "choices": ["서울", "부산"], "required": False},
    {"name": "limit", "kind": "number", "required": False},
    {"name": "day", "kind": "date", "required": False},
]


def make(personas, install_models, nodes=None, **kw):
    return playbook_create(
        owner=personas.staff,
        name="Customer names",
        model=install_models,
        parameters=kw.pop("parameters", PARAMS),
        nodes=nodes or [SQL_NODE],
        actor=personas.staff,
        **kw,
    )


def run(playbook, actor, **params):
    started = playbook_run_start(playbook=playbook, actor=actor, parameters=params)
    return PlaybookRun.objects.get(pk=started.pk)


def test_playbooks_are_governed_changes_with_events(personas, install_models):
    playbook = make(personas, install_models)
    assert playbook.tier == "private"  # its model's tier, when not made from a conversation
    with pytest.raises(PlaybookError, match="owner"):
        playbook_update(playbook=playbook, actor=personas.outsider, name="mine now")
    playbook_update(playbook=playbook, actor=personas.staff, name="Names")
    playbook_share(playbook=playbook, users=[personas.outsider], actor=personas.staff)
    kinds = list(AuditEvent.objects.filter(resource_kind="playbook").order_by("id").values_list("kind", flat=True))
    assert kinds == ["playbook_created", "playbook_updated", "playbook_shared"]
    shared = AuditEvent.objects.get(kind="playbook_shared")
    assert shared.details["users"] == ["outsider"] and shared.owner_id == personas.staff.pk


def test_templates_and_tools_are_checked_when_saved(personas, install_models):
    with pytest.raises(PlaybookError, match="not a parameter or an earlier step"):
        make(personas, install_models, nodes=[{"key": "a", "kind": "agent", "prompt": "Use $nothing"}])
    with pytest.raises(PlaybookError, match="no such tool"):
        make(personas, install_models, nodes=[{"key": "a", "kind": "tool", "tool": "hr__people", "arguments": {}}])
    # A later step may use an earlier one's output.
    make(
        personas,
        install_models,
        nodes=[SQL_NODE, {"key": "summary", "kind": "agent", "prompt": "Summarise: $names"}],
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({}, "sql is required"),
        ({"sql": "SELECT 1", "limit": "many"}, "must be a number"),
        ({"sql": "SELECT 1", "day": "yesterday"}, "must be a date"),
        ({"sql": "SELECT 1", "city": "대구"}, "one of its choices"),
        ({"sql": "SELECT 1", "other": "x"}, "Unknown parameter"),
    ],
)
def test_parameters_are_checked_before_a_run_starts(personas, install_models, given, message):
    playbook = make(personas, install_models)
    with pytest.raises(PlaybookError, match=message):
        playbook_run_start(playbook=playbook, actor=personas.staff, parameters=given)
    assert not PlaybookRun.objects.exists() and not Turn.objects.exists()


def test_a_run_goes_through_the_run_core_with_its_origin(personas, install_models):
    playbook = make(
        personas,
        install_models,
        nodes=[SQL_NODE, {"key": "again", "kind": "agent", "prompt": "@sales SELECT phone FROM customers"}],
    )
    done = run(playbook, personas.staff, sql="SELECT name, phone FROM customers ORDER BY id")
    assert done.status == RunStatus.COMPLETED, done.error
    nodes = list(NodeRun.objects.filter(run=done))
    assert [n.status for n in nodes] == ["completed", "completed"]
    turns = list(Turn.objects.filter(pk__in=[n.turn_id for n in nodes]))
    assert {t.origin for t in turns} == {"playbook"} and {t.conversation_id for t in turns} == {done.conversation_id}
    # The tool node: no model call, the executor's audit row and masking.
    rows = list(ToolCallAudit.objects.filter(turn_id__in=[t.pk for t in turns]))
    assert len(rows) >= 2 and {(r.origin, r.origin_ref) for r in rows} == {("playbook", done.reference)}
    assert {r.actor_id for r in rows} == {personas.staff.pk}
    for node in nodes:
        assert "010-1234-5678" not in node.output and "010-" not in node.output
    assert "[" in nodes[0].output  # phones as tokens
    # The run is not a chat of its person's: it has its own conversation (vault, spill folder).
    assert Conversation.objects.filter(pk=done.conversation_id, owner=personas.staff, tier="private").exists()
    assert AuditEvent.objects.filter(kind="playbook_run_started", resource_id=str(done.pk)).count() == 1


def test_a_refused_tool_node_fails_the_run_with_a_value_free_reason(personas, install_models):
    hidden = {**SQL_NODE, "arguments": {"connection": "hr_secret", "sql": "$sql"}}
    playbook = make(personas, install_models, nodes=[hidden])
    done = run(playbook, personas.staff, sql="SELECT * FROM salaries WHERE employee = '최도윤'")
    assert done.status == RunStatus.FAILED
    # In the language of the person it runs for (Korean by default), naming the step.
    assert done.error.startswith("1단계(names) 실패:") and "최도윤" not in done.error
    node = NodeRun.objects.get(run=done)
    assert node.status == "failed" and "최도윤" not in node.error
    assert ToolCallAudit.objects.filter(origin_ref=done.reference, outcome="denied").exists()
    assert done.notifications.filter(kind="failed", user=personas.staff).exists()


def test_revoked_grant_between_runs_is_refused_and_recorded_for_the_owner(personas, install_models):
    playbook = make(personas, install_models)
    first = run(playbook, personas.staff, sql="SELECT name FROM customers")
    assert first.status == RunStatus.COMPLETED
    DbGrant.objects.filter(role=personas.role, connection=personas.sales).delete()
    second = run(playbook, personas.staff, sql="SELECT name FROM customers")
    assert second.status == RunStatus.FAILED
    denied = ToolCallAudit.objects.filter(origin_ref=second.reference)
    assert denied.exists() and {(r.outcome, r.actor_id) for r in denied} == {("denied", personas.staff.pk)}


def test_a_shared_run_acts_as_the_person_who_starts_it(personas, install_models):
    playbook = make(personas, install_models)
    with pytest.raises(PlaybookError):
        run(playbook, personas.outsider, sql="SELECT name FROM customers")
    playbook_share(playbook=playbook, users=[personas.outsider], actor=personas.staff)
    theirs = run(playbook, personas.outsider, sql="SELECT name FROM customers")
    # The outsider holds no grant: their run's call is refused as theirs.
    assert theirs.actor_id == personas.outsider.pk and theirs.status == RunStatus.FAILED
    assert {r.actor_id for r in ToolCallAudit.objects.filter(origin_ref=theirs.reference)} == {personas.outsider.pk}
    # Sharing withdrawn: not started at all.
    playbook_share(playbook=playbook, users=[], actor=personas.staff)
    with pytest.raises(PlaybookError):
        run(playbook, personas.outsider, sql="SELECT name FROM customers")


def test_an_inactive_person_is_never_the_identity_of_a_run(personas, install_models):
    playbook = make(personas, install_models)
    personas.staff.is_active = False
    personas.staff.save()
    with pytest.raises(PlaybookError):
        run(playbook, personas.staff, sql="SELECT name FROM customers")
    assert not Turn.objects.exists()


def test_one_active_run_at_a_time_unless_overlap_is_allowed(personas, install_models):
    playbook = make(personas, install_models)
    first = playbook_run_start(
        playbook=playbook, actor=personas.staff, parameters={"sql": "SELECT 1"}, dispatch_after_commit=False
    )
    with pytest.raises(PlaybookError, match="already running"):
        playbook_run_start(
            playbook=playbook, actor=personas.staff, parameters={"sql": "SELECT 1"}, dispatch_after_commit=False
        )
    playbook_update(playbook=playbook, actor=personas.staff, allow_overlap=True)
    second = playbook_run_start(
        playbook=playbook, actor=personas.staff, parameters={"sql": "SELECT 1"}, dispatch_after_commit=False
    )
    assert first.pk != second.pk


def test_stop_and_rerun(personas, install_models):
    playbook = make(personas, install_models)
    queued = playbook_run_start(
        playbook=playbook, actor=personas.staff, parameters={"sql": "SELECT 1"}, dispatch_after_commit=False
    )
    with pytest.raises(PlaybookError):
        playbook_run_stop(run=queued, actor=personas.outsider)
    stopped = playbook_run_stop(run=queued, actor=personas.staff)
    assert stopped.status == RunStatus.CANCELLED
    assert AuditEvent.objects.filter(kind="playbook_run_stopped", resource_id=str(queued.pk)).exists()
    again = PlaybookRun.objects.get(pk=playbook_run_rerun(run=stopped, actor=personas.staff).pk)
    assert again.rerun_of_id == stopped.pk and again.parameters["sql"] == "SELECT 1"
    assert again.status == RunStatus.COMPLETED


def test_personal_data_in_a_parameter_is_a_token_of_the_run(personas, install_models):
    playbook = make(
        personas,
        install_models,
        nodes=[{"key": "ask", "kind": "agent", "prompt": "Who has the phone $sql?"}],
    )
    done = run(playbook, personas.staff, sql="010-2222-3333")
    assert "010-2222-3333" not in done.parameters["sql"]
    node = NodeRun.objects.get(run=done)
    assert "010-2222-3333" not in node.rendered_input
    asked = Message.objects.get(turn_id=node.turn_id, role=MessageRole.USER)
    assert "010-2222-3333" not in asked.content
    # Re-run with the same parameters: the value comes back from the first run's vault, masked again.
    again = PlaybookRun.objects.get(pk=playbook_run_rerun(run=done, actor=personas.staff).pk)
    assert again.parameters["sql"].startswith("[") and again.status == RunStatus.COMPLETED


def test_save_as_playbook_carries_the_question_and_the_tier(personas, install_models):
    from chat.services import conversation_create
    from chat.turns.runner import turn_run
    from chat.turns.start import turn_start

    conversation = conversation_create(owner=personas.staff)
    turn = turn_start(
        conversation=conversation, user=personas.staff, text="@sales SELECT name FROM customers", model=None
    )
    turn_run(turn_id=turn.pk)
    with pytest.raises(PlaybookError):
        services.playbook_from_turn(turn=turn, actor=personas.outsider)
    playbook = services.playbook_from_turn(turn=turn, actor=personas.staff, name="From chat")
    assert playbook.tier == Conversation.objects.get(pk=conversation.pk).tier == "private"
    assert playbook.nodes == [{"key": "answer", "kind": "agent", "prompt": "@sales SELECT name FROM customers"}]
    assert playbook.source_conversation_id == conversation.pk
    done = run(playbook, personas.staff)
    assert done.status == RunStatus.COMPLETED
    assert TurnStatus.COMPLETED == Turn.objects.get(pk=NodeRun.objects.get(run=done).turn_id).status
