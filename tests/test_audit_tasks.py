"""The beat schedule runs the digest and retention jobs by their task names."""

from __future__ import annotations

import pytest
from django.conf import settings

from audit.models import AuditDigest
from audit.services import tool_call_audit_write
from owlai.celery import app


def test_beat_schedule_names_registered_tasks():
    app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in app.tasks


@pytest.mark.django_db
def test_seal_task_creates_digests(monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    import audit.digest

    tool_call_audit_write(actor_id=1, actor_username="u", tool="run_sql", outcome="success", sql_text="SELECT 1")
    later = timezone.now() + timedelta(seconds=30)
    real = audit.digest.seal_new_rows
    monkeypatch.setattr("audit.tasks.seal_new_rows", lambda: real(now=later))
    app.tasks["audit.seal_new_rows"].apply()
    assert AuditDigest.objects.filter(table="audit_toolcallaudit").count() == 1
