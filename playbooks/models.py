"""Playbooks: shared automations on the one run core.

A playbook holds typed parameters and an ordered list of nodes (JSON,
checked by playbooks.spec); a run of it is a conversation of its own (its
token vault and spill folder) with one run-core turn per node, origin
`playbook` (chat.turns.origins.PLAYBOOK) and the run's reference on every
audit row. Runs, pre-approvals and schedules refer to the playbook; audit
rows refer to runs by value only.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from governance.models import ConnectorTool, LlmModel, Role, Tier


class Playbook(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="playbooks", verbose_name=_("owner")
    )
    name = models.CharField(_("name"), max_length=200)
    description = models.TextField(_("description"), blank=True)
    # Fixed at creation: the tier of the conversation it was made from (or
    # of its first model); its model is always one of this tier.
    tier = models.CharField(_("tier"), max_length=10, choices=Tier.choices)
    model = models.ForeignKey(LlmModel, on_delete=models.PROTECT, related_name="+", verbose_name=_("model"))
    # [{"name", "label", "kind": text|number|date|choice, "required", "choices", "default"}]
    parameters = models.JSONField(_("parameters"), default=list, blank=True)
    # [{"key", "kind": agent|tool, "prompt"} | {"key", "kind": "tool", "tool", "arguments"}]
    nodes = models.JSONField(_("nodes"), default=list, blank=True)
    # Who may run it besides its owner (only the owner edits it).
    shared_roles = models.ManyToManyField(Role, blank=True, related_name="+", verbose_name=_("shared with roles"))
    shared_users = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="shared_playbooks", verbose_name=_("shared with users")
    )
    allow_overlap = models.BooleanField(_("runs may overlap"), default=False)
    # The conversation it was saved from (by value: the conversation may go).
    source_conversation_id = models.UUIDField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("playbook")
        verbose_name_plural = _("playbooks")
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class RunStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    WAITING_APPROVAL = "waiting_approval", _("Waiting for approval")
    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Stopped")
    # Refused before or between nodes: no identity, or the person may no
    # longer run it (recorded as a `playbook_run_refused` event).
    REFUSED = "refused", _("Refused")


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING_APPROVAL)


class Trigger(models.TextChoices):
    MANUAL = "manual", _("Started by a person")
    SCHEDULE = "schedule", _("Schedule")
    RERUN = "rerun", _("Re-run")


class PlaybookRun(models.Model):
    playbook = models.ForeignKey(Playbook, on_delete=models.CASCADE, related_name="runs", verbose_name=_("playbook"))
    # The person the run acts as (their roles when each call executes).
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="playbook_runs", verbose_name=_("runs as")
    )
    trigger = models.CharField(_("trigger"), max_length=10, choices=Trigger.choices, default=Trigger.MANUAL)
    schedule = models.ForeignKey(
        "PlaybookSchedule", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    rerun_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    parameters = models.JSONField(_("parameters"), default=dict, blank=True)
    # The tokens that masking the typed parameters minted in the run's vault
    # (playbooks.runs): a re-run takes back only their originals. A
    # token-shaped text typed into a parameter may later be minted by a
    # query result; its original is not the person's to re-use. None: a run
    # stored before this was recorded (a re-run refuses its tokens).
    parameter_tokens = models.JSONField(null=True, blank=True, editable=False)
    status = models.CharField(_("status"), max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    # Copied from the playbook when the run starts: an exclusive run is the
    # only active one of its playbook (a partial unique index, below).
    exclusive = models.BooleanField(default=True, editable=False)
    conversation_id = models.UUIDField(null=True, blank=True, editable=False)
    # The node running now (its index in `nodes`), set as the run advances.
    current_node = models.PositiveIntegerField(default=0, editable=False)
    # The nodes as they were when the run started (an edit does not change a run).
    nodes = models.JSONField(default=list, editable=False)
    error = models.TextField(_("reason"), blank=True)  # value-free
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        verbose_name = _("playbook run")
        verbose_name_plural = _("playbook runs")
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["playbook"],
                condition=Q(exclusive=True, status__in=["queued", "running", "waiting_approval"]),
                name="playbook_one_active_exclusive_run",
            )
        ]

    def __str__(self) -> str:
        return f"{self.playbook_id}#{self.pk}"

    @property
    def reference(self) -> str:
        """The run's reference on every audit row it writes (origin_ref):
        `<resource kind>:<id>`, which the audit screens link to its page."""
        return f"playbook_run:{self.pk}"


class NodeRun(models.Model):
    run = models.ForeignKey(PlaybookRun, on_delete=models.CASCADE, related_name="node_runs")
    index = models.PositiveIntegerField(_("step"))
    key = models.CharField(_("key"), max_length=40)
    kind = models.CharField(_("kind"), max_length=10)
    # The run-core turn that ran this node (by value, as audit rows do).
    turn_id = models.BigIntegerField(null=True, blank=True)
    status = models.CharField(_("status"), max_length=20, default="queued")
    # What the node was given (its prompt or tool arguments as rendered) and
    # its output: both as the model saw them, masked (tokens, not values).
    rendered_input = models.TextField(_("input"), blank=True)
    output = models.TextField(_("output"), blank=True)
    error = models.TextField(_("reason"), blank=True)
    started_at = models.DateTimeField(_("started"), auto_now_add=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        ordering = ["run_id", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="playbook_one_node_run_per_step")]


class PreApproval(models.Model):
    """A connector tool that a playbook's runs call without asking, for the
    definition it was granted under (an accepted change voids it) until it
    expires or is revoked."""

    playbook = models.ForeignKey(Playbook, on_delete=models.CASCADE, related_name="pre_approvals")
    connector_tool = models.ForeignKey(ConnectorTool, on_delete=models.CASCADE, related_name="+")
    definition_hash = models.CharField(max_length=64)
    expires_at = models.DateTimeField(_("expires"))
    granted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    granted_at = models.DateTimeField(_("granted"), auto_now_add=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    # When its expiry was put on the record (once).
    expiry_recorded_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("playbook pre-approval")
        verbose_name_plural = _("playbook pre-approvals")
        ordering = ["-granted_at"]


class ScheduleKind(models.TextChoices):
    CRON = "cron", _("Cron expression")
    INTERVAL = "interval", _("Interval")


class PlaybookSchedule(models.Model):
    """When a playbook runs by itself (as its owner). The timing is a
    django-celery-beat periodic task; `last_fired_at` makes a repeated or
    late delivery of the same due time start nothing twice."""

    playbook = models.ForeignKey(Playbook, on_delete=models.CASCADE, related_name="schedules")
    kind = models.CharField(_("kind"), max_length=10, choices=ScheduleKind.choices)
    cron = models.CharField(_("cron expression"), max_length=100, blank=True)
    every_minutes = models.PositiveIntegerField(_("every (minutes)"), null=True, blank=True)
    timezone = models.CharField(_("time zone"), max_length=64, default="Asia/Seoul")
    parameters = models.JSONField(_("parameters"), default=dict, blank=True)
    enabled = models.BooleanField(_("enabled"), default=True)
    periodic_task = models.OneToOneField(
        "django_celery_beat.PeriodicTask", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_fired_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("playbook schedule")
        verbose_name_plural = _("playbook schedules")


class Notification(models.Model):
    """A run that needs its person (waiting for an approval) or failed."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="playbook_notices")
    run = models.ForeignKey(PlaybookRun, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=20)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
