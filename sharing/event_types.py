"""The audit event types of shared conversations (registered at startup)."""

from django.utils.translation import gettext_lazy as _

from audit.event_types import register_event_type

SHARE_LINK_CREATED = register_event_type("share_link_created", _("Share link created"))
SHARE_LINK_REVOKED = register_event_type("share_link_revoked", _("Share link revoked"))
# A viewer continued a shared conversation in a new conversation of their own.
SHARE_LINK_FORKED = register_event_type("share_link_forked", _("Shared conversation continued"))
