"""Connector (MCP) tools: a family of tools found by name at run time.

Every tool an admin's connectors offer is called `<connector>__<tool>`; the
source below hands the registry one `ConnectorCall` per name, and it goes
through the same stages as every other tool:

    VISIBILITY  governance.visibility.connector_tool_decision, again, for this
                call: the connector allowed for one of the user's roles and
                visible to the turn's tier, the tool active with its reviewed
                definition and not blocked. Anything else (unknown, hidden,
                not allowed, blocked, changed) is one `denied` row whose reason
                says why, and the model reads "no tool of that name is
                available" whatever the cause: a public-tier turn learns
                nothing about an internal-only connector, not even from a
                refusal (the name it wrote is not echoed).
    POLICY      the install's policy of the tool: allow / require approval
                (-> the approval gate, chat.approvals) / block.
    CHECKS      the arguments: a JSON object of at most
                OWLAI_CONNECTOR_ARGUMENT_MAX_CHARS, matching the basic shape of
                the pinned input schema (required properties, JSON types,
                no unknown properties where the schema forbids them). Tokens
                in them stay tokens: nothing is re-identified into a connector's
                arguments (they leave the platform; the user's originals are
                not the model's to send).
    RUN         through the run's MCP sessions (their per-run state,
                `ConnectorTurn`, in the run's ToolSession): one session per
                connector, reused by every call of the run, closed when the
                run's task ends; the server's current definition of the
                tool must still hash to the pinned one. Timeouts, crashes and
                protocol errors are `failed` outcomes with the client's
                value-free message.
    SHAPING     text, structured content and embedded resources (binary
                already a size marker; every string in one spelling and a
                JSON text parsed by the client: governance.connectors.spelling)
                like any result: URL references for every URL not provably
                plain, known values, detectors (numbers too, floats included),
                spill with a preview bounded whatever the result's shape.

Audit rows name the user, the connector (resource), the tool, the outcome,
the duration, the origin and the conversation and turn by value; never the
arguments or the result.

Past OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD visible tools a turn is offered
`search_connector_tools` instead of every schema; what it finds is loaded
for the rest of the turn and decided again on every model call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.utils.translation import gettext_noop

from audit.models import ResourceKind
from chat.executor.pipeline import Call, Offer, Output, Target
from chat.executor.policy import ALWAYS_ALLOW, Decision
from chat.executor.reasons import Reason, Refused, ToolFailed, Unavailable, Unrecorded
from chat.executor.session import ToolSession
from chat.executor.steps import summary_fields
from governance.connectors.definitions import SCHEMA_MAX_DEPTH, SEPARATOR
from governance.models import ConnectorToolPolicy
from governance.visibility import (
    SEARCH_QUERY_MAX,
    TOOL_SEARCH,
    ConnectorToolView,
    connector_tool_decision,
    connector_tool_offer,
    connector_tool_search,
    visible_connector_tools,
)

# The audit row's tool column; real connector tool names are at most 64.
NAME_MAX = 100

# The words the model reads for any connector tool it may not call
# (governance.visibility.TOOL_UNAVAILABLE, marked here for translation).
UNAVAILABLE = Reason(gettext_noop("no tool of that name is available"))


# --- What one turn holds -------------------------------------------------------------


class ConnectorTurn:
    """One run's connector state (the connector tools' `run_state`): its MCP
    sessions (opened on first use, one per connector, reused by every call,
    closed with the run's session) and the tools it loaded through the tool
    search (kept when the run waits, so a resumed run is offered them)."""

    key = "connectors"

    def __init__(self, loaded: Iterable[str] = ()) -> None:
        self.loaded: set[str] = set(loaded)
        self._sessions: Any = None

    @classmethod
    def open(cls, stored: Any) -> ConnectorTurn:
        loaded = stored.get("loaded") if isinstance(stored, dict) else None
        return cls(name for name in loaded or [] if isinstance(name, str))

    def as_json(self) -> dict | None:
        return {"loaded": sorted(self.loaded)} if self.loaded else None

    def sessions(self):
        if self._sessions is None:
            # Imported on first use: only processes that call connectors load the SDK.
            from governance.connectors.client import ConnectorSessions

            self._sessions = ConnectorSessions()
        return self._sessions

    def close(self) -> None:
        if self._sessions is not None:
            self._sessions.close()
            self._sessions = None


def connector_state(session: ToolSession) -> ConnectorTurn:
    """The connector state of a run (opened on first use)."""
    return session.state(ConnectorTurn)


# --- The policy ---------------------------------------------------------------------


class ConnectorPolicy:
    """The install's policy of the tool (read with the visibility decision,
    so it is the policy as of this call). Anything unknown blocks."""

    def decide(self, call: Call) -> Decision:
        view: ConnectorToolView = call.target.resource
        if view.policy == ConnectorToolPolicy.ALLOW:
            return Decision.allow()
        if view.policy == ConnectorToolPolicy.REQUIRE_APPROVAL:
            return Decision.needs_approval(Reason(gettext_noop("this call needs the user's approval")))
        return Decision.deny(Reason(gettext_noop("the tool policy blocks this tool")))


CONNECTOR_POLICY = ConnectorPolicy()


# --- Argument checks -------------------------------------------------------------------

_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def arguments_problem(value: Any, schema: Any, path: str = "", depth: int = 0) -> Reason | None:
    """The first way `value` does not have the basic shape `schema` declares
    (types, required and, where forbidden, unknown properties), or None.
    Only structure: a server's patterns and formats are not run here (a
    hostile pattern could take forever); the server checks the rest."""
    if not isinstance(schema, dict) or depth > SCHEMA_MAX_DEPTH:
        return None
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else [t for t in declared or [] if isinstance(t, str)]
    known = [t for t in types if t in _JSON_TYPES]
    if known and not any(_JSON_TYPES[t](value) for t in known):
        return Reason(
            gettext_noop("argument %(path)s must be of type %(type)s"), path=path or "(all)", type=" or ".join(known)
        )
    if isinstance(value, dict):
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for name in schema.get("required") or []:
            if isinstance(name, str) and name not in value:
                return Reason(gettext_noop("missing required argument %(path)s"), path=_join(path, name))
        if schema.get("additionalProperties") is False:
            for name in value:
                if name not in properties:
                    # The name is the model's own text: it is told, the audit row is not.
                    return Reason(gettext_noop("unknown argument %(path)s"), path=Unrecorded(_join(path, name)))
        for name, item in value.items():
            if name in properties:
                problem = arguments_problem(item, properties[name], _join(path, name), depth + 1)
                if problem is not None:
                    return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problem = arguments_problem(item, schema["items"], f"{path}[{index}]", depth + 1)
            if problem is not None:
                return problem
    return None


def _join(path: str, name: str) -> str:
    name = name[:64]
    return f"{path}.{name}" if path else name


# --- The tools ----------------------------------------------------------------------


class ConnectorCall:
    """One connector tool, by the name the model called."""

    resource_kind = ResourceKind.CONNECTOR
    target_argument = None  # the tool's name names its connector
    result_key = "connector"
    unavailable = UNAVAILABLE
    failed = Reason(gettext_noop("the connector call failed"))
    policy = CONNECTOR_POLICY
    run_state = ConnectorTurn

    def __init__(self, name: str) -> None:
        self.name = name[:NAME_MAX]

    def definition(self, offer: Offer) -> dict | None:
        decision = connector_tool_decision(user_id=offer.ctx.user_id, tier=offer.ctx.tier, model_name=self.name)
        return decision.tool.schema() if decision.tool is not None else None

    def audit_statement(self, args: dict) -> str:
        return ""  # connector arguments hold mail bodies, comments, customer data: never recorded

    def summary(self, args: dict) -> dict[str, str]:
        # What a step showed of any call before tools summarised themselves:
        # a `query` or `sql` argument (the approval card shows the rest).
        return summary_fields(args, inputs=("sql", "query"))

    def resolve(self, ctx, name: str) -> Target | None:
        decision = connector_tool_decision(user_id=ctx.user_id, tier=ctx.tier, model_name=self.name)
        if decision.tool is None:
            raise Unavailable(self.name.partition(SEPARATOR)[0], audit_reason=decision.reason or "unknown tool")
        view = decision.tool
        return Target(name=view.connector_name, pk=view.connector_id, resource=view)

    def check(self, call: Call) -> None:
        size = len(json.dumps(call.args, ensure_ascii=False))
        limit = settings.OWLAI_CONNECTOR_ARGUMENT_MAX_CHARS
        if size > limit:
            raise Refused(Reason(gettext_noop("arguments longer than %(limit)s characters"), limit=limit))
        problem = arguments_problem(call.args, call.target.resource.input_schema)
        if problem is not None:
            raise Refused(problem)

    def prepare(self, call: Call) -> None:
        pass

    def run(self, call: Call) -> Output:
        from governance.connectors.client import ConnectorConfigError, ConnectorError
        from governance.connectors.services import connector_target
        from governance.models import Connector

        view: ConnectorToolView = call.target.resource
        connector = view.connector or Connector.objects.get(pk=view.connector_id)
        try:
            target = connector_target(connector=connector)
        except ConnectorConfigError:
            # Its message names settings (variables, commands): for the admin, not the model.
            raise ToolFailed("connector misconfigured; an admin must fix its settings") from None
        sessions = call.run_state.sessions()
        try:
            # The arguments as the model wrote them: tokens stay tokens.
            result = sessions.call_tool(target, view.tool_name, call.args, pinned_hash=view.definition_hash)
        except ConnectorError as error:
            raise ToolFailed(str(error)) from None  # value-free by the client's contract
        payload: dict[str, Any] = {"tool": view.tool_name, "content": result.content}
        if result.structured is not None:
            payload["structured"] = result.structured
        return Output(
            payload=payload,
            row_count=len(result.content),
            items="content",
            failed="the connector's tool reported an error" if result.is_error else "",
        )

    def lineage(self, call: Call, output: Output) -> None:
        return None  # no column classification: known values and detectors do the work


class SearchConnectorTools:
    """`search_connector_tools(query)`: finds visible connector tools by
    keywords and loads them for the rest of the turn."""

    name = TOOL_SEARCH
    resource_kind = ResourceKind.CONNECTOR
    target_argument = None
    result_key = "search"
    unavailable = UNAVAILABLE
    failed = Reason(gettext_noop("the tool search failed"))
    policy = ALWAYS_ALLOW
    run_state = ConnectorTurn  # what it finds is loaded for the rest of the run

    def definition(self, offer: Offer) -> dict | None:
        return None  # offered by the source, with the tools it loaded

    def audit_statement(self, args: dict) -> str:
        return ""

    def summary(self, args: dict) -> dict[str, str]:
        return summary_fields(args, inputs=("query",))

    def resolve(self, ctx, name: str) -> Target | None:
        # Only a turn it is offered to may search (past the threshold).
        if not connector_tool_offer(user_id=ctx.user_id, tier=ctx.tier).search:
            return None
        return Target(name="connector tools", pk=None, resource=None)

    def check(self, call: Call) -> None:
        query = call.args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise Refused(Reason(gettext_noop("query is empty")))
        if len(query) > SEARCH_QUERY_MAX:
            raise Refused(Reason(gettext_noop("query is longer than %(limit)s characters"), limit=SEARCH_QUERY_MAX))
        call.state["query"] = query

    def prepare(self, call: Call) -> None:
        pass

    def run(self, call: Call) -> Output:
        found = connector_tool_search(user_id=call.ctx.user_id, tier=call.ctx.tier, query=call.state["query"])
        call.run_state.loaded.update(view.model_name for view in found)
        return Output(
            payload={"tools": [{"name": view.model_name, "description": view.description} for view in found]},
            row_count=len(found),
        )

    def lineage(self, call: Call, output: Output) -> None:
        return None


SEARCH_TOOL = SearchConnectorTools()


class ConnectorToolSource:
    """The registry's source of connector tools (chat.executor.registry)."""

    def find(self, ctx, name: str):
        if name == TOOL_SEARCH:
            return SEARCH_TOOL
        if isinstance(name, str) and SEPARATOR in name:
            # Whether it exists, may be seen or is allowed is the visibility
            # stage's decision: a refusal there reads the same for all of them.
            return ConnectorCall(name)
        return None

    def definitions(self, offer: Offer) -> list[dict]:
        loaded = frozenset(connector_state(offer.session).loaded)
        return connector_tool_offer(user_id=offer.ctx.user_id, tier=offer.ctx.tier, loaded=loaded).schemas()

    def tools(self, ctx) -> list:
        visible = visible_connector_tools(user_id=ctx.user_id, tier=ctx.tier)
        return [SEARCH_TOOL, *(ConnectorCall(view.model_name) for view in visible)]
