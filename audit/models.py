"""Append-only audit records.

No foreign keys to what they describe: rows must outlive users, connections
and conversations (seed 003). Values, never results, are recorded.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Outcome(models.TextChoices):
    SUCCESS = "success", _("Success")
    DENIED = "denied", _("Denied")
    FAILED = "failed", _("Failed")


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
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_username} {self.tool} {self.outcome}"
