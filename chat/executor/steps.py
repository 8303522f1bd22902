"""What a tool call's step shows before it runs (the `tool.started` event):
the call as the model wrote it, tokens included, as its tool summarises it
(`Tool.summary`). The agent loop asks here and knows no tool."""

from __future__ import annotations

from django.conf import settings

from chat.context import TurnContext
from chat.executor.pipeline import parse_arguments
from chat.executor.registry import REGISTRY
from chat.executor.session import ToolSession, session_of

# What a step shows of its input: enough to read, bounded so one step cannot
# make a stored event (and every resync) huge.
STEP_INPUT_MAX_CHARS = 10_000
STEP_RESOURCE_MAX_CHARS = 200


def step_summary(session: ToolSession | TurnContext, name: str, arguments: str) -> dict:
    """What a call's step shows before it runs, as its tool summarises it:
    `resource` and its input fields, each bounded (`input_truncated` when cut).
    Unknown tools and unparseable or oversize arguments show nothing more;
    the executor refuses them."""
    if len(arguments or "") > settings.OWLAI_TOOL_ARGUMENT_MAX_CHARS:
        return {}
    try:
        args = parse_arguments(arguments)
        tool = REGISTRY.find(session_of(session).ctx, name)
        fields = tool.summary(args) if tool is not None else {}
    except Exception:
        # Only what the step shows: the call itself is decided by the pipeline.
        return {}
    out: dict = {}
    for key, value in fields.items():
        if not isinstance(value, str):
            continue
        limit = STEP_RESOURCE_MAX_CHARS if key == "resource" else STEP_INPUT_MAX_CHARS
        out[key] = value[:limit]
        if key != "resource" and len(value) > limit:
            out["input_truncated"] = True
    return out


def summary_fields(args: dict, *, resource: str | None = None, inputs: tuple[str, ...] = ()) -> dict[str, str]:
    """A tool's `summary` of plain string arguments: the one naming its
    resource, and its input fields."""
    out = {}
    if resource is not None and isinstance(args.get(resource), str):
        out["resource"] = args[resource]
    out.update({name: args[name] for name in inputs if isinstance(args.get(name), str)})
    return out
