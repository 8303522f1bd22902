"""The single agent loop. Chat, playbooks and sub-agents all run this loop;
every tool call goes through the executor passed in, never around it, with
the run's tool session (chat.executor.session). The loop knows no tool:
what a step shows of a call is the tool's own summary."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from chat.context import TurnContext
from chat.executor import ToolResult, ToolSession, step_summary
from chat.executor.policy import ApprovalSuspends
from chat.llm import AssistantReply, ModelClient, ToolCall
from chat.protocol import ServerEvent
from governance.refusals import localize

Emit = Callable[[str, dict], None]
Execute = Callable[..., ToolResult]


# A trailing "[" plus up to a kind label and digits may be the start of a
# token like [전화번호-12] that the next delta completes.
_PARTIAL_TOKEN = re.compile(r"\[[^\[\]\s]{0,12}(?:-\d{0,9})?$")


class TokenSafeStream:
    """Forwards streamed text but never splits a masked-value token across two
    `message.delta` events, so the page can render (and reveal) it whole."""

    def __init__(self, send: Callable[[str], None]) -> None:
        self._send = send
        self._held = ""

    def feed(self, text: str) -> None:
        text = self._held + text
        match = _PARTIAL_TOKEN.search(text)
        self._held = text[match.start() :] if match else ""
        ready = text[: match.start()] if match else text
        if ready:
            self._send(ready)

    def flush(self) -> None:
        if self._held:
            self._send(self._held)
            self._held = ""


@dataclass(frozen=True)
class LoopResult:
    new_messages: list[dict]  # model-facing history entries produced by this turn
    final_text: str
    step_limit_hit: bool


def _assistant_entry(reply: AssistantReply) -> dict:
    entry: dict = {"role": "assistant", "content": reply.content or ""}
    if reply.tool_calls:
        entry["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _kept_arguments(c.arguments)}}
            for c in reply.tool_calls
        ]
    return entry


def _kept_arguments(arguments: str) -> str:
    """An oversize argument (refused by the executor) is neither stored nor
    re-sent; a short JSON note stands in for it."""
    if len(arguments) <= settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS:
        return arguments
    return json.dumps({"trimmed": f"more than {settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS} chars"})


# --- History budget -----------------------------------------------------------


def history_budget(ctx: TurnContext) -> int:
    """Characters of history re-sent per model call: the model's
    `history_chars` in the install config, else OWLAI_HISTORY_CHARS."""
    install = getattr(settings, "OWLAI_INSTALL", None)
    provider = install.provider(ctx.provider_name) if install is not None else None
    spec = next((m for m in provider.models if m.name == ctx.model_name), None) if provider else None
    if spec is not None and spec.history_chars:
        return spec.history_chars
    return settings.OWLAI_HISTORY_CHARS


def _chars(entry: dict) -> int:
    size = len(entry.get("content") or "")
    for call in entry.get("tool_calls") or []:
        function = call.get("function") or {}
        size += len(function.get("name") or "") + len(function.get("arguments") or "")
    return size


def trimmed_note(chars: int) -> str:
    return f"[trimmed: {chars} chars]"


def fit_history(messages: list[dict], *, budget: int, current: int) -> list[dict]:
    """What is sent to the model: `messages` cut to `budget` characters.

    `current` is the index of this turn's user message; what follows it is
    this turn's own work. System messages and the current user message are
    always kept. In order, until the budget holds: (1) tool results are
    replaced by a "[trimmed: N chars]" note, oldest first, except those the
    model has not read yet (after the last assistant message); (2) the oldest
    earlier turns are dropped whole (a user message and all after it), so
    tool calls and their results stay paired; (3) the unread tool results are
    cut to equal shares of what is left (the start of each kept, with a
    note). The input list and its entries are never modified.
    """
    total = sum(_chars(m) for m in messages)
    if total <= budget:
        return messages
    out: list[dict | None] = list(messages)
    last_assistant = max((i for i, m in enumerate(out) if m["role"] == "assistant"), default=-1)

    def trim(indices) -> None:
        nonlocal total
        for i in indices:
            if total <= budget:
                return
            entry = out[i]
            if entry is None or entry["role"] != "tool":
                continue
            size = len(entry.get("content") or "")
            note = trimmed_note(size)
            if size > len(note):
                out[i] = {**entry, "content": note}
                total -= size - len(note)

    trim(range(last_assistant))
    # Earlier turns, oldest first: each starts at a user message.
    starts = [i for i in range(current) if out[i]["role"] == "user"]
    for n, start in enumerate(starts):
        if total <= budget:
            break
        end = starts[n + 1] if n + 1 < len(starts) else current
        for i in range(start, end):
            if out[i] is not None and out[i]["role"] != "system":
                total -= _chars(out[i])
                out[i] = None
    # (3) The results the model has not read share what is left: each is cut
    # to its share (a small one keeps what it needs), none blanked for another.
    unread = [i for i in range(max(last_assistant, 0), len(out)) if out[i] is not None and out[i]["role"] == "tool"]
    if total > budget and unread:
        sizes = {i: len(out[i].get("content") or "") for i in unread}
        room = max(0, budget - (total - sum(sizes.values())))
        for n, i in enumerate(sorted(unread, key=sizes.__getitem__)):
            share = min(sizes[i], room // (len(unread) - n))
            room -= share
            if share < sizes[i]:
                note = trimmed_note(sizes[i])
                head = out[i]["content"][: max(0, share - len(note) - 1)]
                out[i] = {**out[i], "content": f"{head} {note}" if head else note}
    return [m for m in out if m is not None]


# What `interruption` may answer before a model or tool call (None: go on).
ABANDONED = "abandoned"  # no longer this loop's to run (deleted, failed elsewhere)
CANCELLED = "cancelled"  # the owner pressed Stop
HANDOVER = "handover"  # this worker is stopping: another one continues the turn (chat.turns.handover)


class TurnAbandoned(Exception):
    """`interruption` said ABANDONED: the turn stops where it is."""


@dataclass(frozen=True)
class LoopState:
    """Where a loop stopped to wait for an approval (or to be handed to
    another worker, chat.turns.handover), as plain JSON values:
    this turn's messages so far (`new`, ending with the assistant entry whose
    tool calls are not all done), the model calls made (`steps`), and the tool
    calls of that entry not yet run (`pending`; the first one waits for the
    approval, its `tool.started` already sent). Resuming from it runs no model
    or tool call twice. `session` is the run's tool session as stored
    (ToolSession.as_json: the tools' per-run state, the approval waited on),
    restored by the runner when the run resumes."""

    new: list[dict]
    steps: int
    pending: list[dict]
    session: dict | None = None
    # A run of given calls (an origin's fixed tool step, not the model's):
    # the loop ends after the calls without a model call. Kept when such a
    # run waits for an approval or is handed over.
    fixed: bool = False
    # Whether the first pending call's `tool.started` was sent (an approval
    # wait: yes; a handover before a call, or given calls not yet started:
    # no). A handover between model calls has no pending call at all: the
    # resumed loop asks the model next.
    first_announced: bool = True

    def as_json(self) -> dict:
        value = {
            "new": self.new,
            "steps": self.steps,
            "pending": self.pending,
            "session": self.session,
            "first_announced": self.first_announced,
        }
        if self.fixed:
            value["fixed"] = True
        return value

    @classmethod
    def of_calls(cls, calls: list[dict]) -> LoopState:
        """The state a run of given calls ({"id", "name", "arguments"}) starts
        from: the assistant entry naming them, as if a model had."""
        entry = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ],
        }
        return cls(new=[entry], steps=0, pending=list(calls), fixed=True, first_announced=False)

    @classmethod
    def from_json(cls, value: dict) -> LoopState:
        pending = value.get("pending") or []
        if not isinstance(value.get("new"), list) or not isinstance(value.get("steps"), int):
            raise ValueError("not a suspended loop's state")
        if not isinstance(pending, list):
            raise ValueError("not a suspended loop's state")
        session = value.get("session")
        if session is None and "approval_id" in value:
            # Stored before the session travelled in the loop state: the
            # decision still applies (tools it loaded are searched again).
            session = {"states": {}, "approval_id": value.get("approval_id")}
        return cls(
            new=list(value["new"]),
            steps=value["steps"],
            pending=list(pending),
            session=session,
            fixed=value.get("fixed") is True,
            first_announced=value.get("first_announced", True) is not False,
        )


class TurnSuspended(Exception):
    """A tool call waits for a person's approval (the executor's approval gate
    raised ApprovalSuspends): the loop stopped before that call ran. `state`
    is what it needs to continue; `request` what the gate wants asked."""

    def __init__(self, state: LoopState, request: object) -> None:
        super().__init__("waiting for approval")
        self.state = state
        self.request = request


def _call_json(call: ToolCall) -> dict:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


class TurnHandedOver(Exception):
    """`interruption` said HANDOVER at a point where nothing is in flight
    (before a model or tool call): `state` is where another worker continues."""

    def __init__(self, state: LoopState) -> None:
        super().__init__("handed over")
        self.state = state


class TurnCancelled(Exception):
    """The owner asked the turn to stop (`interruption` said CANCELLED): it stops before
    its next model or tool call. `new_messages` is what this turn produced
    until then (the answer so far, the tool calls that ran), kept so the page
    shows the same after a reload."""

    def __init__(self, new_messages: list[dict]) -> None:
        super().__init__("cancelled")
        self.new_messages = new_messages


# What a tool step shows of its result: enough to read, bounded so one step
# cannot make a stored event (and every resync) huge.
STEP_RESULT_MAX_CHARS = 8_000


def step_started_payload(call, session: ToolSession | TurnContext) -> dict:
    """`tool.started`: the call as the model wrote it, tokens included, as
    its tool summarises it (chat.executor.step_summary: e.g. the resource it
    named and its SQL or search query)."""
    return {"call_id": call.id, "tool": call.name, **step_summary(session, call.name, call.arguments)}


def step_finished_payload(call, result: ToolResult, duration_ms: int) -> dict:
    """`tool.finished`: outcome, rows, duration, the refusal or failure reason
    (in the turn's language, as a person reads it: the model is told the
    checks' fixed English form inside a translated frame, which the page
    would otherwise show half in each language), and the start of the
    result the model read."""
    payload: dict = {
        "call_id": call.id,
        "tool": call.name,
        "outcome": result.outcome,
        "row_count": result.row_count,
        "duration_ms": duration_ms,
    }
    if result.reason:
        payload["reason"] = localize(result.reason)[:2000]
    if result.approval:
        # Needed an approval, decided without asking (auto-approved / auto-blocked).
        payload["approval"] = {"decision": result.approval}
    content = result.content or ""
    payload["result"] = content[:STEP_RESULT_MAX_CHARS]
    if len(content) > STEP_RESULT_MAX_CHARS:
        payload["result_truncated"] = True
    return payload


def run_agent_loop(
    *,
    ctx: TurnContext,
    client: ModelClient,
    messages: list[dict],
    tools: list[dict] | Callable[[], list[dict]],
    execute: Execute,
    emit: Emit,
    max_steps: int,
    interruption: Callable[[], str | None] | None = None,
    history_chars: int | None = None,
    resume: LoopState | None = None,
    session: ToolSession | None = None,
) -> LoopResult:
    """Alternate model calls and tool calls until the model answers without
    tools or `max_steps` model calls were made. Exceptions from `execute`
    (e.g. the audit row could not be written) propagate: the caller fails the
    turn and the tool result never reaches the model. Before every model call
    the history is cut to the model's budget (`fit_history`) and, when
    `tools` is a function, the tools are asked for again (what a turn is
    offered may grow within it, e.g. read_spill after a spilled result).

    A tool call that needs a person's approval stops the loop with
    TurnSuspended (nothing of that call ran); `resume` continues from its
    state: the waiting call first (through the executor again, which now
    finds the decision), then the rest of its reply's calls, then the model.

    `session` is the run's tool session (its caller opens and closes it);
    `execute` is called as execute(session, name=..., arguments=...)."""
    session = session if session is not None else ToolSession(ctx=ctx)
    new: list[dict] = list(resume.new) if resume else []
    steps = resume.steps if resume else 0
    budget = history_chars or history_budget(ctx)
    current = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=len(messages))

    def check(pending: list[ToolCall] = (), *, announced: bool = False, handover: bool = True) -> None:
        # E.g. the owner deleted the conversation: stop before the next
        # model or tool call rather than finish a turn nobody may see.
        state = interruption() if interruption is not None else None
        if state == ABANDONED:
            raise TurnAbandoned
        if state == CANCELLED:
            raise TurnCancelled(new)
        if state == HANDOVER and handover:
            pending_json = [_call_json(c) for c in pending]
            fixed = resume is not None and resume.fixed
            state = LoopState(new=list(new), steps=steps, pending=pending_json, fixed=fixed, first_announced=announced)
            raise TurnHandedOver(state)

    def run_calls(calls: list[ToolCall], *, first_announced: bool) -> None:
        for index, call in enumerate(calls):
            check(calls[index:], announced=index == 0 and first_announced)
            if not (index == 0 and first_announced):
                emit(ServerEvent.TOOL_STARTED, step_started_payload(call, session))
            started = time.perf_counter()
            try:
                result = execute(session, name=call.name, arguments=call.arguments)
            except ApprovalSuspends as waiting:
                pending = [_call_json(c) for c in calls[index:]]
                fixed = resume is not None and resume.fixed
                state = LoopState(new=list(new), steps=steps, pending=pending, fixed=fixed)
                raise TurnSuspended(state, waiting.request) from None
            finished = step_finished_payload(call, result, round((time.perf_counter() - started) * 1000))
            emit(ServerEvent.TOOL_FINISHED, finished)
            new.append({"role": "tool", "tool_call_id": call.id, "content": result.content})

    if resume is not None:
        waiting = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in resume.pending]
        run_calls(waiting, first_announced=resume.first_announced)
        if resume.fixed:  # given calls, no model: done when they are
            return LoopResult(new_messages=new, final_text="", step_limit_hit=False)
    while steps < max_steps:
        check()
        stream = TokenSafeStream(lambda text: emit(ServerEvent.MESSAGE_DELTA, {"text": text}))
        sent = fit_history(messages + new, budget=budget, current=current)
        offered = tools() if callable(tools) else tools
        reply = client.complete(messages=sent, tools=offered, on_delta=stream.feed)
        steps += 1
        stream.flush()
        new.append(_assistant_entry(reply))
        # Stop pressed while the model answered: what streamed stays, the
        # turn ends cancelled rather than completed. (A handover waits for the
        # first tool call's check: a final answer just ends the turn.)
        check(handover=False)
        if not reply.tool_calls:
            emit(ServerEvent.MESSAGE_COMPLETED, {"text": reply.content})
            return LoopResult(new_messages=new, final_text=reply.content, step_limit_hit=False)
        run_calls(reply.tool_calls, first_announced=False)
    return LoopResult(new_messages=new, final_text="", step_limit_hit=True)
