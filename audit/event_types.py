"""Audit event types: one registry, defined in code.

`AuditEvent.kind` has no database choices: a type is a value and a label
registered here, so adding one needs no migration (tests check it). The
coarse kinds written before the fine-grained ones stay registered: rows that
hold them still read in words.

Add a type as a member of EventKind (or, from another app, with
`register_event_type`), and write it with audit.events.audit_event_write,
which refuses an unregistered type (fail closed: a typo is no record).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

# AuditEvent.kind's column length: a longer type could not be stored.
KIND_MAX_LENGTH = 30


class EventKind(models.TextChoices):
    ADMIN_VIEW = "admin_view", _("Admin view")
    # Coarse kinds: no longer written; older rows of every change hold them.
    PERMISSION_CHANGE = "permission_change", _("Permission change")
    SETTINGS_CHANGE = "settings_change", _("Settings change")
    ANALYSIS_STARTED = "analysis_started", _("Schema analysis started")
    # Its end, in a worker: what the admin who started it reads on the connection.
    ANALYSIS_FINISHED = "analysis_finished", _("Schema analysis finished")
    ANALYSIS_FAILED = "analysis_failed", _("Schema analysis failed")
    PII_REVEAL = "pii_reveal", _("Personal data revealed")
    PII_REVEAL_REFUSED = "pii_reveal_refused", _("Personal data reveal refused")
    CSV_EXPORT = "csv_export", _("CSV export")
    # A connector's server listed other tools than before (added / removed),
    # with what triggered the sync: the tools the AI may use changed without
    # any role being edited.
    CONNECTOR_TOOLS_CHANGED = "connector_tools_changed", _("Connector tool list changed")
    # A tool's pinned definition (name, description, input schema) differs on
    # the server: the tool is off until an admin approves the new definition.
    CONNECTOR_DEFINITION_CHANGED = "connector_definition_changed", _("Connector tool definition changed")
    CONNECTOR_DEFINITION_APPROVED = "connector_definition_approved", _("Connector tool definition approved")
    URL_REVEAL = "url_reveal", _("Credentialed URL revealed")
    URL_REVEAL_REFUSED = "url_reveal_refused", _("Credentialed URL reveal refused")
    API_TOKEN_CREATED = "api_token_created", _("API token created")
    API_TOKEN_REVOKED = "api_token_revoked", _("API token revoked")
    API_TOKEN_USED = "api_token_used", _("API request with a token")
    # Decisions on connector calls that need approval (never the arguments:
    # they hold mail bodies, comments, customer data).
    APPROVAL_APPROVED = "approval_approved", _("Tool call approved")
    APPROVAL_ALWAYS_ALLOWED = "approval_always_allowed", _("Tool call always allowed")
    APPROVAL_DENIED = "approval_denied", _("Tool call denied")
    APPROVAL_EXPIRED = "approval_expired", _("Tool call approval expired")
    # Run without asking under the user's "always allow".
    APPROVAL_AUTO_APPROVED = "approval_auto_approved", _("Tool call approved automatically")
    # The same call was denied repeatedly in the conversation: refused without asking.
    APPROVAL_AUTO_BLOCKED = "approval_auto_blocked", _("Tool call blocked automatically")
    ALWAYS_ALLOW_REVOKED = "always_allow_revoked", _("Always allow revoked")
    # Fine-grained governed changes: one event per change, with the before
    # and after of what changed (audit.changes) and who made it. (They
    # replace `permission_change` and `settings_change` for roles,
    # connections, models and classifications; older rows keep those.)
    ROLE_CREATED = "role_created", _("Role created")
    ROLE_UPDATED = "role_updated", _("Role grants changed")
    ROLE_DELETED = "role_deleted", _("Role deleted")
    CONNECTION_CREATED = "connection_created", _("Database connection created")
    CONNECTION_UPDATED = "connection_updated", _("Database connection updated")
    CONNECTION_DELETED = "connection_deleted", _("Database connection deleted")
    MODEL_ENABLED = "model_enabled", _("Model enabled")
    MODEL_DISABLED = "model_disabled", _("Model disabled")
    FEATURE_DEFAULT_SET = "feature_default_set", _("Default model of a feature set")
    CLASSIFICATION_SET = "classification_set", _("Column classification set")
    CONNECTOR_CREATED = "connector_created", _("Connector created")
    CONNECTOR_UPDATED = "connector_updated", _("Connector updated")
    CONNECTOR_DELETED = "connector_deleted", _("Connector deleted")
    COLLECTION_CREATED = "collection_created", _("Document collection created")
    COLLECTION_UPDATED = "collection_updated", _("Document collection updated")
    COLLECTION_DELETED = "collection_deleted", _("Document collection deleted")
    DOCUMENT_CREATED = "document_created", _("Document uploaded")
    DOCUMENT_UPDATED = "document_updated", _("Document updated")
    DOCUMENT_DELETED = "document_deleted", _("Document deleted")
    USER_CREATED = "user_created", _("User created")
    USER_UPDATED = "user_updated", _("User updated")
    USER_PRIVILEGE_CHANGED = "user_privilege_changed", _("User privileges changed")
    GROUP_CREATED = "group_created", _("Group created")
    GROUP_UPDATED = "group_updated", _("Group updated")
    GROUP_DELETED = "group_deleted", _("Group deleted")
    USER_DELETED = "user_deleted", _("User deleted")
    RESOURCE_OPENED = "resource_opened", _("Resource opened to all models")
    CONNECTOR_TOOL_POLICY_SET = "connector_tool_policy_set", _("Connector tool policy set")


_TYPES: dict[str, object] = dict(EventKind.choices)


class EventTypeError(ValueError):
    """A type that cannot be registered (too long, or taken with another label)."""


def register_event_type(value: str, label) -> str:
    """Add a type defined outside this module; returns its value. The same
    value registered again with the same label is a no-op."""
    if not value or len(value) > KIND_MAX_LENGTH:
        raise EventTypeError(f"event type {value!r} must be 1-{KIND_MAX_LENGTH} characters")
    known = _TYPES.get(value)
    if known is not None and str(known) != str(label):
        raise EventTypeError(f"event type {value!r} is already registered")
    _TYPES[value] = label
    return value


def is_event_type(value: str) -> bool:
    return value in _TYPES


def event_type_label(value: str) -> str:
    """The type in words; an unknown (older or newer) code as it is."""
    label = _TYPES.get(value)
    return str(label) if label is not None else value


def event_type_choices() -> list[tuple[str, object]]:
    return list(_TYPES.items())
