"""Audit event types are defined in code: the kind column has no database
choices, so a new type needs no migration; older kinds still read in words."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from audit import event_types
from audit.event_types import EventKind, EventTypeError, event_type_label, register_event_type
from audit.events import audit_event_write
from audit.models import AuditEvent
from audit.services import AuditWriteError

pytestmark = pytest.mark.django_db


@pytest.fixture
def scratch_types(monkeypatch):
    monkeypatch.setattr(event_types, "_TYPES", dict(event_types._TYPES))


def test_a_type_added_in_code_needs_no_migration(scratch_types):
    register_event_type("widget_added", "Widget added")
    event = audit_event_write(kind="widget_added", details={"widget": 1})
    assert AuditEvent.objects.get(pk=event.pk).kind_label == "Widget added"
    # The model and the migrations agree with the new type registered ...
    call_command("makemigrations", "audit", "--check", "--dry-run", verbosity=0)
    # ... because neither the model nor the migration state holds choices.
    assert not AuditEvent._meta.get_field("kind").choices
    state = MigrationLoader(connection).project_state(("audit", "0011_event_kind_without_choices"))
    assert not state.models["audit", "auditevent"].fields["kind"].choices


def test_an_unregistered_type_is_refused():
    with pytest.raises(AuditWriteError):
        audit_event_write(kind="widget_addd")
    assert not AuditEvent.objects.exists()


def test_a_type_that_could_not_be_stored_or_is_taken_is_refused(scratch_types):
    with pytest.raises(EventTypeError):
        register_event_type("x" * 31, "Too long")
    with pytest.raises(EventTypeError):
        register_event_type(EventKind.CONNECTOR_UPDATED, "Something else")
    assert register_event_type(EventKind.CONNECTOR_UPDATED, EventKind.CONNECTOR_UPDATED.label) == "connector_updated"


def test_every_type_fits_the_column_and_has_a_label():
    limit = AuditEvent._meta.get_field("kind").max_length
    for value, label in event_types.event_type_choices():
        assert 0 < len(value) <= limit and str(label), value


def test_rows_of_older_and_unknown_kinds_still_read(english):
    kept = AuditEvent.objects.create(kind="settings_change")
    unknown = AuditEvent.objects.create(kind="from_a_newer_release")
    assert (kept.kind_label, unknown.kind_label) == ("Settings change", "from_a_newer_release")
    assert event_type_label("user_privilege_changed") == "User privileges changed"


def test_labels_are_translated():
    from django.utils import translation

    with translation.override("ko"):
        assert event_type_label(EventKind.USER_PRIVILEGE_CHANGED) == "사용자 권한 변경"
        assert event_type_label(EventKind.DOCUMENT_CREATED) == "문서 업로드"
