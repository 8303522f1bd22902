"""Share links in the admin: who shared which conversation, until when,
revoked or not. Never the title, the snapshot or the link's address (it
opens the snapshot). The list writes one view event per request (rows and
filters), a detail one with the link's owner (audit.admin_views)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.admin_filters import PickerFilter, PickerFiltersMixin
from audit.admin_views import AuditedViewsMixin
from audit.models import ResourceKind
from audit.registry import register_resource_model
from sharing.models import ShareLink
from sharing.services import share_link_revoke

register_resource_model(ResourceKind.SHARE_LINK, ShareLink)


class OwnerFilter(PickerFilter):
    title = gettext_lazy("owner")
    parameter_name = "owner_id"
    resource_kind = ResourceKind.USER
    field = "owner_id"


class StateFilter(admin.SimpleListFilter):
    title = gettext_lazy("state")
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("open", gettext_lazy("Open")), ("revoked", gettext_lazy("Revoked"))]

    def queryset(self, request, queryset):
        if self.value() == "open":
            return queryset.open()
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(ShareLink)
class ShareLinkAdmin(AuditedViewsMixin, PickerFiltersMixin, admin.ModelAdmin):
    audit_resource_kind = ResourceKind.SHARE_LINK
    audit_owner_field = "owner_id"
    audit_owner_name_field = "owner__username"
    list_display = ("id", "owner", "conversation_ref", "turn_ref", "created_at", "expires_at", "state")
    list_filter = (OwnerFilter, StateFilter)
    fields = ("id", "owner", "conversation_ref", "turn_ref", "created_at", "expires_at", "revoked_at", "state")
    readonly_fields = fields
    list_select_related = ("owner", "conversation")
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["revoke_selected"]

    @admin.display(description=gettext_lazy("conversation"))
    def conversation_ref(self, obj: ShareLink) -> str:
        return str(obj.conversation_id)

    @admin.display(description=gettext_lazy("up to turn"))
    def turn_ref(self, obj: ShareLink) -> int:
        return obj.up_to_turn_id

    @admin.display(description=gettext_lazy("state"))
    def state(self, obj: ShareLink) -> str:
        return obj.status_label()

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoked (on the record), never deleted from here

    def get_queryset(self, request):
        return super().get_queryset(request).defer("conversation__title")

    @admin.action(description=gettext_lazy("Revoke the selected links"))
    def revoke_selected(self, request, queryset):
        count = 0
        for link in queryset.filter(revoked_at__isnull=True):
            share_link_revoke(link=link, actor=request.user, request=request)
            count += 1
        self.message_user(request, _("%(count)d links revoked.") % {"count": count}, messages.SUCCESS)
