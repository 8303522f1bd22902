"""The audit event types of answer feedback (registered at startup)."""

from django.utils.translation import gettext_lazy as _

from audit.event_types import register_event_type

# Given or changed; the event holds the rating, tags and whether the
# conversation is attached, never the comment (the person's words).
ANSWER_FEEDBACK_GIVEN = register_event_type("answer_feedback_given", _("Answer feedback given"))
