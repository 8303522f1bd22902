"""Sweep leases and process heartbeats.

A sweep runs where its lease was taken: `lease_take` is one conditional
UPDATE (`expires_at` passed), so of any number of workers and beats trying
at once exactly one gets it, and no other gets it again before the period
is over. The sweeps themselves stay idempotent (their own conditional
UPDATEs); the lease keeps them from running twice per period (a digest, a
re-enqueue, a schedule)."""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from owlai.ops.models import ProcessHeartbeat, SweepLease

logger = logging.getLogger(__name__)


def process_name(kind: str) -> str:
    return f"{kind}:{socket.gethostname()}:{os.getpid()}"


def lease_take(name: str, *, seconds: float, holder: str) -> bool:
    """Take the sweep's lease for `seconds` if nobody holds it; True if taken."""
    if _take(name, seconds, holder):
        return True
    if SweepLease.objects.filter(name=name).exists():
        return False
    try:
        with transaction.atomic():
            SweepLease.objects.create(name=name)
    except IntegrityError:
        pass  # created by another process at the same moment
    return _take(name, seconds, holder)


def _take(name: str, seconds: float, holder: str) -> bool:
    # The database's clock, not this host's: hosts whose clocks differ still
    # agree on when a lease is over.
    free = Q(expires_at__isnull=True) | Q(expires_at__lte=Now())
    return bool(
        SweepLease.objects.filter(free, name=name).update(
            holder=holder,
            expires_at=Now() + timedelta(seconds=seconds),
            last_started_at=Now(),
            runs=F("runs") + 1,
        )
    )


def lease_done(name: str, *, ok: bool) -> None:
    SweepLease.objects.filter(name=name).update(last_finished_at=timezone.now(), last_ok=ok)


def heartbeat(name: str, kind: str) -> None:
    """This process is alive (one row per process, upserted)."""
    now = timezone.now()
    if not ProcessHeartbeat.objects.filter(name=name).update(seen_at=now):
        ProcessHeartbeat.objects.update_or_create(name=name, defaults={"kind": kind, "seen_at": now})


def heartbeats_prune(older_than_seconds: float) -> None:
    """Rows of processes gone long ago (every worker restart adds one)."""
    ProcessHeartbeat.objects.filter(seen_at__lt=timezone.now() - timedelta(seconds=older_than_seconds)).delete()


def latest_heartbeat(kind: str):
    row = ProcessHeartbeat.objects.filter(kind=kind).order_by("-seen_at").first()
    return row.seen_at if row else None
