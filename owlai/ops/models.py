from django.db import models


class SweepLease(models.Model):
    """One row per periodic sweep (turn recovery, approval expiry, digests,
    retention, ...). A process runs a sweep only after taking its lease with
    one conditional UPDATE (owlai.ops.leases.lease_take), so any number of
    workers and beats run each sweep at most once per lease period."""

    name = models.CharField(max_length=100, primary_key=True)
    holder = models.CharField(max_length=200, blank=True)
    expires_at = models.DateTimeField(null=True)
    last_started_at = models.DateTimeField(null=True)
    last_finished_at = models.DateTimeField(null=True)
    last_ok = models.BooleanField(null=True)
    runs = models.BigIntegerField(default=0)
    # Free-form state a sweep keeps between runs (the broker's run id).
    state = models.CharField(max_length=200, blank=True)


class ProcessHeartbeat(models.Model):
    """A beat or worker process says it is alive (read by /readyz)."""

    KIND_BEAT = "beat"
    KIND_WORKER = "worker"

    name = models.CharField(max_length=200, primary_key=True)
    kind = models.CharField(max_length=10, db_index=True)
    seen_at = models.DateTimeField()
