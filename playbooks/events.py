"""The audit event types of playbooks (registered when the app loads)."""

from django.utils.translation import gettext_lazy as _

from audit.event_types import register_event_type

PLAYBOOK_CREATED = register_event_type("playbook_created", _("Playbook created"))
PLAYBOOK_UPDATED = register_event_type("playbook_updated", _("Playbook changed"))
PLAYBOOK_SHARED = register_event_type("playbook_shared", _("Playbook sharing changed"))
PLAYBOOK_DELETED = register_event_type("playbook_deleted", _("Playbook deleted"))
RUN_STARTED = register_event_type("playbook_run_started", _("Playbook run started"))
RUN_STOPPED = register_event_type("playbook_run_stopped", _("Playbook run stopped"))
RUN_REFUSED = register_event_type("playbook_run_refused", _("Playbook run refused"))
PRE_APPROVAL_GRANTED = register_event_type("playbook_pre_approval_granted", _("Playbook pre-approval granted"))
PRE_APPROVAL_REVOKED = register_event_type("playbook_pre_approval_revoked", _("Playbook pre-approval revoked"))
PRE_APPROVAL_EXPIRED = register_event_type("playbook_pre_approval_expired", _("Playbook pre-approval expired"))
SCHEDULE_SET = register_event_type("playbook_schedule_set", _("Playbook schedule set"))
SCHEDULE_DELETED = register_event_type("playbook_schedule_deleted", _("Playbook schedule deleted"))
