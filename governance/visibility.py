"""Which resources a turn may see. One decision, `decide`, used
both to build everything the model is shown and, again, by the executor
before any tool runs.

    accessible  = granted AND (private tier OR exposure all_models)
    name only   = not granted AND (private tier OR exposure all_models)
    hidden      = otherwise: not even the name reaches the model

Fails closed: an error while deciding hides everything (prompt) or refuses
(executor). Unknown tiers or exposures are treated as public / internal-only.
"""

from __future__ import annotations

import enum
import json
import logging
from dataclasses import dataclass, field
from functools import cache
from typing import NamedTuple

from django.db import connection as db

from governance.models import ClassificationRevision, DbConnection, DbGrant, DocumentCollection, Exposure, Role, Tier
from governance.sql.table_access import GrantScope
from owlai import prepared

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

    def accessible_names(self) -> set[str]:
        return {c.name for c in self.connections} | {c.name for c in self.collections}


def visible_resources(*, user_id: int, tier: str) -> TurnResources:
    try:
        granted_connections = set(_grants_for(user_id).values_list("connection_id", flat=True))
        granted_collections = set(
            Role.document_collections.through.objects.filter(role__users__id=user_id).values_list(
                "documentcollection_id", flat=True
            )
        )
        resources = TurnResources()
        for connection in DbConnection.objects.order_by("name"):
            sight = decide(tier=tier, exposure=connection.exposure, granted=connection.pk in granted_connections)
            if sight is Sight.ACCESSIBLE:
                resources.connections.append(connection)
            elif sight is Sight.NAME_ONLY:
                resources.unpermitted_connection_names.append(connection.name)
        for collection in DocumentCollection.objects.order_by("name"):
            sight = decide(tier=tier, exposure=collection.exposure, granted=collection.pk in granted_collections)
            if sight is Sight.ACCESSIBLE:
                resources.collections.append(collection)
            elif sight is Sight.NAME_ONLY:
                resources.unpermitted_collection_names.append(collection.name)
        return resources
    except Exception:
        logger.exception("visibility decision failed; hiding all resources")
        return TurnResources()


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
        f" JOIN {Role.users.through._meta.db_table} ru ON ru.role_id = g.role_id"
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
    collection = DocumentCollection.objects.filter(name=collection_name, roles__users__id=user_id).first()
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
