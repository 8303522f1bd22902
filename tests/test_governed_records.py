"""What a change record may hold: values of plain fields, the names of keyed
secrets, and only the fact that a secret changed."""

from __future__ import annotations

import json

from audit.changes import Fields, change_record, has_change
from governance.connectors.services import shown_url

FIELDS = Fields(plain=("url", "timeout"), secret=("dsn",), keyed=("headers",))


def test_only_what_changed_is_recorded():
    before = {"url": "https://a/mcp", "timeout": 30, "dsn": "enc-1", "headers": {"Authorization": "ENV_A"}}
    after = {**before, "timeout": 10}
    assert change_record(before, after, FIELDS) == {"before": {"timeout": 30}, "after": {"timeout": 10}}
    assert not has_change(change_record(before, dict(before), FIELDS))


def test_a_secret_is_recorded_as_changed_never_by_value():
    before = {"url": "", "timeout": 1, "dsn": "postgres://u:hunter2@db/x", "headers": {"Authorization": "ENV_A"}}
    after = {**before, "dsn": "postgres://u:swordfish@db/x", "headers": {"Authorization": "ENV_B"}}
    record = change_record(before, after, FIELDS)
    assert record == {
        "before": {"dsn": "set"},
        "after": {"dsn": "set"},
        "secrets_changed": ["dsn", "headers"],
    }
    text = json.dumps(record)
    assert not any(secret in text for secret in ("hunter2", "swordfish", "ENV_A", "ENV_B"))


def test_keyed_secrets_are_recorded_by_name():
    before = {"headers": {"Authorization": "ENV_A"}}
    after = {"headers": {"Authorization": "ENV_A", "X-Key": "ENV_K"}}
    record = change_record(before, after, Fields(keyed=("headers",)))
    assert record == {"before": {"headers": ["Authorization"]}, "after": {"headers": ["Authorization", "X-Key"]}}


def test_a_creation_and_a_deletion_record_every_field():
    values = {"url": "https://a/mcp", "timeout": 30, "dsn": "", "headers": {}}
    created = change_record(None, values, FIELDS)
    assert created["before"] == {} and created["after"] == {
        "url": "https://a/mcp",
        "timeout": 30,
        "dsn": "unset",
        "headers": [],
    }
    deleted = change_record(values, None, FIELDS)
    assert deleted["after"] == {} and set(deleted["before"]) == {"url", "timeout", "dsn", "headers"}


def test_credentials_in_a_url_are_not_recorded():
    assert (
        shown_url("https://bob:pw@crm.internal:8443/mcp?token=abc&x=1")
        == "https://***@crm.internal:8443/mcp?token=***&x=***"
    )
    assert shown_url("https://crm.internal/mcp") == "https://crm.internal/mcp"
    assert shown_url("") == ""
