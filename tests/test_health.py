"""/healthz and /readyz (owlai.health): who may ask, and each readiness
check failing on its own fault."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from owlai.ops.models import ProcessHeartbeat
from tests.support.stack import free_port

pytestmark = pytest.mark.django_db


def test_healthz_answers_loopback_without_touching_the_database(django_assert_num_queries):
    with django_assert_num_queries(0):
        response = Client().get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_other_networks_are_refused_unless_they_bring_the_token(settings):
    outside = Client(REMOTE_ADDR="203.0.113.7")
    for path in ("/healthz", "/readyz", "/metrics"):
        assert outside.get(path).status_code == 403
    settings.OWLAI_OPS_TOKEN = "s3cret-ops-token"
    assert outside.get("/readyz", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert outside.get("/healthz", HTTP_AUTHORIZATION="Bearer s3cret-ops-token").status_code == 200
    settings.OWLAI_OPS_ALLOWED_NETWORKS = ["203.0.113.0/24"]
    assert outside.get("/healthz").status_code == 200


def test_ipv4_peers_of_a_dual_stack_listener_count_as_ipv4():
    assert Client(REMOTE_ADDR="::ffff:127.0.0.1").get("/healthz").status_code == 200
    assert Client(REMOTE_ADDR="::ffff:203.0.113.7").get("/healthz").status_code == 403


def test_a_malformed_allowlist_denies(settings):
    settings.OWLAI_OPS_ALLOWED_NETWORKS = ["not-a-network"]
    assert Client().get("/healthz").status_code == 403


def test_readyz_names_each_check(require_redis):
    response = Client().get("/readyz")
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ok"
    assert {"database", "redis", "migrations"} <= set(body["checks"])
    assert all(check["ok"] for check in body["checks"].values())


def test_readyz_fails_when_redis_is_unreachable(settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = Client().get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["ok"] is False and checks["database"]["ok"] is True


def test_readyz_wants_fresh_beat_and_worker_heartbeats(settings, require_redis):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # the production profile: beat and workers expected
    settings.OWLAI_BEAT_HEARTBEAT_SECONDS = 10
    settings.OWLAI_WORKER_HEARTBEAT_SECONDS = 10
    response = Client().get("/readyz")
    checks = response.json()["checks"]
    assert response.status_code == 503
    assert checks["beat"] == {"ok": False, "detail": "never seen"} and checks["worker"]["ok"] is False

    now = timezone.now()
    ProcessHeartbeat.objects.create(name="beat:h:1", kind="beat", seen_at=now - timedelta(seconds=5))
    ProcessHeartbeat.objects.create(name="worker:h:2", kind="worker", seen_at=now)
    response = Client().get("/readyz")
    assert response.status_code == 200, response.json()

    # Three beat periods without a beat heartbeat: beat is down.
    ProcessHeartbeat.objects.filter(kind="beat").update(seen_at=now - timedelta(seconds=31))
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["beat"]["ok"] is False
    assert response.json()["checks"]["worker"]["ok"] is True


def test_readyz_fails_while_a_migration_is_unapplied(monkeypatch, require_redis):
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    import owlai.health

    monkeypatch.setattr(owlai.health, "_migrations_applied", False)
    MigrationRecorder(connection).migration_qs.filter(app="ops").delete()  # rolled back after the test
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["migrations"] == {"ok": False, "detail": "1 unapplied"}
