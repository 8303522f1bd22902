"""The Celery app's process-wide pieces."""

from __future__ import annotations

import threading

from celery.backends.base import DisabledBackend

from owlai.celery import app


def test_the_disabled_result_backend_is_built_once_per_process_not_per_thread():
    # Building a backend scans every installed package's entry points; with
    # the threads pool each thread used to pay for that on its first task.
    here = app.backend
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(app.backend)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert isinstance(here, DisabledBackend)
    assert all(backend is here for backend in seen)


def test_a_task_reaches_the_shared_backend():
    from chat.tasks import run_turn

    assert run_turn.backend is app.backend


class _Timer:
    def __init__(self) -> None:
        self.calls = []

    def call_repeatedly(self, seconds, function):
        self.calls.append((seconds, function))


class _Consumer:
    def __init__(self, pool) -> None:
        self.pool, self.timer = pool, _Timer()


def test_a_threads_pool_worker_wakes_its_event_loop_so_late_acks_free_slots_at_once():
    # Without the timer, a finished turn's acknowledgement waited for the loop
    # to wake for something else: every slot held a finished turn while new
    # turns waited in Redis (bench/load.py, N=200: 7 turns/s, p95 30 s).
    from celery.concurrency.prefork import TaskPool as PreforkPool
    from celery.concurrency.thread import TaskPool as ThreadsPool

    from owlai.celery import THREADS_POOL_WAKE_SECONDS, _wake_the_threads_pool_loop

    threads = _Consumer(ThreadsPool.__new__(ThreadsPool))
    _wake_the_threads_pool_loop(sender=threads)
    assert [seconds for seconds, _ in threads.timer.calls] == [THREADS_POOL_WAKE_SECONDS]
    assert THREADS_POOL_WAKE_SECONDS <= 0.1
    prefork = _Consumer(PreforkPool.__new__(PreforkPool))
    _wake_the_threads_pool_loop(sender=prefork)
    assert prefork.timer.calls == []  # its loop wakes on the children's pipes
