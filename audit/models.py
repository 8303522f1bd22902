"""Append-only audit records.

No foreign keys to what they describe: rows must outlive users, connections
and conversations. Values, never results, are recorded.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from audit import tables
from audit.event_types import KIND_MAX_LENGTH, EventKind, event_type_label  # noqa: F401 (EventKind: re-exported)
from owlai.times import local_iso


class Outcome(models.TextChoices):
    SUCCESS = "success", _("Success")
    DENIED = "denied", _("Denied")
    FAILED = "failed", _("Failed")
    # The attempt row of a call that reaches a customer database: written
    # (and committed) before the call runs; the outcome is a ToolCallOutcome.
    STARTED = "started", _("Started")


# What the screens show for a started call whose outcome never arrived (the
# worker died, the outcome could not be written): itself worth knowing.
NO_OUTCOME = "no_outcome"
NO_OUTCOME_LABEL = _("no outcome recorded")
FINAL_OUTCOMES = (Outcome.SUCCESS, Outcome.DENIED, Outcome.FAILED)


class Origin(models.TextChoices):
    CHAT = "chat", _("Chat")
    PLAYBOOK = "playbook", _("Playbook")


class ToolCallAudit(models.Model):
    """One row per tool call that touched (or tried to touch) company data."""

    # SQL longer than this is cut; `sql_truncated` says so (README documents it).
    SQL_MAX_CHARS = 10_000

    created_at = models.DateTimeField(_("time"), auto_now_add=True, db_index=True)
    actor_id = models.BigIntegerField(_("user id"), null=True)
    actor_username = models.CharField(_("user"), max_length=150, blank=True)
    tool = models.CharField(_("tool"), max_length=100)
    resource_kind = models.CharField(_("resource kind"), max_length=30, default="db_connection")
    resource_id = models.BigIntegerField(_("resource id"), null=True)
    resource_name = models.CharField(_("resource"), max_length=200, blank=True)
    outcome = models.CharField(_("outcome"), max_length=10, choices=Outcome.choices)
    reason = models.TextField(_("reason"), blank=True)
    row_count = models.IntegerField(_("rows returned"), null=True, blank=True)
    sql_text = models.TextField(_("SQL"), blank=True)
    sql_truncated = models.BooleanField(_("SQL truncated"), default=False)
    tables = models.JSONField(_("tables read"), default=list, blank=True)
    origin = models.CharField(_("origin"), max_length=20, choices=Origin.choices, default=Origin.CHAT)
    origin_ref = models.CharField(_("origin reference"), max_length=100, blank=True)
    conversation_id = models.UUIDField(_("conversation id"), null=True, blank=True)
    turn_id = models.BigIntegerField(_("turn id"), null=True, blank=True)
    duration_ms = models.FloatField(_("duration (ms)"), null=True, blank=True)

    class Meta:
        verbose_name = _("tool call record")
        verbose_name_plural = _("tool call records")
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["actor_id", "-created_at"], name="audit_tc_actor_time"),
            models.Index(fields=["resource_kind", "resource_id", "-created_at"], name="audit_tc_resource_time"),
            models.Index(fields=["outcome", "-created_at"], name="audit_tc_outcome_time"),
            # The screens filter by user name and connection name (text inputs).
            models.Index(fields=["actor_username", "-created_at"], name="audit_tc_username_time"),
            models.Index(fields=["resource_name", "-created_at"], name="audit_tc_resname_time"),
        ]

    def __str__(self) -> str:
        # Not the outcome: a started call's outcome lives in its outcome record.
        return f"{local_iso(self.created_at)} {self.actor_username} {self.tool}"

    @property
    def outcome_record(self) -> ToolCallOutcome | None:
        """The outcome record of a started call (None: not started, or no outcome arrived)."""
        if self.outcome != Outcome.STARTED:
            return None
        try:
            return self.final
        except ToolCallOutcome.DoesNotExist:
            return None

    @property
    def call_outcome(self) -> str:
        """The call's outcome: its own (a call refused before running has one
        record), else its outcome record's, else NO_OUTCOME."""
        if self.outcome != Outcome.STARTED:
            return self.outcome
        record = self.outcome_record
        return record.outcome if record else NO_OUTCOME

    @property
    def call_row_count(self) -> int | None:
        record = self.outcome_record
        return record.row_count if record else self.row_count

    @property
    def call_reason(self) -> str:
        record = self.outcome_record
        return record.reason if record else self.reason


class ToolCallOutcome(models.Model):
    """The outcome of a started tool call (its ToolCallAudit row with outcome
    `started`), recorded after the call ran. Append-only like the attempt;
    one per attempt (unique). The link is a plain column (no database foreign
    key): retention deletes the two tables independently."""

    created_at = models.DateTimeField(_("time"), auto_now_add=True, db_index=True)
    attempt = models.OneToOneField(
        ToolCallAudit,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="final",
        verbose_name=_("attempt"),
    )
    outcome = models.CharField(_("outcome"), max_length=10, choices=[(o.value, o.label) for o in FINAL_OUTCOMES])
    reason = models.TextField(_("reason"), blank=True)
    row_count = models.IntegerField(_("rows returned"), null=True, blank=True)
    duration_ms = models.FloatField(_("duration (ms)"), null=True, blank=True)

    class Meta:
        verbose_name = _("tool call outcome")
        verbose_name_plural = _("tool call outcomes")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{local_iso(self.created_at)} #{self.attempt_id} {self.get_outcome_display()}"


class ResourceKind(models.TextChoices):
    """What an audit record's `resource_kind` names: one vocabulary for every
    writer (tests/test_vocabulary.py checks the literals in the code)."""

    TOOL_CALL = "tool_call", _("Tool call records")
    SQL_EXECUTION = "sql_execution", _("SQL execution history")
    ADMIN_EVENT = "admin_event", _("Admin events")
    USER = "user", _("User")
    GROUP = "group", _("Group")
    CONVERSATION = "conversation", _("Conversation")
    DB_CONNECTION = "db_connection", _("DB connection")
    DOCUMENT_COLLECTION = "document_collection", _("Document collection")
    DOCUMENT = "document", _("Document")
    COLUMN_CLASSIFICATION = "column_classification", _("Column classification")
    ROLE = "role", _("Role")
    LLM_MODEL = "llm_model", _("Model")
    FEATURE_DEFAULT = "feature_default", _("Feature default model")
    TURN_PREVIEW = "turn_preview", _("Turn preview")
    CLASSIFICATION_COVERAGE = "classification_coverage", _("Classification coverage")
    CONNECTOR = "connector", _("Connector")
    CONNECTOR_TOOL = "connector_tool", _("Connector tool")
    ALWAYS_ALLOW = "always_allow", _("Always-allowed tool")
    SPILL_FILE = "spill_file", _("Spilled result")
    API_TOKEN = "api_token", _("API token")
    SHARE_LINK = "share_link", _("Share link")
    ANSWER_FEEDBACK = "answer_feedback", _("Answer feedback")
    PLAYBOOK = "playbook", _("Playbook")
    PLAYBOOK_RUN = "playbook_run", _("Playbook run")
    PLAYBOOK_PRE_APPROVAL = "playbook_pre_approval", _("Playbook pre-approval")
    PLAYBOOK_SCHEDULE = "playbook_schedule", _("Playbook schedule")


def resource_kind_label(value: str) -> str:
    """The kind in words; an unknown (older or newer) code as it is."""
    return str(dict(ResourceKind.choices).get(value, value)) if value else ""


class AuditEvent(models.Model):
    """Administrative events: who looked at or changed what.

    Describes resources by kind and id, never by foreign key, and never holds
    the content that was viewed or revealed.
    """

    created_at = models.DateTimeField(_("time"), auto_now_add=True, db_index=True)
    # No database choices: the types live in audit.event_types (a new one
    # needs no migration).
    kind = models.CharField(_("event"), max_length=KIND_MAX_LENGTH)
    actor_id = models.BigIntegerField(_("user id"), null=True)
    actor_username = models.CharField(_("user"), max_length=150, blank=True)
    ip = models.GenericIPAddressField(_("IP address"), null=True, blank=True)
    user_agent = models.CharField(_("browser"), max_length=300, blank=True)
    resource_kind = models.CharField(_("resource kind"), max_length=50, blank=True)
    resource_id = models.CharField(_("resource id"), max_length=64, blank=True)
    owner_id = models.BigIntegerField(_("owner id"), null=True, blank=True)
    owner_username = models.CharField(_("owner"), max_length=150, blank=True)
    row_count = models.IntegerField(_("rows"), null=True, blank=True)
    filters = models.JSONField(_("filters"), default=dict, blank=True)
    details = models.JSONField(_("details"), default=dict, blank=True)

    class Meta:
        verbose_name = _("admin event")
        verbose_name_plural = _("admin events")
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["kind", "-created_at"], name="audit_ev_kind_time"),
            models.Index(fields=["actor_id", "-created_at"], name="audit_ev_actor_time"),
            models.Index(fields=["actor_username", "-created_at"], name="audit_ev_username_time"),
        ]

    def __str__(self) -> str:
        return f"{local_iso(self.created_at)} {self.actor_username} {self.kind_label}"

    @property
    def kind_label(self) -> str:
        return event_type_label(self.kind)


class AuditDigest(models.Model):
    """A keyed hash over a range of audit rows, chained to the previous digest
    of the same table: a changed or deleted row no longer matches."""

    created_at = models.DateTimeField(_("time"), auto_now_add=True)
    table = models.CharField(_("table"), max_length=100)
    first_id = models.BigIntegerField(_("first row id"))
    last_id = models.BigIntegerField(_("last row id"))
    row_count = models.IntegerField(_("rows"))
    previous = models.CharField(_("previous digest"), max_length=64, blank=True)
    digest = models.CharField(_("digest"), max_length=64)

    class Meta:
        verbose_name = _("audit digest")
        verbose_name_plural = _("audit digests")
        ordering = ["table", "last_id"]
        indexes = [models.Index(fields=["table", "-last_id"], name="audit_digest_table_last")]

    def __str__(self) -> str:
        return f"{self.table} {self.first_id}-{self.last_id}"


# The audit tables are named once, in audit.tables (re-exported here).
AUDIT_TABLES = tables.AUDIT_TABLES
DIGESTED_TABLES = tables.DIGESTED_TABLES


class SqlExecution(ToolCallAudit):
    """The SQL execution history screen: tool-call rows of `run_sql`."""

    class Meta:
        proxy = True
        verbose_name = _("SQL execution")
        verbose_name_plural = _("SQL execution history")
