"""Read-only audit screens: no add, change or delete anywhere."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from audit.models import ToolCallAudit


class ReadOnlyAdmin(admin.ModelAdmin):
    # Counting millions of rows on every page load is what makes audit screens
    # slow; the paginator shows "more" instead.
    show_full_result_count = False

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ToolCallAudit)
class ToolCallAuditAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "actor_username", "tool", "resource_name", "outcome", "row_count", "short_sql")
    list_filter = ("outcome", "tool", "origin", "created_at")
    search_fields = ("sql_text", "actor_username", "resource_name")
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in ToolCallAudit._meta.fields]

    @admin.display(description=_("SQL"))
    def short_sql(self, obj: ToolCallAudit) -> str:
        return obj.sql_text[:120]
