"""Celery app. Workers load the same settings, so a bad install config or a
too-short retention stops the worker exactly as it stops the web process."""

import os

from celery import Celery
from celery.signals import worker_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "owlai.settings")

app = Celery("owlai")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _enforce_runtime_db_role(**kwargs) -> None:
    """A worker whose database role could rewrite the audit trail must not
    start. SystemExit, because Celery logs and swallows ordinary exceptions
    raised by signal handlers."""
    from django.core.exceptions import ImproperlyConfigured

    from audit.db_roles import enforce_runtime_db_role

    try:
        enforce_runtime_db_role()
    except ImproperlyConfigured as exc:
        raise SystemExit(f"OwlAI worker refused to start: {exc}") from exc
    _worker_db_connections()


def _worker_db_connections() -> None:
    """Workers keep a connection no longer than OWLAI_WORKER_DB_CONN_MAX_AGE
    (default 0: closed when the task ends, by Celery's Django fixup, in the
    thread that ran it). With the threads pool each thread has its own
    connection; one kept open per idle thread would add up to the pool size."""
    from django.conf import settings
    from django.db import connections

    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = settings.OWLAI_WORKER_DB_CONN_MAX_AGE
    connections.close_all()


@worker_ready.connect
def _log_startup_warnings(**kwargs) -> None:
    from governance.exposure import log_startup_warnings

    log_startup_warnings()
