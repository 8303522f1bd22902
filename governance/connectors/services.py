"""Connector actions: resolve how to reach a connector, sync its tool list,
review a changed definition, set a tool's policy. Each writes its audit
event in the same transaction as the change (not recorded, not changed)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.actors import SYSTEM, Actor, as_actor
from audit.changes import Fields
from audit.events import audit_event_write
from audit.governed import GovernedModel, register_governed
from audit.models import EventKind, ResourceKind
from governance.connectors.client import (
    ConnectorConfigError,
    ConnectorError,
    ConnectorSessions,
    ConnectorTarget,
    StdioCommand,
)
from governance.connectors.definitions import ToolDefinition, definition_hash, tool_slug, untrusted_text
from governance.models import (
    Connector,
    ConnectorTool,
    ConnectorToolPolicy,
    ConnectorToolState,
    ConnectorTransport,
    Role,
    validate_secret_headers,
)
from governance.services import GovernanceError, _record_setting, roles_losing_grants

logger = logging.getLogger(__name__)

TOOL_NAME_MAX = 200  # ConnectorTool.name
TRIGGER_ADMIN = "admin"
TRIGGER_JOB = "job"


def connector_target(*, connector: Connector) -> ConnectorTarget:
    """How to reach the connector now, secrets read from the environment.
    Raises ConnectorConfigError (a message for the admin and the model) when
    its settings cannot be used: checked again here, not only in the admin,
    so a setting changed behind the admin's back still fails closed."""
    timeouts = {
        "call_timeout": float(connector.timeout_seconds or 1),
        "connect_timeout": float(settings.OWLAI_CONNECTOR_CONNECT_SECONDS),
    }
    if connector.transport == ConnectorTransport.STDIO:
        spec = settings.OWLAI_INSTALL.connector_command(connector.command)
        if spec is None:
            raise ConnectorConfigError(_("The connector's command is not allowed by the install config."))
        env = {name: _env(name) for name in spec.env}
        stdio = StdioCommand(command=spec.command, args=spec.args, env=env, cwd=spec.cwd)
        key = _key(connector, spec.command, list(spec.args), sorted(spec.env), spec.cwd)
        return ConnectorTarget(key=key, name=connector.name, stdio=stdio, **timeouts)
    if connector.transport == ConnectorTransport.STREAMABLE_HTTP:
        if not connector.url.startswith(("http://", "https://")):
            raise ConnectorConfigError(_("The connector has no http(s) URL."))
        try:
            validate_secret_headers(connector.secret_headers)
        except ValidationError as error:
            raise ConnectorConfigError(" ".join(error.messages)) from None
        headers = {header: _env(name) for header, name in connector.secret_headers.items()}
        key = _key(connector, connector.url, sorted(connector.secret_headers.items()))
        return ConnectorTarget(key=key, name=connector.name, url=connector.url, headers=headers, **timeouts)
    raise ConnectorConfigError(_("The connector's transport is not supported."))


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ConnectorConfigError(_("Environment variable %(name)s is not set.") % {"name": name})
    return value


def _key(connector: Connector, *parts: object) -> str:
    raw = json.dumps([connector.pk, connector.transport, connector.timeout_seconds, *parts], default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class SyncResult:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # Definitions that differ from the pinned one (now awaiting review), or
    # came back to it.
    changed: list[str] = field(default_factory=list)
    ignored: int = 0  # entries without a usable name

    @property
    def list_changed(self) -> bool:
        return bool(self.added or self.removed)


def connector_tools_sync(
    *, connector: Connector, actor=None, request=None, sessions: ConnectorSessions | None = None
) -> SyncResult:
    """Fetch the connector's tool list and record what changed.

    Whenever the list actually changes, one event lists the tools added and
    removed and the trigger (the admin who synced, or the scheduled job).
    A tool whose definition differs from its pinned hash is switched off
    (state `changed`) until an admin approves it; each such change is an
    event. A new tool (also a renamed one: a new name) is held back the same
    way, with nothing pinned, until an admin has seen its definition, and
    starts with the `require approval` policy. Raises
    ConnectorError when the server cannot be listed (recorded on the
    connector for the admin; the tools stay as they were)."""
    try:
        target = connector_target(connector=connector)
        if sessions is not None:
            definitions = sessions.list_tools(target)
        else:
            with ConnectorSessions() as own:
                definitions = own.list_tools(target)
    except ConnectorError as error:
        Connector.objects.filter(pk=connector.pk).update(last_sync_error=str(error)[:300])
        raise
    trigger = TRIGGER_ADMIN if as_actor(actor=actor, request=request).is_user else TRIGGER_JOB
    return _apply_tool_list(connector=connector, definitions=definitions, actor=actor, request=request, trigger=trigger)


@transaction.atomic
def _apply_tool_list(
    *, connector: Connector, definitions: list[ToolDefinition], actor, request, trigger: str
) -> SyncResult:
    # Locked: an admin's sync and the job's at the same moment must not both
    # record the same change.
    locked = Connector.objects.select_for_update().get(pk=connector.pk)
    existing = {tool.name: tool for tool in ConnectorTool.objects.filter(connector=locked)}
    listed: dict[str, ToolDefinition] = {}
    ignored = 0
    for definition in definitions:
        name = definition.name
        if not isinstance(name, str) or not name or len(name) > TOOL_NAME_MAX or name in listed:
            ignored += 1
            continue
        if untrusted_text(name, TOOL_NAME_MAX) != name:  # control or format characters in a name
            ignored += 1
            continue
        listed[name] = definition
    taken = {tool.slug for tool in existing.values()}
    added: list[str] = []
    removed: list[str] = []
    changes: list[tuple[ConnectorTool, str, ToolDefinition]] = []
    now = timezone.now()
    for name, definition in listed.items():
        new_hash = definition.hash
        tool = existing.get(name)
        if tool is None:
            slug = tool_slug(name, taken)
            taken.add(slug)
            # A tool that appears (or a renamed one, which is a new name) is
            # held back like a changed one: nothing is pinned yet, its
            # server-written description waits for an admin's review before
            # any model is offered it.
            ConnectorTool.objects.create(
                connector=locked,
                name=name,
                slug=slug,
                description="",
                input_schema={},
                definition_hash="",
                pending_description=definition.description,
                pending_input_schema=definition.input_schema,
                pending_hash=new_hash,
                state=ConnectorToolState.CHANGED,
                policy=ConnectorToolPolicy.REQUIRE_APPROVAL,
                changed_at=now,
            )
            added.append(name)  # the list-changed event names it; nothing was pinned to differ from
            continue
        before_state, before_pending = tool.state, tool.pending_hash
        if tool.state == ConnectorToolState.REMOVED:
            added.append(name)
        if new_hash == tool.definition_hash:
            tool.state = ConnectorToolState.ACTIVE
            tool.pending_description, tool.pending_input_schema, tool.pending_hash = "", None, ""
            if before_pending:
                changes.append((tool, before_pending, definition))  # back to the pinned definition
        else:
            tool.state = ConnectorToolState.CHANGED
            if tool.pending_hash != new_hash:
                tool.pending_description = definition.description
                tool.pending_input_schema = definition.input_schema
                tool.pending_hash = new_hash
                changes.append((tool, before_pending or tool.definition_hash, definition))
        if (tool.state, tool.pending_hash) != (before_state, before_pending):
            tool.changed_at = now
            tool.save(
                update_fields=["state", "pending_description", "pending_input_schema", "pending_hash", "changed_at"]
            )
    for name, tool in existing.items():
        if name not in listed and tool.state != ConnectorToolState.REMOVED:
            tool.state = ConnectorToolState.REMOVED
            tool.changed_at = now
            tool.save(update_fields=["state", "changed_at"])
            removed.append(name)
    base = {"connector": locked.name, "trigger": trigger}
    if added or removed:
        audit_event_write(
            kind=EventKind.CONNECTOR_TOOLS_CHANGED,
            request=request,
            actor=actor,
            resource_kind=ResourceKind.CONNECTOR,
            resource_id=locked.pk,
            details={**base, "added": sorted(added), "removed": sorted(removed)},
        )
    for tool, previous_hash, definition in changes:
        audit_event_write(
            kind=EventKind.CONNECTOR_DEFINITION_CHANGED,
            request=request,
            actor=actor,
            resource_kind=ResourceKind.CONNECTOR_TOOL,
            resource_id=tool.pk,
            details={
                **base,
                "tool": tool.name,
                "fields": _changed_fields(tool, definition),
                "pinned_hash": tool.definition_hash,
                "previous_hash": previous_hash,
                "new_hash": definition.hash,
                "awaiting_review": tool.state == ConnectorToolState.CHANGED,
            },
        )
    locked.last_synced_at = now
    locked.last_sync_error = ""
    locked.save(update_fields=["last_synced_at", "last_sync_error"])
    return SyncResult(
        added=sorted(added), removed=sorted(removed), changed=sorted(t.name for t, *_ in changes), ignored=ignored
    )


def _changed_fields(tool: ConnectorTool, definition: ToolDefinition) -> list[str]:
    # Against the pinned definition: which parts an admin has to look at.
    fields = []
    if definition.description != tool.description:
        fields.append("description")
    if definition_hash(name="", description="", input_schema=definition.input_schema) != definition_hash(
        name="", description="", input_schema=tool.input_schema
    ):
        fields.append("input_schema")
    return fields


@transaction.atomic
def connector_tool_definition_approve(
    *, tool: ConnectorTool, actor=None, request=None, pending_hash: str | None = None
) -> ConnectorTool:
    """Pin the changed definition an admin reviewed; the tool is offered again.
    With `pending_hash`, only that definition (the one the admin saw) is approved."""
    locked = ConnectorTool.objects.select_for_update().select_related("connector").get(pk=tool.pk)
    if locked.state != ConnectorToolState.CHANGED or not locked.pending_hash:
        raise GovernanceError(_("%(tool)s has no changed definition to review.") % {"tool": locked})
    if pending_hash is not None and pending_hash != locked.pending_hash:
        raise GovernanceError(_("%(tool)s changed again since it was shown; review it again.") % {"tool": locked})
    before = locked.definition_hash
    locked.description = locked.pending_description
    locked.input_schema = locked.pending_input_schema if locked.pending_input_schema is not None else {}
    locked.definition_hash = locked.pending_hash
    locked.pending_description, locked.pending_input_schema, locked.pending_hash = "", None, ""
    locked.state = ConnectorToolState.ACTIVE
    locked.changed_at = timezone.now()
    locked.save()
    audit_event_write(
        kind=EventKind.CONNECTOR_DEFINITION_APPROVED,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.CONNECTOR_TOOL,
        resource_id=locked.pk,
        details={
            "connector": locked.connector.name,
            "tool": locked.name,
            "before_hash": before,
            "pinned_hash": locked.definition_hash,
        },
    )
    return locked


@transaction.atomic
def connector_tool_set_policy(*, tool: ConnectorTool, policy: str, actor=None, request=None) -> ConnectorTool:
    """Allow / require approval / block, per tool and install: a settings change."""
    if policy not in ConnectorToolPolicy.values:
        raise GovernanceError(_("Unknown tool policy: %(policy)s") % {"policy": policy})
    locked = ConnectorTool.objects.select_for_update().select_related("connector").get(pk=tool.pk)
    before = locked.policy
    if before == policy:
        return locked
    locked.policy = policy
    locked.save(update_fields=["policy"])
    _record_setting(
        kind=EventKind.CONNECTOR_TOOL_POLICY_SET,
        request=request,
        actor=actor,
        resource_kind=ResourceKind.CONNECTOR_TOOL,
        resource_id=locked.pk,
        setting=f"policy of connector tool {locked.connector.name}/{locked.name}",
        before=before,
        after=policy,
    )
    return locked


# --- the connector itself: created, changed, deleted on the record ---------------------
#
# Where a connector sends the company's data (its URL or command) and which
# secrets it sends along (the header names) decide what its tools reach: each
# change is a connector event with the before and after. The headers'
# values are environment variable names, recorded only as changed.


def shown_url(url: str) -> str:
    """A URL for the record: user info and query values (where credentials
    hide) replaced by ***; scheme, host, port and path kept."""
    try:
        parts = urlsplit(url or "")
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "***" if url else ""
    netloc = ("***@" if parts.username or parts.password else "") + host + (f":{port}" if port else "")
    query = "&".join(f"{name}=***" for name, _value in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


CONNECTORS = GovernedModel(
    model=Connector,
    resource_kind=ResourceKind.CONNECTOR,
    # Not exposure: it changes only by opening (governance.exposure records it).
    fields=Fields(
        plain=("name", "business_summary", "transport", "url", "command", "timeout_seconds"),
        keyed=("secret_headers",),
    ),
    shown={"url": shown_url},
    created=EventKind.CONNECTOR_CREATED,
    updated=EventKind.CONNECTOR_UPDATED,
    deleted=EventKind.CONNECTOR_DELETED,
)

_CONNECTOR_FIELDS = {"name", "business_summary", "transport", "url", "command", "secret_headers", "timeout_seconds"}


def connector_save(*, instance: Connector, actor: Actor, related=None):
    return CONNECTORS.save(instance=instance, actor=actor, related=related)


def connector_create(*, actor: Actor, **fields) -> Connector:
    unknown = set(fields) - _CONNECTOR_FIELDS - {"exposure"}
    if unknown:
        raise ValueError(f"not a connector field: {sorted(unknown)}")
    connector = Connector(**fields)
    connector.full_clean()
    CONNECTORS.save(instance=connector, actor=actor)
    return connector


def connector_update(*, connector: Connector, actor: Actor, **fields):
    """Change a connector's settings (exposure opens only through
    governance.exposure); one event, none when nothing changed."""
    unknown = set(fields) - _CONNECTOR_FIELDS
    if unknown:
        raise ValueError(f"not a connector field: {sorted(unknown)}")
    for name, value in fields.items():
        setattr(connector, name, value)
    connector.full_clean()
    return CONNECTORS.save(instance=connector, actor=actor)


def connector_delete(*, instance: Connector, actor: Actor):
    """Delete a connector with its tools; roles that allowed it lose it (each
    a permission-change event)."""
    with transaction.atomic(), roles_losing_grants(Role.objects.filter(connectors=instance), actor=actor):
        event = CONNECTORS.delete(instance=instance, actor=actor)
    return event


register_governed(Connector, save=connector_save, delete=connector_delete)


def connectors_sync_all(*, sessions: ConnectorSessions | None = None) -> dict[str, str]:
    """The scheduled job: sync every connector; one failing connector does
    not stop the others. Returns {connector: "ok" | error message}."""
    outcome: dict[str, str] = {}
    with contextlib.nullcontext(sessions) if sessions is not None else ConnectorSessions() as shared:
        for connector in Connector.objects.order_by("name"):
            try:
                connector_tools_sync(connector=connector, sessions=shared, actor=SYSTEM)
                outcome[connector.name] = "ok"
            except ConnectorError as error:
                outcome[connector.name] = str(error)
                logger.warning("connector %s: tool sync failed: %s", connector.name, error)
    return outcome
