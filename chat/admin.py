"""Conversations in the admin: metadata only. The admin never shows message
content (auditing must not become a way to read others' chats)."""

from django.contrib import admin

from audit.admin_views import AuditedViewsMixin
from chat.models import Conversation


@admin.register(Conversation)
class ConversationAdmin(AuditedViewsMixin, admin.ModelAdmin):
    audit_resource_kind = "conversation"
    audit_owner_field = "owner_id"
    audit_owner_name_field = "owner__username"
    list_display = ("id", "owner", "tier", "model", "created_at", "updated_at", "deleted_at")
    list_filter = ("tier", ("deleted_at", admin.EmptyFieldListFilter))
    search_fields = ("owner__username",)
    fields = ("id", "owner", "tier", "model", "created_at", "updated_at", "deleted_at")
    readonly_fields = fields
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
