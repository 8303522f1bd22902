"""Answer feedback in the admin. The list (one view event per request,
rows and filters) shows ratings and tags; the detail (a view event with the
conversation's owner) shows the comment and the attached conversation,
masked as the model saw it. Viewing only one's own writes nothing
(audit.admin_views). Read-only: feedback is the person's, not the admin's."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.admin_filters import PickerFilter, PickerFiltersMixin
from audit.admin_views import AuditedViewsMixin
from audit.models import ResourceKind
from audit.registry import register_resource_model
from feedback.models import TAGS, AnswerFeedback
from feedback.services import attached_conversation

register_resource_model(ResourceKind.ANSWER_FEEDBACK, AnswerFeedback)


class UserFilter(PickerFilter):
    title = gettext_lazy("user")
    parameter_name = "user_id"
    resource_kind = ResourceKind.USER
    field = "user_id"


@admin.register(AnswerFeedback)
class AnswerFeedbackAdmin(AuditedViewsMixin, PickerFiltersMixin, admin.ModelAdmin):
    audit_resource_kind = ResourceKind.ANSWER_FEEDBACK
    audit_owner_field = "user_id"
    audit_owner_name_field = "user__username"
    list_display = ("created_at", "user", "rating", "tag_labels", "has_comment", "attach_conversation")
    list_filter = (UserFilter, "rating", "attach_conversation")
    fields = (
        "created_at",
        "updated_at",
        "user",
        "rating",
        "tag_labels",
        "comment",
        "conversation_ref",
        "turn_ref",
        "conversation_shown",
    )
    readonly_fields = fields
    list_select_related = ("user",)
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER

    class Media:
        css = {"all": ["feedback/feedback_admin.css"]}

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description=gettext_lazy("conversation"))
    def conversation_ref(self, obj: AnswerFeedback) -> str:
        return str(obj.conversation_id or "")

    @admin.display(description=gettext_lazy("tags"))
    def tag_labels(self, obj: AnswerFeedback) -> str:
        return ", ".join(str(TAGS.get(tag, tag)) for tag in obj.tags or [])

    @admin.display(description=gettext_lazy("comment"), boolean=True)
    def has_comment(self, obj: AnswerFeedback) -> bool:
        return bool(obj.comment)

    @admin.display(description=gettext_lazy("attached conversation"))
    def conversation_shown(self, obj: AnswerFeedback):
        if not obj.attach_conversation:
            return _("Not attached.")
        messages = attached_conversation(obj)
        if messages is None:
            return _("Its owner deleted the conversation; the attached copy went with it.")
        # Escaped by format_html: a message is somebody's or a model's text.
        return format_html(
            '<div class="feedback-conversation">{}</div>',
            format_html_join(
                "",
                '<div class="feedback-message feedback-{}"><strong>{}</strong><pre>{}</pre></div>',
                ((m["role"], m["role"], _message_text(m)) for m in messages),
            ),
        )


def _message_text(message: dict) -> str:
    import json

    text = message.get("content") or ""
    if message.get("tool_calls"):
        text = (text + "\n" if text else "") + json.dumps(message["tool_calls"], ensure_ascii=False, indent=1)
    return text
