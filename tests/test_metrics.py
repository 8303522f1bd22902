"""/metrics (owlai.metrics): Prometheus text, read before and after a change
or a fault; one source failing (Redis down) leaves the others."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from audit.models import ToolCallAudit, ToolCallOutcome
from chat.models import ApprovalStatus, ToolApproval, Turn, TurnStatus
from chat.services import conversation_create
from owlai.ops import leases
from tests.support.stack import free_port

pytestmark = pytest.mark.django_db


def scrape(**headers) -> dict[tuple, float]:
    response = Client().get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_turns_are_counted_by_status_and_origin(personas):
    key = ("owlai_turns", (("origin", "chat"), ("status", "queued")))
    assert scrape().get(key, 0) == 0
    conversation = conversation_create(owner=personas.staff)
    Turn.objects.create(conversation=conversation, status=TurnStatus.QUEUED)
    Turn.objects.create(conversation=conversation, status=TurnStatus.QUEUED)
    Turn.objects.create(conversation=conversation, status=TurnStatus.FAILED, origin="playbook")
    after = scrape()
    assert after[key] == 2
    assert after[("owlai_turns", (("origin", "playbook"), ("status", "failed")))] == 1


def test_tool_calls_count_under_their_recorded_outcome(personas):
    ToolCallAudit.objects.create(tool="run_sql", outcome="denied")
    started = ToolCallAudit.objects.create(tool="run_sql", outcome="started")
    samples = scrape()
    kind = (("kind", "db_connection"),)
    assert samples[("owlai_tool_calls", (*kind, ("outcome", "denied")))] == 1
    assert samples[("owlai_tool_calls", (*kind, ("outcome", "started")))] == 1
    ToolCallOutcome.objects.create(attempt=started, outcome="success")
    samples = scrape()
    assert samples[("owlai_tool_calls", (*kind, ("outcome", "success")))] == 1
    assert ("owlai_tool_calls", (*kind, ("outcome", "started"))) not in samples


def test_approvals_waiting_sweeps_and_heartbeats(personas):
    assert scrape()[("owlai_approvals_waiting", ())] == 0
    soon = timezone.now() + timedelta(minutes=5)
    conversation = conversation_create(owner=personas.staff)
    turn = Turn.objects.create(conversation=conversation, status=TurnStatus.WAITING_APPROVAL)
    ToolApproval.objects.create(
        conversation=conversation,
        turn=turn,
        user=personas.staff,
        connector_name="crm",
        tool_name="crm__x",
        expires_at=soon,
    )
    ToolApproval.objects.create(
        conversation=conversation,
        turn=turn,
        user=personas.staff,
        connector_name="crm",
        tool_name="crm__y",
        status=ApprovalStatus.APPROVED,
        expires_at=soon,
    )
    assert leases.lease_take("chat.recover_turns", seconds=5, holder="w")
    leases.lease_done("chat.recover_turns", ok=True)
    leases.heartbeat("beat:h:1", "beat")
    samples = scrape()
    assert samples[("owlai_approvals_waiting", ())] == 1
    sweep = (("sweep", "chat.recover_turns"),)
    assert samples[("owlai_sweep_last_ok", sweep)] == 1
    assert samples[("owlai_sweep_runs_total", sweep)] == 1
    assert samples[("owlai_sweep_last_finished_timestamp_seconds", sweep)] > 0
    assert 0 <= samples[("owlai_heartbeat_age_seconds", (("process", "beat"),))] < 60


def test_queue_depth_and_a_redis_outage(settings, require_redis):
    import redis

    settings.CELERY_TASK_DEFAULT_QUEUE = "owlai-metrics-test-queue"
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    try:
        client.lpush(settings.CELERY_TASK_DEFAULT_QUEUE, "m1", "m2", "m3")
        samples = scrape()
        assert samples[("owlai_queue_depth", ())] == 3
        assert samples[("owlai_metrics_source_up", (("source", "queue"),))] == 1
    finally:
        client.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # Redis down
    samples = scrape()
    assert samples[("owlai_metrics_source_up", (("source", "queue"),))] == 0
    assert ("owlai_queue_depth", ()) not in samples
    assert samples[("owlai_metrics_source_up", (("source", "turns"),))] == 1


def test_channel_layer_drops_of_this_process(settings):
    from chat.layers import DROPS

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "chat.layers.InMemoryChannelLayer"}}
    before = scrape()[("owlai_channel_layer_dropped_total", ())]
    DROPS.add("test-group", 3)
    try:
        assert scrape()[("owlai_channel_layer_dropped_total", ())] == before + 3
    finally:
        DROPS.reset()


def test_metrics_are_refused_to_other_networks():
    assert Client(REMOTE_ADDR="198.51.100.4").get("/metrics").status_code == 403


def test_recent_turn_durations_and_queue_waits(personas):
    conversation = conversation_create(owner=personas.staff)
    for wait, run in [(0.2, 1.0), (3.0, 20.0)]:
        turn = Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED)
        Turn.objects.filter(pk=turn.pk).update(
            started_at=turn.created_at + timedelta(seconds=wait),
            finished_at=turn.created_at + timedelta(seconds=wait + run),
        )
    Turn.objects.create(conversation=conversation, status=TurnStatus.QUEUED)  # not finished: not counted
    samples = scrape()
    wait = "owlai_recent_turn_queue_wait_seconds"
    assert samples[(f"{wait}_bucket", (("le", "0.25"),))] == 1
    assert samples[(f"{wait}_bucket", (("le", "5.0"),))] == 2
    assert samples[(f"{wait}_gcount", ())] == 2
    total = "owlai_recent_turn_duration_seconds"
    assert samples[(f"{total}_bucket", (("le", "2.5"),))] == 1
    assert samples[(f"{total}_bucket", (("le", "30.0"),))] == 2
    assert abs(samples[(f"{total}_gsum", ())] - 24.2) < 0.01


# --- Faults and measured time, through real turns (chat.turns.runner) ------------------

from tests.support.fake_llm import text, tool_call  # noqa: E402
from tests.test_turn import events, fake, scripted_models, start_and_run  # noqa: E402, F401 (fixtures)


def _failures(samples, cause):
    return samples.get(("owlai_turn_failures", (("cause", cause),)), 0)


def test_an_audit_write_refused_is_its_own_failure_cause(personas, scripted_models, fake, audit_inserts_refused):  # noqa: F811
    before = scrape()
    assert _failures(before, "audit_write") == 0
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": "SELECT name FROM customers"}), text("x")]
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "고객 이름")
    assert turn.status == "failed"
    after = scrape()
    assert _failures(after, "audit_write") == 1
    assert _failures(after, "crash") == 0 and _failures(after, "model") == 0


def test_a_crashed_run_and_a_lost_worker_are_counted_apart_from_audit(personas, scripted_models, fake, monkeypatch):  # noqa: F811
    def crash(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("chat.turns.runner.run_agent_loop", crash)
    start_and_run(conversation_create(owner=personas.staff), personas.staff, "안녕")
    lost = Turn.objects.create(conversation=conversation_create(owner=personas.staff), status=TurnStatus.RUNNING)
    Turn.objects.filter(pk=lost.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    from chat.turns.recovery import turns_recover

    turns_recover()
    samples = scrape()
    assert _failures(samples, "crash") == 1
    assert _failures(samples, "worker_lost") == 1
    assert _failures(samples, "audit_write") == 0


def test_model_wait_and_platform_time_are_measured_by_the_worker(personas, scripted_models, fake):  # noqa: F811
    fake.delay = 0.3  # the model takes at least this long
    fake.script = [tool_call("run_sql", {"connection": "sales", "sql": "SELECT count(*) FROM customers"}), text("3")]
    turn = start_and_run(conversation_create(owner=personas.staff), personas.staff, "고객 수?")
    assert turn.status == "completed"
    # Two model calls: at least twice the model's delay spent waiting for it.
    assert turn.model_ms >= 600 and turn.run_ms >= turn.model_ms
    samples = scrape()
    wait, platform = "owlai_recent_turn_model_wait_seconds", "owlai_recent_turn_platform_seconds"
    assert samples[(f"{wait}_gcount", ())] == 1 and samples[(f"{platform}_gcount", ())] == 1
    assert abs(samples[(f"{wait}_gsum", ())] - turn.model_ms / 1000) < 1e-6
    assert abs(samples[(f"{platform}_gsum", ())] - (turn.run_ms - turn.model_ms) / 1000) < 1e-6
    assert samples[(f"{wait}_bucket", (("le", "0.5"),))] == 0  # 0.6 s or more


def test_a_resumed_run_adds_up_its_parts(personas, scripted_models, fake):  # noqa: F811
    from chat.turns.timing import TurnClock

    clock = TurnClock(run_ms=1500, model_ms=1000)
    changes = clock.changes()
    assert changes["run_ms"] >= 1500 and changes["model_ms"] == 1000
