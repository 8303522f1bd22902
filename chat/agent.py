"""The single agent loop. Chat, playbooks and sub-agents all run this loop;
every tool call goes through the executor passed in, never around it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from chat.context import TurnContext
from chat.executor import ToolResult
from chat.llm import AssistantReply, ModelClient

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
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return entry


class TurnAbandoned(Exception):
    """`still_wanted` said no: the turn stops where it is."""


def run_agent_loop(
    *,
    ctx: TurnContext,
    client: ModelClient,
    messages: list[dict],
    tools: list[dict],
    execute: Execute,
    emit: Emit,
    max_steps: int,
    still_wanted: Callable[[], bool] | None = None,
) -> LoopResult:
    """Alternate model calls and tool calls until the model answers without
    tools or `max_steps` model calls were made. Exceptions from `execute`
    (e.g. the audit row could not be written) propagate: the caller fails the
    turn and the tool result never reaches the model."""
    new: list[dict] = []

    def check() -> None:
        # E.g. the owner deleted the conversation: stop before the next
        # model or tool call rather than finish a turn nobody may see.
        if still_wanted is not None and not still_wanted():
            raise TurnAbandoned

    for _step in range(max_steps):
        check()
        stream = TokenSafeStream(lambda text: emit("message.delta", {"text": text}))
        reply = client.complete(messages=messages + new, tools=tools, on_delta=stream.feed)
        stream.flush()
        new.append(_assistant_entry(reply))
        if not reply.tool_calls:
            emit("message.completed", {"text": reply.content})
            return LoopResult(new_messages=new, final_text=reply.content, step_limit_hit=False)
        for call in reply.tool_calls:
            check()
            emit("tool.started", {"call_id": call.id, "tool": call.name})
            result = execute(ctx, name=call.name, arguments=call.arguments)
            emit(
                "tool.finished",
                {"call_id": call.id, "tool": call.name, "outcome": result.outcome, "row_count": result.row_count},
            )
            new.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
    return LoopResult(new_messages=new, final_text="", step_limit_hit=True)
