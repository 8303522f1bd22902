"""Conversations, turns and messages.

Audit rows refer to conversations and turns by plain value, never by foreign
key, so deleting a conversation leaves the record of what it touched.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from governance.models import Connector, ConnectorTool, LlmModel, Tier


class ConversationQuerySet(models.QuerySet):
    def live(self) -> ConversationQuerySet:
        """Not deleted by their owner (deleted ones wait for the purge, hidden)."""
        return self.filter(deleted_at__isnull=True)

    def due_for_purge(self, *, now, idle_days: int, deleted_days: int) -> ConversationQuerySet:
        """A conversation goes `idle_days` after its last activity,
        or `deleted_days` after its owner deleted it."""
        from datetime import timedelta

        # Deleting only ever shortens a conversation's life: the idle rule
        # holds for deleted ones too.
        return self.filter(
            models.Q(deleted_at__lte=now - timedelta(days=deleted_days))
            | models.Q(updated_at__lte=now - timedelta(days=idle_days))
        )


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations", verbose_name=_("owner")
    )
    title = models.CharField(_("title"), max_length=200, blank=True)
    # The model the user picked for this conversation (None: feature default).
    model = models.ForeignKey(
        LlmModel, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("model")
    )
    # Pinned by the first turn that starts; never changes afterwards.
    tier = models.CharField(_("tier"), max_length=10, choices=Tier.choices, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    # Last activity: every turn saves the conversation (the idle purge counts from here).
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    # Set when the owner deletes it: hidden at once, its token vault deleted at
    # once, the rest purged `OWLAI_CONVERSATION_DELETED_DAYS` later.
    deleted_at = models.DateTimeField(_("deleted"), null=True, blank=True, db_index=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        # Not the title: it is taken from the first message, and admin pages
        # (breadcrumbs, headings) must never show message content.
        return str(self.id)

    @property
    def group_name(self) -> str:
        """Channel-layer group that receives this conversation's turn events."""
        return f"conversation.{self.id.hex}"


class TurnStatus(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    COMPLETED = "completed", _("Completed")
    REJECTED = "rejected", _("Rejected")
    FAILED = "failed", _("Failed")
    # The owner pressed Stop: the worker stopped before its next model or
    # tool call; what already ran stays, audited.
    CANCELLED = "cancelled", _("Cancelled")
    # A connector call waits for the user's approval: the loop's state is
    # stored on the turn and no worker holds it; the decision (or the expiry
    # job) queues it again and a new task continues from that state.
    WAITING_APPROVAL = "waiting_approval", _("Waiting for approval")


# A turn in one of these holds its conversation: no other turn may start.
ACTIVE_TURN_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING, TurnStatus.WAITING_APPROVAL)


class Turn(models.Model):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    status = models.CharField(_("status"), max_length=20, choices=TurnStatus.choices, default=TurnStatus.QUEUED)
    requested_model = models.CharField(_("requested model"), max_length=300, blank=True)
    # Snapshot of what the turn actually ran on, resolved before anything else.
    model_name = models.CharField(_("model"), max_length=300, blank=True)
    provider_name = models.CharField(_("provider"), max_length=100, blank=True)
    tier = models.CharField(_("tier"), max_length=10, choices=Tier.choices, blank=True)
    error = models.TextField(_("error"), blank=True)
    # UI language of the user who started the turn; the worker answers in it.
    language = models.CharField(max_length=10, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    # Set by the one worker whose conditional UPDATE (queued -> running) won.
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    # Renewed by the running worker every OWLAI_TURN_HEARTBEAT_SECONDS; a
    # running turn whose heartbeat went stale lost its worker (chat.turns.recovery).
    heartbeat_at = models.DateTimeField(_("heartbeat"), null=True, blank=True)
    # A queued turn no worker claimed is handed to the queue again once
    # (its message may have been lost with Redis), then failed.
    requeued_at = models.DateTimeField(_("requeued"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    # Set by the owner's Stop (`turn.cancel`); the worker reads it before
    # every model and tool call (the database, not Redis, carries the request,
    # so it reaches whichever worker runs the turn).
    cancel_requested_at = models.DateTimeField(_("stop requested"), null=True, blank=True)
    # When the turn was last handed to the queue (None: at creation). A turn
    # queued again after an approval counts its queue wait from here.
    queued_at = models.DateTimeField(_("queued"), null=True, blank=True)
    # While waiting for an approval: the agent loop's state (this turn's
    # messages so far, the tool calls not yet run, model calls made), from
    # which the resuming task continues without re-running anything.
    loop_state = models.JSONField(_("loop state"), null=True, blank=True)
    # The number the turn's last event took: the journal takes the next ones
    # with a conditional UPDATE of this column (chat.turns.journal).
    last_seq = models.PositiveIntegerField(default=0, editable=False)
    # Where the run comes from (chat.turns.origins) and which run of it:
    # carried to every audit row the run writes.
    origin = models.CharField(_("origin"), max_length=20, default="chat")
    origin_ref = models.CharField(_("origin reference"), max_length=100, blank=True)
    # Regenerate and edit: this turn is a new version of an earlier turn of
    # the same conversation (its answer regenerated, or its message edited
    # and sent again). The earlier one stays shown as an earlier version and
    # leaves the model's history; the new one is an ordinary turn (started,
    # run and audited as any other).
    supersedes = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("supersedes")
    )
    # Measured by the worker (chat.turns.timing), summed over the parts of a
    # resumed run: milliseconds in a worker, and of those, waiting for the
    # model; the rest is the platform's (metrics: owlai.metrics).
    run_ms = models.PositiveIntegerField(null=True, blank=True, editable=False)
    model_ms = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # Why a failed turn failed, a fixed code (audit_write, model, crash,
    # worker_lost, worker_stopped, ...): what /metrics counts failures by.
    failure = models.CharField(max_length=30, blank=True, editable=False)

    class Meta:
        verbose_name = _("turn")
        verbose_name_plural = _("turns")
        ordering = ["created_at", "id"]
        indexes = [
            # The recovery job looks for active turns only; keep that scan small.
            models.Index(
                fields=["status", "heartbeat_at"],
                name="chat_turn_active_idx",
                condition=models.Q(status__in=["queued", "running"]),
            )
        ]


class TurnEvent(models.Model):
    """One event of a turn as its sockets saw it (or should have): the
    database is the truth, the channel layer only the transport. `seq`
    numbers a turn's events from 1 without gaps, so a client that sees a gap
    asks for the rest (`sync`) and gets it from here. Streaming text is
    stored as coalesced `message.delta` events, never one row per token."""

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("turn event")
        verbose_name_plural = _("turn events")
        ordering = ["turn_id", "seq"]
        constraints = [models.UniqueConstraint(fields=["turn", "seq"], name="uniq_turn_event_seq")]

    def as_frame(self) -> dict:
        """The websocket frame: what was sent live, byte for byte."""
        return {"type": self.type, "turn_id": self.turn_id, "seq": self.seq, **self.payload}


class MessageRole(models.TextChoices):
    USER = "user", _("User")
    ASSISTANT = "assistant", _("Assistant")
    TOOL = "tool", _("Tool result")


class Message(models.Model):
    """One entry of the model-facing history. Tool results are stored as the
    model saw them (sanitised), because later turns send them again."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(_("role"), max_length=20, choices=MessageRole.choices)
    content = models.TextField(_("content"), blank=True)
    tool_calls = models.JSONField(_("tool calls"), default=list, blank=True)
    tool_call_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        ordering = ["created_at", "id"]


class VaultEntry(models.Model):
    """One masked value of one conversation: its token number and the original,
    encrypted. Looked up by a keyed digest of the normalised value, so the
    same value gets the same token within the conversation; deleted with it."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="vault_entries")
    kind = models.CharField(max_length=20)
    number = models.PositiveIntegerField()
    digest = models.CharField(max_length=64)
    ciphertext = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("vault entry")
        verbose_name_plural = _("vault entries")
        constraints = [
            models.UniqueConstraint(fields=["conversation", "kind", "number"], name="uniq_vault_token"),
            models.UniqueConstraint(fields=["conversation", "kind", "digest"], name="uniq_vault_value"),
        ]


class UrlReference(models.Model):
    """One credentialed URL of one conversation, behind the reference the
    model saw (`[URL-3]`). The model needs to know that a link exists, never
    the secret in it: the URL is encrypted at rest and found by a keyed
    digest (the same URL gets the same reference within the conversation).
    Numbers count per conversation, so a reference means nothing elsewhere;
    deleted with the conversation (and at once when its owner deletes it)."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="url_references")
    number = models.PositiveIntegerField()
    digest = models.CharField(max_length=64)
    ciphertext = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("URL reference")
        verbose_name_plural = _("URL references")
        constraints = [
            models.UniqueConstraint(fields=["conversation", "number"], name="uniq_url_reference_number"),
            models.UniqueConstraint(fields=["conversation", "digest"], name="uniq_url_reference_digest"),
        ]


class ApprovalStatus(models.TextChoices):
    PENDING = "pending", _("Waiting for the user")
    APPROVED = "approved", _("Approved")
    ALWAYS_ALLOWED = "always_allowed", _("Always allowed")
    DENIED = "denied", _("Denied")
    EXPIRED = "expired", _("Expired")


class ToolApproval(models.Model):
    """One connector call that waited for its user's approval (chat.approvals).

    The arguments are kept as the user may see them (personal data as this
    conversation's tokens) and by a digest of the call as the model wrote it:
    the digest recognises the same call again (a repeated denial blocks it),
    the masked copy is what the approval request shows. Deleted with the
    conversation; the decisions themselves are audit events (without arguments)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="tool_approvals")
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_approvals")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tool_approvals", verbose_name=_("user")
    )
    tool_call_id = models.CharField(max_length=100, blank=True)
    connector = models.ForeignKey(
        Connector, on_delete=models.SET_NULL, null=True, related_name="+", verbose_name=_("connector")
    )
    connector_name = models.CharField(_("connector"), max_length=30)
    connector_tool = models.ForeignKey(
        ConnectorTool, on_delete=models.SET_NULL, null=True, related_name="+", verbose_name=_("connector tool")
    )
    # The name the model called (`<connector>__<tool>`).
    tool_name = models.CharField(_("tool"), max_length=100)
    arguments = models.JSONField(_("arguments (masked)"), default=dict)
    arguments_digest = models.CharField(max_length=64)
    # The tool's pinned definition when the user was asked: an "always allow"
    # given here holds for this definition only.
    definition_hash = models.CharField(max_length=64, blank=True)
    status = models.CharField(
        _("status"), max_length=20, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    created_at = models.DateTimeField(_("requested"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires"))
    decided_at = models.DateTimeField(_("decided"), null=True, blank=True)
    # Set when the resumed call took the decision: a decision answers one call.
    used_at = models.DateTimeField(_("used"), null=True, blank=True)

    class Meta:
        verbose_name = _("tool approval")
        verbose_name_plural = _("tool approvals")
        ordering = ["-created_at"]
        indexes = [
            # Denials of the same call in a conversation (auto-block).
            models.Index(
                fields=["conversation", "tool_name", "arguments_digest", "status"], name="chat_appr_same_call"
            ),
            # The expiry job's scan.
            models.Index(fields=["expires_at"], name="chat_appr_pending_exp", condition=models.Q(status="pending")),
        ]


class AlwaysAllow(models.Model):
    """A user's standing "always allow" for one connector tool: later calls of
    that tool by that user run without asking (each one an `auto-approved`
    event). Bound to the tool's definition as it was approved: once an admin
    approves a changed definition, the user is asked again. Revoked, never
    deleted, by the user (their page) or an admin (the admin)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="always_allows", verbose_name=_("user")
    )
    connector_tool = models.ForeignKey(
        ConnectorTool, on_delete=models.CASCADE, related_name="always_allows", verbose_name=_("connector tool")
    )
    definition_hash = models.CharField(_("definition hash"), max_length=64)
    created_at = models.DateTimeField(_("allowed since"), auto_now_add=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("revoked by"),
    )

    class Meta:
        verbose_name = _("always-allowed tool")
        verbose_name_plural = _("always-allowed tools")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "connector_tool"],
                condition=models.Q(revoked_at__isnull=True),
                name="uniq_active_always_allow",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.connector_tool}"
