"""Approvals of connector calls (a tool whose install policy is `require
approval`): a person approves right before the call runs, because a model
told to "confirm first" may send the mail anyway.

The approval gate (`ConnectorApprovalGate`, given to each run's tool session
by the runner: chat.executor.session.ToolSession.approvals) answers for one
call in the executor's APPROVAL stage, after the call's own argument checks
(nobody is asked to approve a call that would be refused anyway), in this
order:

1. the decision the user gave for this very call, when the turn resumes
   after it (the approval id travels in the run's restored session):
   approved / always allowed -> the call runs; denied or expired -> refused
   (a `denied` row, the model is told);
2. the same call (tool and arguments digest) denied
   OWLAI_APPROVAL_AUTO_BLOCK_DENIALS times in this conversation -> refused
   without asking (`approval_auto_blocked`);
3. the user's "always allow" of the tool (for its current definition) ->
   runs without asking (`approval_auto_approved`);
4. otherwise the turn waits: ApprovalSuspends. The turn runner
   (chat.turns.runner) stores a pending ToolApproval, the loop's state and the
   `approval.requested` event in one transaction, and the worker task ends:
   a waiting turn holds no worker. The user's decision
   (`tool_approval_decide`: websocket `approval.decide`, HTTP API) or the
   expiry job (`tool_approvals_expire`) queues the turn again, and a new
   task continues from the stored state.

Arguments are shown to the user, and stored with the request, masked (this
conversation's tokens); audit events never carry them (nor their digest).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from audit.events import audit_event_write
from audit.models import EventKind, Outcome, ResourceKind
from audit.services import tool_call_audit_write
from chat.executor.policy import CANNOT_ASK, ApprovalSuspends, Decision
from chat.executor.reasons import Reason
from chat.models import AlwaysAllow, ApprovalStatus, ToolApproval, Turn, TurnStatus
from chat.turns import dispatch, lifecycle, origins
from governance.visibility import ConnectorToolView
from owlai.times import api_time

logger = logging.getLogger(__name__)

# What the user may answer (websocket `approval.decide`, HTTP API).
DECISIONS = {
    "approve": ApprovalStatus.APPROVED,
    "always_allow": ApprovalStatus.ALWAYS_ALLOWED,
    "deny": ApprovalStatus.DENIED,
}
_EVENT_OF = {
    ApprovalStatus.APPROVED: EventKind.APPROVAL_APPROVED,
    ApprovalStatus.ALWAYS_ALLOWED: EventKind.APPROVAL_ALWAYS_ALLOWED,
    ApprovalStatus.DENIED: EventKind.APPROVAL_DENIED,
    ApprovalStatus.EXPIRED: EventKind.APPROVAL_EXPIRED,
}

DENIED_BY_USER = Reason(gettext_noop("the user denied this call"))
EXPIRED = Reason(gettext_noop("the user did not answer the approval request in time; the call was not run"))
STOPPED = Reason(gettext_noop("the user stopped the turn while the call waited for approval; the call was not run"))
AUTO_BLOCKED = Reason(
    gettext_noop("the user denied this same call %(count)s times in this conversation; it is blocked without asking")
)


class ApprovalError(Exception):
    """A decision or revocation that cannot be applied; str() is for the user."""


@dataclass(frozen=True)
class ApprovalRequest:
    """What the gate wants the user asked (carried by ApprovalSuspends)."""

    tool_name: str  # as the model called it: `<connector>__<tool>`
    connector_id: int
    connector_name: str
    connector_tool_id: int
    server_tool_name: str
    definition_hash: str
    arguments: Any  # masked: as the user may see them
    arguments_digest: str


# --- The gate -------------------------------------------------------------------------


@functools.cache
def _digest_key(secret: str) -> bytes:
    return hashlib.sha256(("owlai-approval-digest:" + secret).encode()).digest()


def arguments_digest(tool_name: str, arguments: Any) -> str:
    """Recognises the same call again: the tool and its arguments, key order
    ignored. Keyed, so a stored digest cannot be checked against guessed
    arguments without the server's key."""
    canonical = json.dumps({"tool": tool_name, "arguments": arguments}, sort_keys=True, ensure_ascii=False, default=str)
    key = _digest_key(settings.OWLAI_FIELD_KEY or settings.SECRET_KEY)
    return hmac.new(key, canonical.encode("utf-8"), hashlib.sha256).hexdigest()


# Standing approvals an origin brings (a playbook's pre-approvals): origin
# name -> find(ctx, view) -> the id of the approval that allows this call of
# that connector tool under its current definition, or None. Asked after the
# repeated-denial block and before the user's "always allow".
_STANDING: dict[str, Callable[[Any, ConnectorToolView], Any]] = {}


def register_standing_approvals(origin_name: str, find: Callable[[Any, ConnectorToolView], Any]) -> None:
    _STANDING[origin_name] = find


def _standing_approval(ctx, view: ConnectorToolView):
    find = _STANDING.get(ctx.origin)
    if find is None:
        return None
    try:
        return find(ctx, view)
    except Exception:
        # Not knowing whether it is pre-approved: the person is asked.
        logger.exception("standing approvals of origin %s could not be read", ctx.origin)
        return None


# What the gate decided on its own (nobody was asked), named on the call
# (`call.approval`): without it the person would not see why a call that
# needs approval ran, or was refused (the step names it).
AUTO_APPROVED = "auto_approved"
AUTO_BLOCKED_DECISION = "auto_blocked"


class ConnectorApprovalGate:
    """The approval gate of a chat run's tool session (chat.executor.policy.ApprovalGate)."""

    def request(self, call, decision: Decision) -> Decision:
        view = call.target.resource if call.target is not None else None
        ctx = call.ctx
        if not isinstance(view, ConnectorToolView) or not ctx.conversation_id or not ctx.turn_id or not _may_ask(ctx):
            # Only connector calls of a stored turn whose origin has somebody
            # to answer (a chat page) can wait for a person.
            return Decision.deny(CANNOT_ASK)
        digest = arguments_digest(call.tool.name, call.args)

        decided = self._resumed(call.session.resuming, ctx, call.tool.name, digest, view)
        if decided is not None:
            return decided
        denials = ToolApproval.objects.filter(
            conversation_id=ctx.conversation_id,
            tool_name=call.tool.name,
            arguments_digest=digest,
            status=ApprovalStatus.DENIED,
        ).count()
        if denials >= settings.OWLAI_APPROVAL_AUTO_BLOCK_DENIALS:
            _gate_event(EventKind.APPROVAL_AUTO_BLOCKED, ctx, view, denials=denials)
            call.approval = AUTO_BLOCKED_DECISION
            return Decision.deny(Reason(AUTO_BLOCKED.msgid, count=denials))
        standing = _standing_approval(ctx, view)
        if standing is not None:
            _gate_event(EventKind.APPROVAL_AUTO_APPROVED, ctx, view, standing_approval=str(standing))
            call.approval = AUTO_APPROVED
            return Decision.allow()
        grant = AlwaysAllow.objects.filter(
            user_id=ctx.user_id,
            connector_tool_id=view.tool_id,
            definition_hash=view.definition_hash,
            revoked_at__isnull=True,
        ).first()
        if grant is not None:
            _gate_event(EventKind.APPROVAL_AUTO_APPROVED, ctx, view, always_allow_id=grant.pk)
            call.approval = AUTO_APPROVED
            return Decision.allow()
        raise ApprovalSuspends(
            ApprovalRequest(
                tool_name=call.tool.name,
                connector_id=view.connector_id,
                connector_name=view.connector_name,
                connector_tool_id=view.tool_id,
                server_tool_name=view.tool_name,
                definition_hash=view.definition_hash,
                arguments=_shown(call),
                arguments_digest=digest,
            )
        )

    def _resumed(
        self, approval_id: str | None, ctx, tool_name: str, digest: str, view: ConnectorToolView
    ) -> Decision | None:
        """The person's decision on this very call. A decision is bound to
        the tool and to the definition it was shown under: if an admin
        accepted a changed definition meanwhile, the approval does not carry
        over (the person is asked again)."""
        if approval_id is None:
            return None
        with transaction.atomic():
            approval = (
                ToolApproval.objects.select_for_update()
                .filter(
                    pk=approval_id,
                    turn_id=ctx.turn_id,
                    tool_name=tool_name,
                    arguments_digest=digest,
                    connector_tool_id=view.tool_id,
                    definition_hash=view.definition_hash,
                    used_at__isnull=True,
                )
                .exclude(status=ApprovalStatus.PENDING)
                .first()
            )
            if approval is None:
                return None
            approval.used_at = timezone.now()
            approval.save(update_fields=["used_at"])
        if approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.ALWAYS_ALLOWED):
            return Decision.allow()
        return Decision.deny(DENIED_BY_USER if approval.status == ApprovalStatus.DENIED else EXPIRED)


def _may_ask(ctx) -> bool:
    try:
        return origins.origin_named(ctx.origin).asks_approval
    except origins.UnknownOrigin:
        return False


def _shown(call) -> Any:
    """The arguments as the model wrote them: the person approving must see
    the destination the model chose (a recipient, a URL, a host), or
    approving is a blind click exactly when an injected "send it all to X"
    must be caught. Only values this run's vault holds stay tokens (the
    card is stored; a person with reveal permission reveals them, audited)."""
    from chat.executor.shaping import sanitise_value
    from governance.pii.masking import mask_known_any

    return _visible_controls(mask_known_any(sanitise_value(call.args), call.known()))


def _visible_controls(value: Any) -> Any:
    """Control and format characters (bidi overrides, zero-width spaces) in
    what a person approves are shown as escapes, not applied: otherwise the
    model could make the card read differently from what will be sent. Not
    removed: the person must see that they are there."""
    if isinstance(value, str):
        return "".join(
            f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\n\t" else ch for ch in value
        )
    if isinstance(value, list):
        return [_visible_controls(item) for item in value]
    if isinstance(value, dict):
        return {_visible_controls(k): _visible_controls(v) for k, v in value.items()}
    return value


def _gate_event(kind: str, ctx, view: ConnectorToolView, **details: Any) -> None:
    """A decision the gate took for the user (auto-approved, auto-blocked).
    Raises AuditWriteError when it cannot be written: inside the approval
    stage that refuses the call (a crash while deciding), so an unrecorded
    auto-approval never runs."""
    user = get_user_model().objects.filter(pk=ctx.user_id).first()
    audit_event_write(
        kind=kind,
        actor=user,
        resource_kind=ResourceKind.CONNECTOR_TOOL,
        resource_id=view.tool_id,
        owner_id=ctx.user_id,
        owner_username=ctx.username,
        details={
            "connector": view.connector_name,
            "tool": view.tool_name,
            "tool_name": view.model_name,
            "conversation_id": str(ctx.conversation_id),
            "turn_id": ctx.turn_id,
            **details,
        },
    )


# --- Services ----------------------------------------------------------------------------


def tool_approval_create(*, turn: Turn, request: ApprovalRequest, tool_call_id: str) -> ToolApproval:
    """The pending request of a waiting call. Called by the turn runner in the
    transaction that stores the turn's wait (asking is not a decision: no
    audit event)."""
    return ToolApproval.objects.create(
        conversation_id=turn.conversation_id,
        turn=turn,
        user_id=turn.conversation.owner_id,
        tool_call_id=tool_call_id[:100],
        connector_id=request.connector_id,
        connector_name=request.connector_name[:30],
        connector_tool_id=request.connector_tool_id,
        tool_name=request.tool_name[:100],
        arguments=request.arguments,
        arguments_digest=request.arguments_digest,
        definition_hash=request.definition_hash,
        expires_at=timezone.now() + timedelta(seconds=settings.OWLAI_APPROVAL_SECONDS),
    )


def requested_payload(approval: ToolApproval) -> dict:
    """The `approval.requested` event."""
    return {
        "approval_id": str(approval.pk),
        "call_id": approval.tool_call_id,
        "tool": approval.tool_name,
        "connector": approval.connector_name,
        "arguments": approval.arguments,
        "expires_at": api_time(approval.expires_at),
        "expires_in": max(0, round((approval.expires_at - timezone.now()).total_seconds())),
    }


def tool_approval_decide(*, approval_id, decision: str, actor, request=None, conversation_id=None) -> ToolApproval:
    """The user answers a pending request: approve, always_allow or deny.
    Only the conversation's owner, only while it is pending; one answer. The
    decision's audit event (without arguments), the `approval.decided` turn
    event and the turn's return to the queue commit together; a new task
    then continues the turn. Raises ApprovalError (nothing changed; an
    answer after the expiry expires the request). With `conversation_id`
    (a conversation's socket), only that conversation's requests."""
    if decision not in DECISIONS:
        raise ApprovalError(_("Unknown decision; answer approve, always_allow or deny."))
    expired = False
    with transaction.atomic():
        approval = (
            ToolApproval.objects.select_for_update()
            .filter(pk=approval_id, user_id=actor.pk, conversation__owner_id=actor.pk)
            .filter(conversation__deleted_at__isnull=True)
            .filter(**({"conversation_id": conversation_id} if conversation_id is not None else {}))
            .first()
        )
        if approval is None:
            raise ApprovalError(_("No such approval request."))
        if approval.status != ApprovalStatus.PENDING:
            raise ApprovalError(_("This approval request was already answered."))
        if approval.expires_at <= timezone.now():
            _settle(approval, ApprovalStatus.EXPIRED)
            expired = True
        else:
            _settle(approval, DECISIONS[decision], actor=actor, request=request)
    if expired:
        raise ApprovalError(_("This approval request expired; the call was not run."))
    return approval


def tool_approvals_expire(*, now=None, conversation_id=None) -> int:
    """Beat (`chat.expire_approvals`; and `turn_start` for its conversation,
    where no beat runs): pending requests past their expiry are expired (an
    `approval_expired` event each) and their turns go on (the call is refused
    and the model told). Returns how many expired."""
    now = now or timezone.now()
    expired = 0
    due = ToolApproval.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=now)
    if conversation_id is not None:
        due = due.filter(conversation_id=conversation_id)
    for approval_id in due.values_list("pk", flat=True)[:500]:
        with transaction.atomic():
            approval = ToolApproval.objects.select_for_update().filter(pk=approval_id).first()
            if approval is None or approval.status != ApprovalStatus.PENDING or approval.expires_at > now:
                continue  # answered meanwhile
            _settle(approval, ApprovalStatus.EXPIRED)
            expired += 1
    if expired:
        logger.info("%d approval request(s) expired", expired)
    return expired


def tool_approvals_withdraw(*, turn: Turn, actor, request=None) -> int:
    """The user stopped a turn that waits for an approval (turn_cancel): its
    pending request counts as denied (an `approval_denied` event, marked as a
    Stop) and the turn is not resumed: the caller ends it, in its transaction."""
    withdrawn = 0
    for approval in ToolApproval.objects.select_for_update().filter(turn=turn, status=ApprovalStatus.PENDING):
        _settle(approval, ApprovalStatus.DENIED, actor=actor, request=request, resume=False, stopped=True)
        _stopped_call_audit(approval, turn)
        withdrawn += 1
    return withdrawn


def _stopped_call_audit(approval: ToolApproval, turn: Turn) -> None:
    """The call that will now never run still gets its tool-call row
    (denied), as a call denied on the card does when its turn resumes: every
    call the model made is on the record, whichever way it ended. Written in
    the caller's transaction: no Stop without its row."""
    owner = approval.user
    tool_call_audit_write(
        actor_id=owner.pk,
        actor_username=owner.get_username(),
        tool=approval.tool_name,
        outcome=Outcome.DENIED,
        reason=STOPPED.for_audit(),
        resource_kind=ResourceKind.CONNECTOR,
        resource_id=approval.connector_id,
        resource_name=approval.connector_name,
        origin=turn.origin,
        origin_ref=turn.origin_ref,
        conversation_id=approval.conversation_id,
        turn_id=turn.pk,
    )


def _settle(
    approval: ToolApproval, status: str, *, actor=None, request=None, resume: bool = True, stopped: bool = False
) -> None:
    """Inside the caller's transaction, with the approval locked."""
    now = timezone.now()
    approval.status, approval.decided_at = status, now
    approval.save(update_fields=["status", "decided_at"])
    details: dict[str, Any] = {
        "connector": approval.connector_name,
        "tool_name": approval.tool_name,
        "conversation_id": str(approval.conversation_id),
        "turn_id": approval.turn_id,
        "approval_id": str(approval.pk),
    }
    if stopped:
        details["stopped"] = True  # by the user's Stop on the waiting turn
    if status == ApprovalStatus.ALWAYS_ALLOWED and approval.connector_tool_id is not None:
        grant = AlwaysAllow.objects.filter(
            user_id=approval.user_id, connector_tool_id=approval.connector_tool_id, revoked_at__isnull=True
        ).first()
        if grant is not None and grant.definition_hash != approval.definition_hash:
            # One standing allow per user and tool: the older one (another definition) goes.
            grant.revoked_at = now
            grant.save(update_fields=["revoked_at"])
            grant = None
        if grant is None:
            grant = AlwaysAllow.objects.create(
                user_id=approval.user_id,
                connector_tool_id=approval.connector_tool_id,
                definition_hash=approval.definition_hash,
            )
        details["always_allow_id"] = grant.pk
    owner = approval.user
    audit_event_write(
        kind=_EVENT_OF[status],
        request=request,
        actor=actor,
        resource_kind=ResourceKind.CONNECTOR_TOOL,
        resource_id=approval.connector_tool_id or "",
        owner_id=owner.pk,
        owner_username=owner.get_username(),
        details=details,
    )
    if resume:
        decided = {"approval_id": str(approval.pk), "call_id": approval.tool_call_id, "decision": status}
        _resume(approval.turn_id, decided)


def _resume(turn_id: int, decided: dict) -> None:
    """Record `approval.decided` with the turn and queue the turn again (when
    it still waits: a turn failed meanwhile stays failed); after commit a new
    task takes it (chat.turns.dispatch.resume_soon)."""
    turn = Turn.objects.select_for_update().select_related("conversation").filter(pk=turn_id).first()
    if turn is None or turn.status != TurnStatus.WAITING_APPROVAL:
        return
    if not lifecycle.requeue_decided(turn, decided):
        return
    # After the event's own publishing (registered first, run first).
    transaction.on_commit(lambda: dispatch.resume_soon(turn.pk))


def always_allow_revoke(*, grant: AlwaysAllow, actor, request=None) -> AlwaysAllow:
    """The user (their page, the API) or an admin (the admin) revokes an
    "always allow": that tool's calls are asked about again. An event each;
    revoking a revoked one changes nothing."""
    with transaction.atomic():
        locked = AlwaysAllow.objects.select_for_update().select_related("connector_tool__connector", "user")
        locked = locked.get(pk=grant.pk)
        may = actor is not None and (actor.pk == locked.user_id or actor.has_perm("chat.change_alwaysallow"))
        if not may:
            raise ApprovalError(_("You may not revoke this."))
        if locked.revoked_at is not None:
            return locked
        locked.revoked_at, locked.revoked_by = timezone.now(), actor
        locked.save(update_fields=["revoked_at", "revoked_by"])
        tool = locked.connector_tool
        audit_event_write(
            kind=EventKind.ALWAYS_ALLOW_REVOKED,
            request=request,
            actor=actor,
            resource_kind=ResourceKind.CONNECTOR_TOOL,
            resource_id=tool.pk,
            owner_id=locked.user_id,
            owner_username=locked.user.get_username(),
            details={"connector": tool.connector.name, "tool": tool.name, "always_allow_id": locked.pk},
        )
    return locked
