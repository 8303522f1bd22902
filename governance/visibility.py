"""Which resources a turn may see. One decision, `decide`, used
both to build everything the model is shown and, again, by the executor
before any tool runs.

    accessible  = granted AND (private tier OR exposure all_models)
    name only   = not granted AND (private tier OR exposure all_models)
    hidden      = otherwise: not even the name reaches the model

Connector tools follow the same decision (the connector is the resource;
roles allow it as a whole), and are offered only while their definition is
the reviewed one and their policy is not `block`.

Fails closed: an error while deciding hides everything (prompt) or refuses
(executor). Unknown tiers or exposures are treated as public / internal-only.
"""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection as db

from governance.connectors.definitions import (
    SEPARATOR,
    description_for_model,
    model_tool_name,
    schema_for_model,
    untrusted_text,
)
from governance.models import (
    ClassificationRevision,
    Connector,
    ConnectorTool,
    ConnectorToolPolicy,
    ConnectorToolState,
    DbConnection,
    DbGrant,
    DocumentCollection,
    Exposure,
    Role,
    Tier,
)
from governance.sql.table_access import GrantScope
from owlai import prepared
from owlai.tool_names import ToolName

logger = logging.getLogger(__name__)


class Sight(enum.Enum):
    ACCESSIBLE = "accessible"
    NAME_ONLY = "name_only"
    HIDDEN = "hidden"


def decide(*, tier: str, exposure: str, granted: bool) -> Sight:
    """The visibility decision for one resource in one turn."""
    exposed = tier == Tier.PRIVATE or exposure == Exposure.ALL_MODELS
    if not exposed:
        return Sight.HIDDEN
    return Sight.ACCESSIBLE if granted else Sight.NAME_ONLY


@dataclass(frozen=True)
class TurnResources:
    """Everything about resources a turn's model may be told."""

    connections: list[DbConnection] = field(default_factory=list)
    collections: list[DocumentCollection] = field(default_factory=list)
    # Names the model may see but not use, so it can say "you lack access".
    unpermitted_connection_names: list[str] = field(default_factory=list)
    unpermitted_collection_names: list[str] = field(default_factory=list)
    connectors: list[Connector] = field(default_factory=list)
    unpermitted_connector_names: list[str] = field(default_factory=list)

    def accessible_names(self) -> set[str]:
        return {c.name for c in self.connections} | {c.name for c in self.collections}


def visible_resources(*, user_id: int, tier: str) -> TurnResources:
    try:
        resources = TurnResources()
        for connection in _with_grant(DbConnection, user_id):
            sight = decide(tier=tier, exposure=connection.exposure, granted=connection.granted)
            if sight is Sight.ACCESSIBLE:
                resources.connections.append(connection)
            elif sight is Sight.NAME_ONLY:
                resources.unpermitted_connection_names.append(connection.name)
        for collection in _with_grant(DocumentCollection, user_id):
            sight = decide(tier=tier, exposure=collection.exposure, granted=collection.granted)
            if sight is Sight.ACCESSIBLE:
                resources.collections.append(collection)
            elif sight is Sight.NAME_ONLY:
                resources.unpermitted_collection_names.append(collection.name)
        for connector in _with_grant(Connector, user_id):
            sight = decide(tier=tier, exposure=connector.exposure, granted=connector.granted)
            if sight is Sight.ACCESSIBLE:
                resources.connectors.append(connector)
            elif sight is Sight.NAME_ONLY:
                resources.unpermitted_connector_names.append(connector.name)
        return resources
    except Exception:
        logger.exception("visibility decision failed; hiding all resources")
        return TurnResources()


def _active_member() -> str:
    """The join every grant query makes on the role's member: a grant counts
    only for an active account. The executor re-checks grants before every
    call, so a person deactivated while their run is in flight (a chat turn,
    a playbook step) gets nothing from the next call on, not only from the
    next turn. Called by the cached SQL builders, once apps are ready."""
    users = get_user_model()._meta.db_table
    return f" JOIN {users} member ON member.id = ru.user_id AND member.is_active"


def _with_grant(model, user_id: int) -> list:
    """Every row of `model` by name, each with `granted`: whether a role of
    the user grants it. One prepared statement per kind (every turn runs
    them; planning the joins cost more than running them)."""
    rows = prepared.fetchall(_with_grant_sql(model), [user_id])
    found = []
    for row in rows:
        instance = prepared.instances(model, row)
        instance.granted = bool(row[-1])
        found.append(instance)
    return found


@cache
def _with_grant_sql(model) -> str:
    role_users = Role.users.through._meta.db_table
    if model is DbConnection:
        grants, column = DbGrant._meta.db_table, "connection_id"
    elif model is DocumentCollection:
        grants, column = Role.document_collections.through._meta.db_table, "documentcollection_id"
    else:
        grants, column = Role.connectors.through._meta.db_table, "connector_id"
    granted = (
        f"EXISTS (SELECT 1 FROM {grants} g JOIN {role_users} ru ON ru.role_id = g.role_id{_active_member()}"
        f" WHERE g.{column} = r.id AND ru.user_id = %s)"
    )
    return f"SELECT {prepared.columns(model, 'r')}, {granted} FROM {model._meta.db_table} r ORDER BY r.name"


def _grants_for(user_id: int):
    return DbGrant.objects.filter(role__users__id=user_id)


@cache
def _access_sql() -> str:
    """Grants of user %s on the connection named %s, with the connection's
    columns and the classification revision token (one round trip for all).
    Raw SQL: this runs on every tool call, and the ORM spent longer compiling
    the four-way join than the database spent running it (bench/executor.py)."""
    columns = ", ".join(f"c.{f.column}" for f in DbConnection._meta.concrete_fields)
    revision = f"(SELECT r.token FROM {ClassificationRevision._meta.db_table} r WHERE r.id = 1)"
    return (
        f"SELECT g.whole_database, g.tables, {revision}, {columns}"
        f" FROM {DbGrant._meta.db_table} g"
        f" JOIN {Role.users.through._meta.db_table} ru ON ru.role_id = g.role_id{_active_member()}"
        f" JOIN {DbConnection._meta.db_table} c ON c.id = g.connection_id"
        " WHERE ru.user_id = %s AND c.name = %s"
    )


def _access_rows(user_id: int, connection_name: str) -> list[tuple]:
    # Prepared on PostgreSQL: planning this join cost more than running it.
    return prepared.fetchall(_access_sql(), [user_id, connection_name])


@cache
def _connection_field_names() -> tuple[str, ...]:
    return tuple(f.attname for f in DbConnection._meta.concrete_fields)


class DbAccess(NamedTuple):
    connection: DbConnection
    scope: GrantScope
    # ClassificationRevision token, read in the same query (None: unknown);
    # the key under which the executor may reuse the analysed schema.
    classification_revision: str | None


def db_access(*, user_id: int, tier: str, connection_name: str) -> DbAccess | None:
    """The named connection and the user's merged grant on it, when this turn
    may use it; None otherwise (no such connection, no grant, or hidden from
    this tier: the caller must not tell these apart). Exceptions propagate:
    the executor refuses on them."""
    rows = _access_rows(user_id, connection_name)
    if not rows:
        return None
    connection = DbConnection.from_db(db.alias, list(_connection_field_names()), rows[0][3:])
    if decide(tier=tier, exposure=connection.exposure, granted=True) is not Sight.ACCESSIBLE:
        return None
    # Raw rows carry JSON as text on some backends (see _table_list).
    connection.schemas = _table_list(connection.schemas)
    scope = GrantScope.merge(
        ((bool(whole), _table_list(tables)) for whole, tables, *_ in rows),
        connection.sql_dialect,
        schemas=connection.schemas,
    )
    if scope is None:
        return None
    return DbAccess(connection, scope, rows[0][2])


def collection_access(*, user_id: int, tier: str, collection_name: str) -> DocumentCollection | None:
    """The named collection when this turn may search it; None otherwise."""
    collection = DocumentCollection.objects.filter(
        name=collection_name, roles__users__id=user_id, roles__users__is_active=True
    ).first()
    if collection is None:
        return None
    if decide(tier=tier, exposure=collection.exposure, granted=True) is not Sight.ACCESSIBLE:
        return None
    return collection


def _table_list(raw: object) -> list[str]:
    # JSON columns come back as text from a raw cursor (SQLite, and PostgreSQL
    # under Django's jsonb loader); anything but a list of strings grants nothing.
    value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    if not isinstance(value, list):
        return []
    return [t for t in value if isinstance(t, str)]


# --- connector tools ---------------------------------------------------------------

TOOL_SEARCH = ToolName.SEARCH_CONNECTOR_TOOLS
# What the model is told for any connector tool it may not call: the same
# words whether the tool does not exist, its connector is not allowed for the
# role, is hidden from this tier, or the tool is blocked or under review; the
# name is not echoed, so a refusal never confirms that something exists.
TOOL_UNAVAILABLE = "no tool of that name is available"


@dataclass(frozen=True)
class ConnectorToolView:
    """One connector tool as a turn may see and call it."""

    model_name: str  # `<connector>__<slug>`: the name in the model's tool list
    connector_id: int
    connector_name: str
    tool_id: int
    tool_name: str  # as the server names it (what is called)
    description: str  # for the model: cut short, labelled as the server's words
    input_schema: dict  # for the model: structure only
    policy: str
    definition_hash: str  # the pinned hash; the call checks the server still has it
    # The connector as read with the decision (how to reach it), when the
    # decision read it: the executor's call needs no second query.
    connector: Any = field(default=None, compare=False, repr=False)

    def schema(self) -> dict:
        """The OpenAI-compatible function schema."""
        return {
            "type": "function",
            "function": {"name": self.model_name, "description": self.description, "parameters": self.input_schema},
        }


def _offered(tool: ConnectorTool) -> bool:
    return (
        tool.state == ConnectorToolState.ACTIVE
        and not tool.pending_hash
        and tool.policy in (ConnectorToolPolicy.ALLOW, ConnectorToolPolicy.REQUIRE_APPROVAL)
    )


def _view(connector: Connector, tool: ConnectorTool, *, with_connector: bool = False) -> ConnectorToolView:
    return ConnectorToolView(
        model_name=model_tool_name(connector.name, tool.slug),
        connector_id=connector.pk,
        connector_name=connector.name,
        tool_id=tool.pk,
        tool_name=tool.name,
        description=description_for_model(tool.description, connector_name=connector.name),
        input_schema=schema_for_model(tool.input_schema),
        policy=tool.policy,
        definition_hash=tool.definition_hash,
        connector=connector if with_connector else None,
    )


def visible_connector_tools(*, user_id: int, tier: str) -> list[ConnectorToolView]:
    """Every connector tool this turn may be shown: its connector allowed for
    one of the user's roles and visible to the tier; the tool active, with its
    reviewed definition, and not blocked. An error hides them all."""
    try:
        views = []
        for row in prepared.fetchall(_allowed_tools_sql(), [user_id]):
            tool = prepared.instances(ConnectorTool, row)
            connector = prepared.instances(Connector, row, len(ConnectorTool._meta.concrete_fields))
            if decide(tier=tier, exposure=connector.exposure, granted=True) is Sight.ACCESSIBLE and _offered(tool):
                views.append(_view(connector, tool))
        return views
    except Exception:
        logger.exception("connector tool visibility failed; hiding all connector tools")
        return []


@cache
def _allowed_tools_sql() -> str:
    """The tools of every connector a role of user %s allows, with their
    connector, by connector name and slug (prepared: every model call asks)."""
    role_users, allowed = Role.users.through._meta.db_table, Role.connectors.through._meta.db_table
    return (
        f"SELECT {prepared.columns(ConnectorTool, 't')}, {prepared.columns(Connector, 'c')}"
        f" FROM {ConnectorTool._meta.db_table} t JOIN {Connector._meta.db_table} c ON c.id = t.connector_id"
        f" WHERE EXISTS (SELECT 1 FROM {allowed} a JOIN {role_users} ru ON ru.role_id = a.role_id{_active_member()}"
        " WHERE a.connector_id = c.id AND ru.user_id = %s)"
        " ORDER BY c.name, t.slug"
    )


class ConnectorToolDecision(NamedTuple):
    tool: ConnectorToolView | None
    # Why not (for the audit row, never for the model: it gets TOOL_UNAVAILABLE).
    reason: str


def connector_tool_decision(*, user_id: int, tier: str, model_name: str) -> ConnectorToolDecision:
    """The executor's re-check of one call by its model-facing name. Exceptions
    propagate: the executor refuses on them. One round trip (it runs on every
    connector call): the tool, its connector and whether a role of the user
    allows it."""
    connector_name, separator, slug = (model_name or "").partition(SEPARATOR)
    if not separator or not connector_name or not slug:
        return ConnectorToolDecision(None, "unknown tool")
    rows = prepared.fetchall(_tool_decision_sql(), [user_id, connector_name, slug])
    if not rows:
        return ConnectorToolDecision(None, "unknown tool")
    granted, *values = rows[0]
    tool_values, connector_values = values[: len(_TOOL_COLUMNS)], values[len(_TOOL_COLUMNS) :]
    connector = Connector(**_loaded(Connector, dict(zip(_CONNECTOR_COLUMNS, connector_values, strict=True))))
    tool = ConnectorTool(**_loaded(ConnectorTool, dict(zip(_TOOL_COLUMNS, tool_values, strict=True))))
    if not granted:
        return ConnectorToolDecision(None, "connector not allowed for the user's roles")
    if decide(tier=tier, exposure=connector.exposure, granted=True) is not Sight.ACCESSIBLE:
        return ConnectorToolDecision(None, "connector hidden from this tier")
    if tool.state == ConnectorToolState.REMOVED:
        return ConnectorToolDecision(None, "tool removed by the server")
    if tool.state != ConnectorToolState.ACTIVE or tool.pending_hash:
        return ConnectorToolDecision(None, "tool definition changed, awaiting review")
    if tool.policy == ConnectorToolPolicy.BLOCK:
        return ConnectorToolDecision(None, "tool blocked by policy")
    if not _offered(tool):
        return ConnectorToolDecision(None, "tool not offered")
    return ConnectorToolDecision(_view(connector, tool, with_connector=True), "")


# What the decision reads of a tool and of its connector (all a call needs).
_TOOL_COLUMNS = ("id", "connector_id", "name", "slug", "description", "input_schema", "definition_hash",
                 "pending_hash", "state", "policy")  # fmt: skip
_CONNECTOR_COLUMNS = ("id", "name", "transport", "url", "command", "secret_headers", "timeout_seconds", "exposure")


@cache
def _tool_decision_sql() -> str:
    """Raw SQL, prepared on PostgreSQL: the ORM spent longer compiling such a
    join than the database spent running it (as for db_access)."""
    tool_columns = ", ".join(f"t.{ConnectorTool._meta.get_field(name).column}" for name in _TOOL_COLUMNS)
    connector_columns = ", ".join(f"c.{Connector._meta.get_field(name).column}" for name in _CONNECTOR_COLUMNS)
    role_connectors = Role.connectors.through._meta.db_table
    role_users = Role.users.through._meta.db_table
    granted = (
        f"EXISTS (SELECT 1 FROM {role_connectors} rc JOIN {role_users} ru ON ru.role_id = rc.role_id{_active_member()}"
        " WHERE rc.connector_id = c.id AND ru.user_id = %s)"
    )
    return (
        f"SELECT {granted}, {tool_columns}, {connector_columns}"
        f" FROM {ConnectorTool._meta.db_table} t JOIN {Connector._meta.db_table} c ON c.id = t.connector_id"
        " WHERE c.name = %s AND t.slug = %s"
    )


def _loaded(model, values: dict) -> dict:
    """Raw values as the model's fields hold them: JSON columns come back as
    text from a raw cursor (SQLite, and PostgreSQL under Django's loader)."""
    out = {}
    for name, value in values.items():
        if model._meta.get_field(name).get_internal_type() == "JSONField" and isinstance(value, str | bytes):
            value = json.loads(value)
        out[name] = value
    return out


@dataclass(frozen=True)
class ConnectorToolOffer:
    """The connector tools a model call carries: every visible one, or, past
    the threshold, the tool-search tool plus those the turn loaded through it
    (re-decided now: a tool loaded earlier that is no longer visible is gone)."""

    tools: list[ConnectorToolView]
    search: bool

    def schemas(self) -> list[dict]:
        schemas = [tool.schema() for tool in self.tools]
        if self.search:
            schemas.append(tool_search_schema())
        return schemas


def connector_tool_offer(
    *, user_id: int, tier: str, loaded: set[str] | frozenset[str] = frozenset()
) -> ConnectorToolOffer:
    visible = visible_connector_tools(user_id=user_id, tier=tier)
    if len(visible) <= settings.OWLAI_CONNECTOR_TOOL_SEARCH_THRESHOLD:
        return ConnectorToolOffer(visible, search=False)
    return ConnectorToolOffer([tool for tool in visible if tool.model_name in loaded], search=True)


def tool_search_schema() -> dict:
    return {
        "type": "function",
        "function": {
            "name": TOOL_SEARCH,
            "description": (
                "Find connector tools (connected services such as mail or an issue tracker) by keywords. "
                "The tools found become callable in the following steps."
            ),
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "Keywords describing the task."}},
                "required": ["query"],
            },
        },
    }


SEARCH_QUERY_MAX = 200
SEARCH_LIMIT = 8


def connector_tool_search(*, user_id: int, tier: str, query: str, limit: int = SEARCH_LIMIT) -> list[ConnectorToolView]:
    """The tools the search tool returns: only visible ones (the same decision
    as the tool list), best keyword matches first."""
    words = {w for w in untrusted_text(query, SEARCH_QUERY_MAX).lower().replace("_", " ").split() if len(w) > 1}
    if not words:
        return []
    scored = []
    for tool in visible_connector_tools(user_id=user_id, tier=tier):
        haystack = f"{tool.model_name} {tool.tool_name} {tool.description}".lower().replace("_", " ")
        score = sum(haystack.count(word) for word in words)
        if score:
            scored.append((-score, tool.model_name, tool))
    return [tool for *_, tool in sorted(scored, key=lambda item: item[:2])[:limit]]
