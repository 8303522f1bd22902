"""Sweep leases (owlai.ops): one conditional UPDATE decides who runs a sweep
this period, whoever asks (beat's message, any worker's timer); and a broker
restart re-enqueues queued turns at once (chat.turns.recovery)."""

from __future__ import annotations

from datetime import timedelta
from threading import Barrier, Thread

import pytest
from celery import Celery
from django.db import connection
from django.utils import timezone

from chat.models import Turn, TurnStatus
from chat.services import conversation_create
from owlai.ops import leases, sweeps
from owlai.ops.models import SweepLease

pytestmark = pytest.mark.django_db


def test_a_lease_is_taken_once_per_period():
    assert leases.lease_take("s", seconds=60, holder="a")
    assert not leases.lease_take("s", seconds=60, holder="b")
    SweepLease.objects.filter(name="s").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert leases.lease_take("s", seconds=60, holder="b")
    row = SweepLease.objects.get(name="s")
    assert row.holder == "b" and row.runs == 2


@pytest.mark.django_db(transaction=True)
def test_of_many_processes_asking_at_once_exactly_one_gets_the_lease(require_postgres_app_db):
    barrier = Barrier(8)
    won: list[bool] = []

    def ask(n: int) -> None:
        try:
            barrier.wait()
            won.append(leases.lease_take("race", seconds=60, holder=f"p{n}"))
        finally:
            connection.close()

    threads = [Thread(target=ask, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(won) == [False] * 7 + [True]


def test_a_guarded_sweep_runs_once_however_often_it_is_started(settings):
    settings.CELERY_BEAT_SCHEDULE = {"x": {"task": "test.sweep", "schedule": 60.0}}
    app = Celery("leases-test", set_as_current=False)  # shared tasks stay on owlai's app
    ran = []

    @app.task(name="test.sweep")
    def sweep():
        ran.append(1)
        return "swept"

    sweeps.guard_sweep_tasks(app, "worker:a")
    sweeps.guard_sweep_tasks(app, "worker:a")  # guarding twice wraps once
    task = app.tasks["test.sweep"]
    assert task.run() == "swept"
    assert task.run() is None  # a second beat's message, the same period
    assert ran == [1]
    row = SweepLease.objects.get(name="test.sweep")
    assert row.last_ok is True and row.last_finished_at is not None


def test_a_failing_sweep_is_recorded_as_not_ok(settings):
    settings.CELERY_BEAT_SCHEDULE = {"x": {"task": "test.broken", "schedule": 60.0}}
    app = Celery("leases-test", set_as_current=False)  # shared tasks stay on owlai's app

    @app.task(name="test.broken")
    def broken():
        raise RuntimeError("boom")

    sweeps.guard_sweep_tasks(app, "worker:a")
    with pytest.raises(RuntimeError):
        app.tasks["test.broken"].run()
    assert SweepLease.objects.get(name="test.broken").last_ok is False


@pytest.mark.django_db(transaction=True)
def test_the_timer_starts_only_sweeps_whose_lease_is_free(settings, require_postgres_app_db):
    # Transactional: the sweeps run in threads of their own, on their own connections.
    settings.CELERY_BEAT_SCHEDULE = {
        "x": {"task": "test.a", "schedule": 60.0},
        "y": {"task": "test.b", "schedule": 60.0},
    }
    app = Celery("leases-test", set_as_current=False)  # shared tasks stay on owlai's app
    ran = []

    @app.task(name="test.a")
    def a():
        ran.append("a")

    @app.task(name="test.b")
    def b():
        ran.append("b")

    sweeps.guard_sweep_tasks(app, "worker:a")
    assert leases.lease_take("test.b", seconds=60, holder="beat-elsewhere")
    timer = sweeps.SweepTimer(app, "worker:a")
    timer.broker_watch = lambda: None
    timer.tick()
    for thread in timer._running.values():
        thread.join(10)
        assert not thread.is_alive()
    assert ran == ["a"]
    assert set(timer._running) == {"test.a"}  # b's lease was taken: no thread for it


def test_after_a_broker_restart_every_queued_turn_is_enqueued_again(personas, monkeypatch):
    from chat.turns import dispatch
    from chat.turns.recovery import turns_requeue_queued

    sent = []
    monkeypatch.setattr(dispatch, "send", sent.append)
    conversation = conversation_create(owner=personas.staff)
    queued = Turn.objects.create(conversation=conversation, status=TurnStatus.QUEUED)
    Turn.objects.create(conversation=conversation_create(owner=personas.staff), status=TurnStatus.COMPLETED)
    assert turns_requeue_queued() == 1
    assert sent == [queued.pk]
    queued.refresh_from_db()
    assert queued.status == TurnStatus.QUEUED and queued.requeued_at is not None


def test_the_broker_watch_runs_the_restart_task_once_per_new_run_id(require_redis, settings):
    from owlai.celery import app

    calls = []

    class Task:
        name = "test.restart"

        def run(self):
            calls.append(1)

    settings.OWLAI_BROKER_RESTART_TASK = "test.restart"
    monkey_tasks = {**app.tasks, "test.restart": Task()}

    class FakeApp:
        tasks = monkey_tasks

        @staticmethod
        def connection_for_read():
            return app.connection_for_read()

    timer = sweeps.SweepTimer(FakeApp, "worker:a")
    timer.broker_watch()  # the first look stores the run id
    timer.broker_watch()
    assert calls == []
    SweepLease.objects.filter(name=sweeps.BROKER_WATCH).update(state="an-earlier-redis")
    timer.broker_watch()
    other = sweeps.SweepTimer(FakeApp, "worker:b")
    other.broker_watch()  # a second worker sees no change any more
    assert calls == [1]
