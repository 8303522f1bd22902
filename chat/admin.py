"""Conversations in the admin: metadata only. The admin never shows message
content (auditing must not become a way to read others' chats)."""

from django.contrib import admin, messages
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.admin_views import AuditedViewsMixin
from audit.services import AuditWriteError
from chat.approvals import ApprovalError, always_allow_revoke
from chat.models import AlwaysAllow, Conversation


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


@admin.register(AlwaysAllow)
class AlwaysAllowAdmin(AuditedViewsMixin, admin.ModelAdmin):
    """Users' standing "always allow" of connector tools. Read-only; the one
    change an admin makes is revoking (chat.approvals.always_allow_revoke,
    which records it)."""

    audit_resource_kind = "always_allow"
    audit_owner_field = "user_id"
    audit_owner_name_field = "user__username"
    list_display = ("user", "connector_tool", "created_at", "revoked_at", "revoked_by")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "connector_tool__connector")
    search_fields = ("user__username", "connector_tool__name", "connector_tool__connector__name")
    list_select_related = ("user", "connector_tool__connector", "revoked_by")
    fields = ("user", "connector_tool", "definition_hash", "created_at", "revoked_at", "revoked_by")
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description=gettext_lazy("Revoke the selected always-allowed tools"), permissions=["change"])
    def revoke(self, request, queryset) -> None:
        revoked = 0
        for grant in queryset.filter(revoked_at__isnull=True):
            try:
                always_allow_revoke(grant=grant, actor=request.user, request=request)
            except (ApprovalError, AuditWriteError) as error:
                self.message_user(request, str(error), messages.ERROR)
                return
            revoked += 1
        self.message_user(request, _("%(count)d revoked.") % {"count": revoked}, messages.SUCCESS)
