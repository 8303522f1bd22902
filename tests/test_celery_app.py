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
