"""Celery app. Workers load the same settings, so a bad install config or a
too-short retention stops the worker exactly as it stops the web process."""

import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "owlai.settings")

app = Celery("owlai")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _log_startup_warnings(**kwargs) -> None:
    from governance.exposure import log_startup_warnings

    log_startup_warnings()
