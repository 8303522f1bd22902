"""The pipeline every tool call passes, in this order, whatever the tool:

    VISIBILITY  parse the JSON arguments; resolve the resource the call targets
                as this turn may see it (tier x exposure x grant). Missing,
                not granted and hidden read the same to the model.
    POLICY      the tool's policy: allow / deny(reason) / needs approval
                (chat.executor.policy).
    CHECKS      the tool's own argument checks (SQL: read-only, granted
                tables, re-identification and its re-check, row counts).
    APPROVAL    a call that needs approval, its checks passed, is put to the
                run's gate (the registry's stage: Registry.approve): allow,
                deny, or the run waits for a person (ApprovalSuspends).
    ATTEMPT     the attempt's audit row, committed. Cannot write? Nothing runs.
    RUN         the tool's preparation (checks that touch the target, e.g. the
                SQL account check, after the attempt row) and its run.
    SHAPING     binary -> size marker; credentialed URLs -> per-conversation
                references; known values, lineage and detectors -> tokens;
                a big result -> spill file (masked) and a preview.
    OUTCOME     the outcome's audit row, saying whether the model gets the
                result: `failed` when shaping failed (a spill file that could
                not be written), the result withheld. Cannot write? The result
                is withheld too (and its spill file removed).

The stages run in the order `STAGES` declares (a run's session traces them).
Every call carries its run's session (chat.executor.session.ToolSession):
the frozen context, each tool's per-run state, the approval gate and the
decision a resumed run brings.

A refusal before ATTEMPT is one `denied` row; nothing ran. Any exception
while deciding (VISIBILITY .. APPROVAL, and the preparation) refuses the call,
but a preparation that finds the target failing (ToolFailed: a database that
cannot be reached) fails it; an exception while running is a `failed` outcome
with a value-free message.
Audit write failures (AuditWriteError) always propagate: the caller stops
the turn without the result. A failure while shaping withholds the result
(never shown half-masked): the call is `failed` with a value-free reason and
the model is told, as for a failed run. The model only ever receives what
`execute_tool_call` returns, and that is built here, from the tool's Output,
by the shaping stage: a tool cannot hand the model anything unshaped.

Adding a tool: write one object with the parts of `Tool` (below) and register
it: `REGISTRY.register(MyTool())` (chat.executor.tools registers the built-in
ones). A family of tools whose list changes at run time (MCP connectors)
registers one `ToolSource` instead (chat.executor.registry). The registry
test (tests/test_executor_registry.py) walks every registered tool through
every stage; a new tool needs an example call there.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from django.conf import settings
from django.utils.translation import gettext, gettext_noop

from audit.models import Outcome, ToolCallAudit
from audit.services import tool_call_audit_write, tool_call_outcome_write
from chat.context import TurnContext
from chat.executor.policy import ApprovalSuspends, Decision, Policy, Verdict
from chat.executor.reasons import Reason, Refused, ToolFailed, Unavailable
from chat.executor.registry import REGISTRY
from chat.executor.session import Offer, RunState, RunStateKind, ToolSession
from chat.vault import DbVault
from governance.pii.known_values import KnownValues
from governance.pii.masking import InMemoryVault, MaskCounts, Vault, mask_string

logger = logging.getLogger(__name__)


class Stage(enum.Enum):
    VISIBILITY = "visibility"
    POLICY = "policy"
    CHECKS = "checks"
    APPROVAL = "approval"
    ATTEMPT = "attempt"
    RUN = "run"
    SHAPING = "shaping"
    OUTCOME = "outcome"


STAGES: tuple[Stage, ...] = tuple(Stage)


@dataclass(frozen=True)
class ToolResult:
    """What goes back to the model (`content`) and to the UI (outcome, rows)."""

    content: str
    outcome: str
    row_count: int | None = None
    # Why a refused or failed call did not give a result, as the model was
    # told it (the page shows it at the call's step).
    reason: str | None = None
    # A call that needed approval and was decided without asking anyone
    # (the gate's `auto_approved` / `auto_blocked`): the step names it.
    approval: str = ""


@dataclass(frozen=True)
class Target:
    """The resource a call targets, as the visibility stage resolved it."""

    name: str
    pk: int | None
    resource: Any  # the tool's own handle (a DbAccess, a collection, a file)


@dataclass
class Output:
    """What a tool's run produced, before shaping.

    `payload`: what the model reads; every string in it (keys included) is
    shaped. `facts`: numbers and flags about the result (row counts,
    truncation), shown as they are; anything else there is refused.
    `row_count`: what the audit outcome records. `items`: the key of the
    list in `payload` a big result is spilled and paged by (None: never
    spilled). `failed`: the tool ran and reported an error whose text the
    model should read (an MCP result with `isError`): the outcome is `failed`
    with this value-free reason, and the payload is shaped like any result."""

    payload: dict[str, Any]
    facts: dict[str, int | float | bool | None] = field(default_factory=dict)
    row_count: int | None = None
    items: str | None = None
    failed: str = ""


@dataclass(frozen=True)
class Lineage:
    """A tool's extra shaping input: columns of the table under `payload[key]`
    known to derive from personal data, masked whole (token of `kinds[i]`);
    `record` receives the masking counts (statistics)."""

    key: str
    kinds: dict[int, str]
    origins: dict[int, tuple[str, str]]
    record: Any = None  # Callable[[MaskCounts], None] | None
    literal: frozenset[int] = frozenset()  # columns of only the model's own literals: returned as written
    own_columns: frozenset[int] = frozenset()  # literals next to non-personal data: the literals stay as written
    own_values: frozenset[str] = frozenset()  # the model's own literals, normalised
    # Masked columns whose cells the statement computed (not a column passed
    # on unchanged): each cell its own token, never a known value
    # (chat.vault.DbVault.derived_tokens).
    derived: frozenset[int] = frozenset()


class Tool(Protocol):
    """The parts a tool contributes. The pipeline calls them in its order;
    none of them returns anything to the model directly."""

    name: str  # the function name the model calls
    resource_kind: str  # what its audit rows name as the resource kind
    target_argument: str | None  # the argument naming its resource (None: implied by the tool)
    result_key: str  # the key naming the resource in the result
    unavailable: Reason  # told when the resource is missing, not granted or hidden
    failed: Reason  # told when the run failed
    policy: Policy
    # Its per-run state (chat.executor.session.RunStateKind: how to open it,
    # from what a waiting run stored, and close it), or None. Tools of one
    # family share one kind (the connector tools share their MCP sessions).
    run_state: RunStateKind | None

    def definition(self, offer: Offer) -> dict | None:
        """The JSON schema the model is shown this turn (None: not offered)."""

    def audit_statement(self, args: dict) -> str:
        """The statement its audit row records, as the model wrote it (SQL);
        "" for tools whose arguments are never recorded."""

    def summary(self, args: dict) -> dict[str, str]:
        """What its step shows of the call as the model wrote it (tokens
        included), before it runs: `resource` (the resource it names) and
        its input fields by name (e.g. `sql`, `query`); {}: nothing."""

    def resolve(self, ctx: TurnContext, name: str) -> Target | None:
        """VISIBILITY: the named resource when this turn may use it, else None."""

    def check(self, call: Call) -> None:
        """CHECKS: refuse (raise Refused) what must not run; may set
        `call.tables` and its own `call.state`."""

    def prepare(self, call: Call) -> None:
        """RUN, first: checks that must touch the target, after the attempt row."""

    def run(self, call: Call) -> Output:
        """RUN: do it. ToolFailed(value-free reason) for an expected failure."""

    def lineage(self, call: Call, output: Output) -> Lineage | None:
        """SHAPING input: what is known to be personal data in the output."""


@dataclass(eq=False)
class Call:
    """One call on its way through the pipeline."""

    ctx: TurnContext
    tool: Tool
    raw: str
    started: float
    session: ToolSession = None  # type: ignore[assignment]  # the run's (a one-call one when None)
    args: dict[str, Any] = field(default_factory=dict)
    asked: str = ""  # the resource name the model asked for (audited when refused)
    target: Target | None = None
    statement: str = ""  # audited: the statement as the model wrote it
    tables: tuple[str, ...] = ()  # audited: the tables it reads
    state: dict[str, Any] = field(default_factory=dict)  # the tool's own, between its parts
    vault: Vault = None  # type: ignore[assignment]
    approval: str = ""  # set by the gate when it decided without asking
    spilled: Any = None  # the spill file shaping wrote (a Path), removed if the result is withheld
    _known: KnownValues | None = None

    def __post_init__(self) -> None:
        if self.session is None:
            self.session = ToolSession(ctx=self.ctx)
        if self.vault is None:
            self.vault = vault_for(self.ctx)

    @property
    def run_state(self) -> RunState:
        """The tool's per-run state in this run (opened on first use)."""
        if self.tool.run_state is None:
            raise TypeError(f"{self.tool.name} keeps no per-run state")
        return self.session.state(self.tool.run_state)

    def known(self) -> KnownValues:
        """Every original this conversation's vault holds (read once per call)."""
        if self._known is None:
            self._known = self.vault.known_values(self.ctx.turn_id)
        return self._known


def vault_for(ctx: TurnContext) -> Vault:
    return DbVault(ctx.conversation_id) if ctx.conversation_id else InMemoryVault()


def _enter(call: Call, stage: Stage) -> None:
    call.session.enter(call.tool.name, stage)


# --- The pipeline ----------------------------------------------------------------


def execute_tool_call(session: ToolSession | TurnContext, *, name: str, arguments: str) -> ToolResult:
    """Run one tool call of a run, in its session (a bare TurnContext: a
    one-call session, closed after the call). Raises AuditWriteError when the
    call cannot be recorded: the caller must then stop the run without the
    result."""
    if isinstance(session, ToolSession):
        return _execute(session, name, arguments)
    with ToolSession(ctx=session) as once:
        return _execute(once, name, arguments)


def _execute(session: ToolSession, name: str, arguments: str) -> ToolResult:
    ctx = session.ctx
    started = time.perf_counter()
    # Oversize arguments are refused before anything reads them (the model
    # client stops reading such an argument after the cap + 1 characters).
    limit = settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS
    if len(arguments or "") > limit:
        reason = Reason(gettext_noop("arguments longer than %(limit)s characters; send a shorter call"), limit=limit)
        return _refuse_unrouted(ctx, name, reason)
    try:
        tool = REGISTRY.find(ctx, name)
    except Exception:
        logger.exception("tool lookup failed; treating %r as unknown", name)
        tool = None
    if tool is None:
        return _refuse_unrouted(ctx, name, Reason(gettext_noop("unknown tool: %(name)s"), name=(name or "?")[:100]))
    call = Call(ctx=ctx, tool=tool, raw=arguments or "", started=started, session=session)
    result = _through_stages(call)
    return replace(result, approval=call.approval) if call.approval else result


def _through_stages(call: Call) -> ToolResult:
    tool = call.tool
    try:
        _enter(call, Stage.VISIBILITY)
        call.args = parse_arguments(call.raw)
        call.statement = tool.audit_statement(call.args)
        call.asked = _asked_name(tool, call.args)
        target = tool.resolve(call.ctx, call.asked)
        if target is None:
            raise Unavailable(call.asked)
        call.target = target

        _enter(call, Stage.POLICY)
        decision: Decision = tool.policy.decide(call)
        if decision.verdict not in (Verdict.ALLOW, Verdict.NEEDS_APPROVAL):
            raise Refused(decision.reason or POLICY_REFUSED)

        _enter(call, Stage.CHECKS)
        # Nobody is asked to approve a call its own checks would refuse.
        tool.check(call)

        _enter(call, Stage.APPROVAL)
        decision = REGISTRY.approve(call, decision)
        if decision.verdict is not Verdict.ALLOW:
            # Anything but an explicit allow refuses (a gate that answered
            # "needs approval" again included).
            raise Refused(decision.reason or POLICY_REFUSED)
    except Unavailable as unavailable:
        call.asked = call.asked or unavailable.asked[:200]
        return _deny(call, tool.unavailable, audit_text=unavailable.audit_reason or None)
    except Refused as refused:
        return _deny(call, refused.reason)
    except ApprovalSuspends:
        raise  # the turn waits for a person; nothing ran, nothing to record yet
    except Exception:
        # A crash inside a decision is a refusal, never a pass.
        logger.exception("tool check failed; refusing")
        return _deny(call, CHECK_CRASHED, audit_text=CHECK_CRASHED_AUDIT)

    # Nothing reaches the target (not even the preparation's checks) before
    # the attempt is recorded and committed; if this raises, nothing ran and
    # the turn stops (fail closed).
    _enter(call, Stage.ATTEMPT)
    attempt = _audit(call, Outcome.STARTED, "")

    _enter(call, Stage.RUN)
    try:
        tool.prepare(call)
    except ToolFailed as failed:
        # The target failed the preparation (e.g. a database that cannot
        # be reached): nothing ran, and the platform refused nothing.
        return _failed(call, attempt, failed)
    except Refused as refused:
        model_text, audit_text = _masked(call, refused.reason)
        _audit_outcome(call, attempt, Outcome.DENIED, audit_text)
        return _refusal(model_text)
    except Exception:
        logger.exception("%s preparation failed; refusing", tool.name)
        _audit_outcome(call, attempt, Outcome.DENIED, CHECK_CRASHED_AUDIT)
        return _refusal(CHECK_CRASHED.for_model())
    try:
        output = tool.run(call)
    except ToolFailed as failed:
        return _failed(call, attempt, failed)
    except Exception as exc:
        logger.exception("%s run crashed", tool.name)
        _audit_outcome(call, attempt, Outcome.FAILED, f"execution error: {exc.__class__.__name__}")
        return _failure(tool.failed.for_model())

    _enter(call, Stage.SHAPING)
    from chat.executor.shaping import SpillUnwritable, shape, spill_discard

    try:
        content = shape(call, output, tool.lineage(call, output))
    except SpillUnwritable as unwritable:
        logger.warning("%s: spill file not written (%s); result withheld", tool.name, unwritable.code)
        return _withheld(call, attempt, output, SPILL_FAILED, f"spill file not written: {unwritable.code}")
    except Exception as exc:
        logger.exception("%s: shaping failed; result withheld", tool.name)
        return _withheld(call, attempt, output, SHAPING_FAILED, f"shaping error: {exc.__class__.__name__}")

    # The outcome is written before the result exists for the model; if this
    # raises, the result is dropped with the exception (fail closed).
    _enter(call, Stage.OUTCOME)
    outcome = Outcome.FAILED if output.failed else Outcome.SUCCESS
    try:
        _audit_outcome(call, attempt, outcome, output.failed, row_count=output.row_count)
    except BaseException:
        spill_discard(call.spilled)
        raise
    return ToolResult(content=content, outcome=outcome, row_count=output.row_count)


def _failed(call: Call, attempt: ToolCallAudit, failed: ToolFailed) -> ToolResult:
    # Value-free by the tool's contract; what is left still goes through
    # the known values and the detectors.
    message = _clean(call.ctx, call.vault, call.known(), failed.reason)
    _audit_outcome(call, attempt, Outcome.FAILED, message)
    return _failure(f"{call.tool.failed.for_model()}: {message}")


def _withheld(call: Call, attempt: ToolCallAudit, output: Output, reason: Reason, audit_text: str) -> ToolResult:
    """The tool ran but its result cannot be given to the model: the outcome
    says `failed` (nobody received it) with a value-free reason, and the
    model and the step are told why in the turn's language."""
    _enter(call, Stage.OUTCOME)
    _audit_outcome(call, attempt, Outcome.FAILED, audit_text, row_count=output.row_count)
    return _failure(reason.for_model())


POLICY_REFUSED = Reason(gettext_noop("refused by the tool policy"))
CHECK_CRASHED = Reason(gettext_noop("the call could not be checked and was refused"))
CHECK_CRASHED_AUDIT = "internal error during checks"
SPILL_FAILED = Reason(
    gettext_noop("the result was too big to show whole and could not be saved for paging; it was withheld")
)
SHAPING_FAILED = Reason(gettext_noop("the result could not be prepared for the model; it was withheld"))


def _asked_name(tool: Tool, args: dict[str, Any]) -> str:
    if tool.target_argument is None:
        return ""
    name = args.get(tool.target_argument)
    if not isinstance(name, str) or not name:
        raise Refused(Reason(gettext_noop("%(argument)s is required"), argument=tool.target_argument))
    return name[:200]


def parse_arguments(raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise Refused(Reason(gettext_noop("arguments are not valid JSON"))) from exc
    if not isinstance(args, dict):
        raise Refused(Reason(gettext_noop("arguments must be a JSON object")))
    return args


def _clean(ctx: TurnContext, vault: Vault, known: KnownValues, text: str) -> str:
    """A message shaped like a result's string: credentialed URLs become
    references, known values and detector hits become tokens."""
    if "://" in text:
        from chat.executor.shaping import shorten_credentialed_urls
        from chat.url_references import url_references_for

        text = shorten_credentialed_urls(text, url_references_for(ctx.conversation_id).reference_for)
    return mask_string(text, vault, known=known)


def _masked(call: Call, reason: Reason) -> tuple[str, str]:
    """(for the model, for the audit row): a reason may quote the call's
    arguments, whose literals may be values."""
    known = call.known()
    return (
        _clean(call.ctx, call.vault, known, reason.for_model()),
        _clean(call.ctx, call.vault, known, reason.for_audit()),
    )


def _deny(call: Call, reason: Reason, *, audit_text: str | None = None) -> ToolResult:
    model_text, masked_audit_text = _masked(call, reason)
    _audit(call, Outcome.DENIED, masked_audit_text if audit_text is None else audit_text)
    return _refusal(model_text)


def _refuse_unrouted(ctx: TurnContext, name: str, reason: Reason) -> ToolResult:
    """A call that reached no tool (oversize, unknown name): one denied row."""
    vault = vault_for(ctx)
    known = vault.known_values(ctx.turn_id)
    tool_call_audit_write(
        actor_id=ctx.user_id,
        actor_username=ctx.username,
        tool=(name or "?")[:100],
        outcome=Outcome.DENIED,
        reason=_clean(ctx, vault, known, reason.for_audit()),
        resource_kind="",
        origin=ctx.origin,
        origin_ref=ctx.origin_ref,
        conversation_id=ctx.conversation_id,
        turn_id=ctx.turn_id,
    )
    return _refusal(_clean(ctx, vault, known, reason.for_model()))


def _refusal(message: str) -> ToolResult:
    text = gettext("refused: %(reason)s") % {"reason": message}
    return ToolResult(content=json.dumps({"error": text}, ensure_ascii=False), outcome=Outcome.DENIED, reason=text)


def _failure(message: str) -> ToolResult:
    return ToolResult(
        content=json.dumps({"error": message}, ensure_ascii=False), outcome=Outcome.FAILED, reason=message
    )


def _duration(call: Call) -> float:
    return round((time.perf_counter() - call.started) * 1000, 3)


def _audit(call: Call, outcome: str, reason: str) -> ToolCallAudit:
    """The call's audit row (its attempt, with outcome `started`). Raises
    AuditWriteError when it cannot be written; the result is then never
    returned, and a started call never runs (fail closed)."""
    ctx, target = call.ctx, call.target
    return tool_call_audit_write(
        actor_id=ctx.user_id,
        actor_username=ctx.username,
        tool=call.tool.name,
        outcome=outcome,
        reason=reason,
        resource_kind=call.tool.resource_kind,
        resource_id=target.pk if target else None,
        # For a refused name we record what the model asked for.
        resource_name=target.name if target else call.asked,
        sql_text=call.statement,
        tables=list(call.tables),
        origin=ctx.origin,
        origin_ref=ctx.origin_ref,
        conversation_id=ctx.conversation_id,
        turn_id=ctx.turn_id,
        duration_ms=_duration(call),
    )


def _audit_outcome(
    call: Call, attempt: ToolCallAudit, outcome: str, reason: str, *, row_count: int | None = None
) -> None:
    """The outcome record of a started call. Raises AuditWriteError when it
    cannot be written: the result is then withheld (fail closed)."""
    tool_call_outcome_write(
        attempt=attempt, outcome=outcome, reason=reason, row_count=row_count, duration_ms=_duration(call)
    )


__all__ = [
    "STAGES",
    "Call",
    "Lineage",
    "MaskCounts",
    "Offer",
    "Output",
    "Stage",
    "Target",
    "Tool",
    "ToolResult",
    "ToolSession",
    "execute_tool_call",
    "vault_for",
]
