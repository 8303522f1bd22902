"""Health endpoints for load balancers and operators.

- `/healthz`: the process answers (no database, no Redis);
- `/readyz`: database reachable, Redis reachable (production profile),
  migrations applied, a beat heartbeat younger than 3 beat periods and a
  worker heartbeat younger than 3 worker periods (owlai.ops).

Both answer 200 or 503 with a JSON body naming each check; both, and
/metrics, only to a request with the OWLAI_OPS_TOKEN bearer token or from an
address in OWLAI_OPS_ALLOWED_NETWORKS (`ops_allowed`)."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from functools import wraps

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)

_migrations_applied = False  # once true, stays true for the process


def ops_allowed(request) -> bool:
    """Fail closed: a malformed address or setting denies."""
    token = settings.OWLAI_OPS_TOKEN
    if token:
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer ") and hmac.compare_digest(header[7:].encode(), token.encode()):
            return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
        # A dual-stack listener reports IPv4 peers as ::ffff:a.b.c.d.
        address = getattr(address, "ipv4_mapped", None) or address
        return any(address in ipaddress.ip_network(net, strict=False) for net in settings.OWLAI_OPS_ALLOWED_NETWORKS)
    except ValueError:
        return False


def ops_only(view):
    @wraps(view)
    def guarded(request, *args, **kwargs):
        if not ops_allowed(request):
            return JsonResponse({"error": "forbidden"}, status=403)
        return view(request, *args, **kwargs)

    return require_GET(never_cache(guarded))


@ops_only
def healthz(request):
    return JsonResponse({"status": "ok"})


@ops_only
def readyz(request):
    checks = readiness_checks()
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"status": "ok" if ok else "fail", "checks": checks}, status=200 if ok else 503)


def readiness_checks() -> dict[str, dict]:
    checks = {"database": _check(_database), "redis": _check(_redis), "migrations": _check(_migrations)}
    if not settings.CELERY_TASK_ALWAYS_EAGER:  # no beat and workers in the embedded profile
        checks["beat"] = _check(lambda: _heartbeat("beat", settings.OWLAI_BEAT_HEARTBEAT_SECONDS))
        checks["worker"] = _check(lambda: _heartbeat("worker", settings.OWLAI_WORKER_HEARTBEAT_SECONDS))
    return checks


def _check(probe) -> dict:
    try:
        detail = probe()
    except Exception as exc:
        if isinstance(exc, DatabaseError):
            connection.close()  # the next probe reconnects
        logger.warning("readiness check failed: %s", exc)
        return {"ok": False, "detail": type(exc).__name__}
    if detail is None:
        return {"ok": True}
    ok, text = detail
    return {"ok": ok, "detail": text}


def _database():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


def _redis():
    if not settings.REDIS_URL:
        return True, "not configured"
    with broker_client() as client:
        client.ping()
    return None


def broker_client():
    """A short-lived Redis client of the broker, with short timeouts (the
    kombu connection would retry for as long as the worker's settings say)."""
    import contextlib

    import redis

    url = settings.REDIS_URL

    @contextlib.contextmanager
    def client():
        if url.startswith(("redis://", "rediss://", "unix://")):
            c = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
            try:
                yield c
            finally:
                c.close()
        else:  # sentinel:// and friends: through kombu's transport
            from owlai.celery import app

            with app.connection_for_read() as conn:
                conn.ensure_connection(max_retries=1)
                yield conn.default_channel.client

    return client()


def _migrations():
    global _migrations_applied
    if _migrations_applied:
        return None
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        return False, f"{len(plan)} unapplied"
    _migrations_applied = True
    return None


def _heartbeat(kind: str, period: float):
    from owlai.ops.leases import latest_heartbeat

    seen = latest_heartbeat(kind)
    if seen is None:
        return False, "never seen"
    age = (timezone.now() - seen).total_seconds()
    return age < 3 * period, f"{age:.0f}s ago"
