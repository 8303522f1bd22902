"""Prometheus metrics at /metrics (same protection as /readyz, owlai.health).

Gauges are read at scrape time from the database and the broker (a few
GROUP BY counts and one LLEN): every web process answers with the same
numbers, and nothing has to be counted along the hot paths of other layers.
Process-local counters (channel-layer drops) are the scraped process's own.

Models of the upper layers are found through the app registry by label, so
this module imports none of them."""

from __future__ import annotations

import logging
from bisect import bisect_right
from importlib import import_module

from django.apps import apps
from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.db.models.functions import Coalesce
from django.http import HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.utils import floatToGoString

from owlai.health import broker_client, ops_only

logger = logging.getLogger(__name__)

# kombu's Redis transport keeps a queue's messages of priority p>0 in
# "<queue>\x06\x16<p>" (its default priority steps).
_PRIORITY_SEP = "\x06\x16"
_PRIORITY_STEPS = (0, 3, 6, 9)

RECENT_TURNS = 1000
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class PlatformCollector:
    def collect(self):
        up = GaugeMetricFamily("owlai_metrics_source_up", "1 if the source could be read.", labels=["source"])
        for source in (
            self._turns,
            self._turn_failures,
            self._turn_durations,
            self._tool_calls,
            self._approvals,
            self._sweeps,
            self._heartbeats,
            self._queue,
            self._channel_drops,
        ):
            name = source.__name__.lstrip("_")
            try:
                families = list(source())
            except Exception as exc:
                # One failing source (Redis down) leaves the others and says so.
                logger.warning("metrics source %s failed: %s", name, exc)
                connection.close()
                up.add_metric([name], 0.0)
                continue
            yield from families
            up.add_metric([name], 1.0)
        yield up

    def _turns(self):
        family = GaugeMetricFamily("owlai_turns", "Turns stored, by status and origin.", labels=["status", "origin"])
        Turn = apps.get_model("chat", "Turn")
        for row in Turn.objects.values("status", "origin").annotate(n=Count("pk")).order_by():
            family.add_metric([row["status"], row["origin"]], row["n"])
        yield family

    def _turn_failures(self):
        """Failed turns by cause (the code the worker, the recovery job or a
        stopping worker stored): an audit record that could not be written
        (`audit_write`) apart from the model's faults (`model`), crashes of
        the run (`crash`), lost and stopped workers, turns nobody started."""
        family = GaugeMetricFamily(
            "owlai_turn_failures",
            "Failed turns stored, by cause (audit_write, model, crash, worker_lost, worker_stopped, ...).",
            labels=["cause"],
        )
        Turn = apps.get_model("chat", "Turn")
        rows = Turn.objects.filter(status="failed").values("failure").annotate(n=Count("pk")).order_by()
        for row in rows:
            family.add_metric([row["failure"] or "unrecorded"], row["n"])
        yield family

    def _turn_durations(self):
        """Of the last RECENT_TURNS finished turns (newest by id: an index
        scan, whatever the table's size), in one query: end to end; the wait
        from the turn's start to a worker's claim, which grows when workers
        are short; and, as the worker measured them (chat.turns.timing), the
        time spent waiting for the model and the rest of the time in a
        worker, the platform's own (context, checks, audit, masking, the
        tools' queries, events). Gauge histograms: the distribution now, not
        counters to take rates of."""
        Turn = apps.get_model("chat", "Turn")
        rows = (
            Turn.objects.filter(finished_at__isnull=False, started_at__isnull=False)
            .order_by("-pk")
            .values_list("created_at", "started_at", "finished_at", "run_ms", "model_ms")[:RECENT_TURNS]
        )
        total, waits, model, platform = [], [], [], []
        for created, started, finished, run_ms, model_ms in rows:
            total.append(max((finished - created).total_seconds(), 0.0))
            waits.append(max((started - created).total_seconds(), 0.0))
            if run_ms is not None:
                model.append((model_ms or 0) / 1000)
                platform.append(max(run_ms - (model_ms or 0), 0) / 1000)
        last = f"last {RECENT_TURNS} finished turns"
        yield _gauge_histogram("owlai_recent_turn_duration_seconds", f"Turn start to end, {last}.", total)
        yield _gauge_histogram(
            "owlai_recent_turn_queue_wait_seconds", f"Turn start to a worker's claim, {last}.", waits
        )
        yield _gauge_histogram(
            "owlai_recent_turn_model_wait_seconds", f"Time a turn waited for its model, {last} (measured).", model
        )
        yield _gauge_histogram(
            "owlai_recent_turn_platform_seconds",
            f"Time a turn spent in a worker not waiting for its model, {last} (measured).",
            platform,
        )

    def _tool_calls(self):
        family = GaugeMetricFamily(
            "owlai_tool_calls",
            "Audited tool calls (still in the audit trail), by resource kind and outcome; "
            "a started call counts under its recorded outcome, or 'started' while it has none.",
            labels=["kind", "outcome"],
        )
        ToolCallAudit = apps.get_model("audit", "ToolCallAudit")
        rows = (
            ToolCallAudit.objects.annotate(final_outcome=Coalesce("final__outcome", "outcome"))
            .values("resource_kind", "final_outcome")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for row in rows:
            family.add_metric([row["resource_kind"], row["final_outcome"]], row["n"])
        yield family

    def _approvals(self):
        ToolApproval = apps.get_model("chat", "ToolApproval")
        yield GaugeMetricFamily(
            "owlai_approvals_waiting",
            "Tool calls waiting for a user's approval.",
            value=ToolApproval.objects.filter(status="pending").count(),
        )

    def _sweeps(self):
        from owlai.ops.models import SweepLease

        started = GaugeMetricFamily(
            "owlai_sweep_last_started_timestamp_seconds",
            "When each periodic sweep (recovery, expiry, digest, ...) last started, by any process.",
            labels=["sweep"],
        )
        finished = GaugeMetricFamily(
            "owlai_sweep_last_finished_timestamp_seconds", "When each sweep last finished.", labels=["sweep"]
        )
        ok = GaugeMetricFamily("owlai_sweep_last_ok", "1 if the sweep's last run succeeded.", labels=["sweep"])
        runs = CounterMetricFamily("owlai_sweep_runs", "Runs of each sweep, all processes.", labels=["sweep"])
        for row in SweepLease.objects.exclude(last_started_at=None):
            started.add_metric([row.name], row.last_started_at.timestamp())
            runs.add_metric([row.name], row.runs)
            if row.last_finished_at is not None:
                finished.add_metric([row.name], row.last_finished_at.timestamp())
                ok.add_metric([row.name], 1.0 if row.last_ok else 0.0)
        yield from (started, finished, ok, runs)

    def _heartbeats(self):
        from owlai.ops.leases import latest_heartbeat
        from owlai.ops.models import ProcessHeartbeat

        family = GaugeMetricFamily(
            "owlai_heartbeat_age_seconds",
            "Seconds since the youngest heartbeat of a beat or worker process.",
            labels=["process"],
        )
        for kind in (ProcessHeartbeat.KIND_BEAT, ProcessHeartbeat.KIND_WORKER):
            seen = latest_heartbeat(kind)
            if seen is not None:
                family.add_metric([kind], (timezone.now() - seen).total_seconds())
        yield family

    def _queue(self):
        if not settings.REDIS_URL:
            return
        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        names = [queue if step == 0 else f"{queue}{_PRIORITY_SEP}{step}" for step in _PRIORITY_STEPS]
        with broker_client() as client:
            depth = sum(client.llen(name) for name in names)
        yield GaugeMetricFamily("owlai_queue_depth", "Messages waiting in the broker queue.", value=depth)

    def _channel_drops(self):
        # The configured layer's module (chat.layers in both profiles) keeps
        # the process's DropCounter; another layer has none to report.
        backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
        drops = getattr(import_module(backend.rsplit(".", 1)[0]), "DROPS", None)
        if drops is None:
            return
        family = CounterMetricFamily(
            "owlai_channel_layer_dropped", "Channel-layer messages dropped (a full socket queue), this process."
        )
        family.add_metric([], drops.total)
        yield family


def _gauge_histogram(name: str, doc: str, values: list[float]) -> GaugeHistogramMetricFamily:
    ordered = sorted(values)
    buckets = [(floatToGoString(le), float(bisect_right(ordered, le))) for le in DURATION_BUCKETS]
    buckets.append(("+Inf", float(len(values))))
    return GaugeHistogramMetricFamily(name, doc, buckets=buckets, gsum_value=sum(values))


_REGISTRY = CollectorRegistry(auto_describe=False)
_REGISTRY.register(PlatformCollector())


@ops_only
def metrics_view(request):
    return HttpResponse(generate_latest(_REGISTRY), content_type=CONTENT_TYPE_LATEST)
