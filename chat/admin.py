"""Conversations in the admin: metadata only (owner, times, tier, model,
counts). The admin never shows a title or message content, and never
deletes a conversation (its owner deletes it in the chat; the purge job does
the rest): auditing must not become a way to read, or quietly remove, others'
chats.

Also the turn preview: what a turn of a chosen user on a chosen tier would be
given now (resources, tool schemas, system prompt), an admin view event.
"""

from __future__ import annotations

import json
import logging

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.admin_filters import PickerFilter, PickerFiltersMixin, picker_url
from audit.admin_views import AuditedViewsMixin
from audit.events import audit_event_write
from audit.models import EventKind, ResourceKind
from audit.registry import register_resource_model
from audit.services import AuditWriteError
from chat.approvals import ApprovalError, always_allow_revoke
from chat.models import AlwaysAllow, Conversation, Message, Turn
from chat.prompt import turn_inputs
from governance.models import DbConnection, DbGrant, DocumentCollection, Tier
from governance.visibility import Sight, decide
from owlai.times import local_iso

logger = logging.getLogger(__name__)

register_resource_model(ResourceKind.CONVERSATION, Conversation)


class OwnerFilter(PickerFilter):
    title = gettext_lazy("owner")
    parameter_name = "owner_id"
    resource_kind = ResourceKind.USER
    field = "owner_id"


class DeletedFilter(admin.SimpleListFilter):
    title = gettext_lazy("deleted by its owner")
    parameter_name = "deleted"

    def lookups(self, request, model_admin):
        return [("yes", gettext_lazy("Yes")), ("no", gettext_lazy("No"))]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(deleted_at__isnull=self.value() == "no")
        return queryset


def _count_of(model):
    rows = model.objects.filter(conversation=OuterRef("pk")).order_by().values("conversation")
    return Coalesce(Subquery(rows.annotate(n=Count("pk")).values("n"), output_field=IntegerField()), 0)


@admin.register(Conversation)
class ConversationAdmin(AuditedViewsMixin, PickerFiltersMixin, admin.ModelAdmin):
    audit_resource_kind = ResourceKind.CONVERSATION
    audit_owner_field = "owner_id"
    audit_owner_name_field = "owner__username"
    list_display = (
        "conversation",
        "owner",
        "tier",
        "model",
        "created",
        "updated",
        "turn_count",
        "message_count",
        "deleted",
    )
    list_filter = (OwnerFilter, "tier", DeletedFilter)
    search_fields = ("owner__username",)
    search_help_text = gettext_lazy("Searches the owner's user name.")
    fields = ("conversation", "owner", "tier", "model", "created", "updated", "turn_count", "message_count", "deleted")
    readonly_fields = fields
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_select_related = ("owner", "model")

    class Media:
        css = {"all": ["audit/audit_admin.css"]}

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        # No hard delete from the admin, of anyone's conversation: the owner
        # deletes in the chat (on the record there), the retention job purges.
        return False

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(turns_n=_count_of(Turn), messages_n=_count_of(Message))
            .defer("title")  # taken from the first message: content, never read here
        )

    def get_urls(self):
        preview = path(
            "turn-preview/", self.admin_site.admin_view(self.turn_preview_view), name="chat_conversation_turn_preview"
        )
        return [preview, *super().get_urls()]

    @admin.display(description=gettext_lazy("conversation"), ordering="pk")
    def conversation(self, obj: Conversation) -> str:
        return str(obj.pk)

    @admin.display(description=gettext_lazy("created"), ordering="created_at")
    def created(self, obj: Conversation) -> str:
        return local_iso(obj.created_at)

    @admin.display(description=gettext_lazy("last activity"), ordering="updated_at")
    def updated(self, obj: Conversation) -> str:
        return local_iso(obj.updated_at)

    @admin.display(description=gettext_lazy("deleted by its owner"), ordering="deleted_at")
    def deleted(self, obj: Conversation) -> str:
        return local_iso(obj.deleted_at) or "-"

    @admin.display(description=gettext_lazy("turns"), ordering="turns_n")
    def turn_count(self, obj: Conversation) -> int:
        return obj.turns_n if hasattr(obj, "turns_n") else obj.turns.count()

    @admin.display(description=gettext_lazy("messages"), ordering="messages_n")
    def message_count(self, obj: Conversation) -> int:
        return obj.messages_n if hasattr(obj, "messages_n") else obj.messages.count()

    def changelist_view(self, request, extra_context=None):
        preview = reverse("admin:chat_conversation_turn_preview")
        extra_context = {**(extra_context or {}), "owlai_turn_preview_url": preview}
        return super().changelist_view(request, extra_context)

    # --- turn preview ---------------------------------------------------------------

    def turn_preview_view(self, request):
        """What a turn would be given now, for a chosen user and tier. It
        shows the user's permissions, so it needs the right to view roles and
        users, and each preview is an admin view event (fail closed)."""
        if not (
            self.has_view_permission(request)
            and request.user.has_perm("governance.view_role")
            and request.user.has_perm("auth.view_user")
        ):
            raise Http404
        form = TurnPreviewForm(request.GET or None)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Turn preview"),
            "opts": self.model._meta,
            "form": form,
            "media": self.media,
            "user_picker_url": picker_url(self, ResourceKind.USER),
        }
        if form.is_valid():
            user, tier = form.cleaned_data["user"], form.cleaned_data["tier"]
            inputs = turn_inputs(user_id=user.pk, tier=tier)
            try:
                audit_event_write(
                    kind=EventKind.ADMIN_VIEW,
                    request=request,
                    resource_kind=ResourceKind.TURN_PREVIEW,
                    resource_id=user.pk,
                    owner_id=user.pk,
                    owner_username=user.get_username(),
                    row_count=len(inputs.resources.connections) + len(inputs.resources.collections),
                    details={"tier": tier},
                )
            except AuditWriteError:
                logger.exception("turn preview view event could not be written")
                return HttpResponse(
                    _("This view could not be recorded in the audit log, so it is not shown."), status=503
                )
            context.update(
                preview_user=user,
                tier_label=dict(Tier.choices).get(tier, tier),
                inputs=inputs,
                connections=[(c, _grant_scope(user.pk, c.pk)) for c in inputs.resources.connections],
                hidden=_hidden_names(tier),
                tools_json=json.dumps(inputs.tools, ensure_ascii=False, indent=2),
            )
        return TemplateResponse(request, "admin/chat/turn_preview.html", context)


class TurnPreviewForm(forms.Form):
    user = forms.ModelChoiceField(label=gettext_lazy("user"), queryset=get_user_model().objects.all())
    tier = forms.ChoiceField(label=gettext_lazy("tier"), choices=Tier.choices)


def _grant_scope(user_id: int, connection_id: int) -> str:
    """The user's grants on a connection in words: the whole database, or the tables."""
    grants = DbGrant.objects.filter(role__users__id=user_id, connection_id=connection_id).distinct()
    if any(g.whole_database for g in grants):
        return _("whole database")
    tables = sorted({t for g in grants for t in (g.tables or []) if isinstance(t, str)})
    return ", ".join(tables) or "-"


def _hidden_names(tier: str) -> list[str]:
    """Resources the turn is not even told about (hidden from this tier):
    for the admin's eyes only, which is why the preview lists them apart."""
    names = []
    for model in (DbConnection, DocumentCollection):
        for name, exposure in model.objects.order_by("name").values_list("name", "exposure"):
            if decide(tier=tier, exposure=exposure, granted=True) is Sight.HIDDEN:
                names.append(name)
    return names


@admin.register(AlwaysAllow)
class AlwaysAllowAdmin(AuditedViewsMixin, admin.ModelAdmin):
    """Users' standing "always allow" of connector tools. Read-only; the one
    change an admin makes is revoking (chat.approvals.always_allow_revoke,
    which records it)."""

    audit_resource_kind = ResourceKind.ALWAYS_ALLOW
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
