"""Admin screens of playbooks and their runs.

Playbooks are edited only by their owners (the playbook page and its API):
here an admin reads them, deletes one (through its service) and revokes a
pre-approval. Runs are records: read-only, and opening other people's runs
is itself on the record (a view event per list request with the rows
returned and the filters; one per detail with the run's person; none for
one's own runs: audit.admin_views.AuditedViewsMixin).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from audit.admin_views import AuditedViewsMixin
from audit.governed import GovernedAdminMixin, register_governed
from audit.models import ResourceKind
from audit.registry import register_resource_model
from playbooks.approvals import pre_approval_revoke
from playbooks.models import NodeRun, Playbook, PlaybookRun, PlaybookSchedule, PreApproval
from playbooks.schedules import next_run
from playbooks.services import PlaybookError, playbook_delete


def _not_saved_here(*, instance, actor, related=None) -> None:
    # Only the owner edits a playbook (the playbook page); the admin reads.
    raise PermissionError("playbooks are edited by their owners, not in the admin")


def _delete(*, instance, actor) -> None:
    playbook_delete(playbook=instance, actor=getattr(actor, "user", actor))


def _hide_beat_admin() -> None:
    """Schedules are set on playbooks (their owner, through the service that
    records it); beat's own tables are not a second way to change them."""
    from django_celery_beat import models as beat

    for model in (
        beat.PeriodicTask,
        beat.ClockedSchedule,
        beat.CrontabSchedule,
        beat.SolarSchedule,
        beat.IntervalSchedule,
    ):
        if admin.site.is_registered(model):
            admin.site.unregister(model)


_hide_beat_admin()
register_governed(Playbook, save=_not_saved_here, delete=_delete)
register_resource_model(ResourceKind.PLAYBOOK, Playbook)
register_resource_model(ResourceKind.PLAYBOOK_RUN, PlaybookRun)


class _ReadOnly:
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class PreApprovalInline(_ReadOnly, admin.TabularInline):
    model = PreApproval
    fields = ("connector_tool", "granted_by", "granted_at", "expires_at", "revoked_at", "revoked_by")
    readonly_fields = fields
    extra = 0
    can_delete = False


class ScheduleInline(_ReadOnly, admin.TabularInline):
    model = PlaybookSchedule
    fields = ("kind", "cron", "every_minutes", "timezone", "enabled", "next_run_shown")
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description=_("next run"))
    def next_run_shown(self, obj: PlaybookSchedule) -> str:
        upcoming = next_run(obj) if obj.pk else None
        return upcoming.isoformat(timespec="minutes") if upcoming else "-"


@admin.register(Playbook)
class PlaybookAdmin(GovernedAdminMixin, _ReadOnly, admin.ModelAdmin):
    list_display = ("name", "owner", "tier", "model", "updated_at")
    list_filter = ("tier",)
    search_fields = ("name",)
    fields = ("name", "owner", "tier", "model", "description", "parameters", "nodes", "allow_overlap", "preview")
    readonly_fields = fields
    inlines = [PreApprovalInline, ScheduleInline]

    def get_urls(self):
        from playbooks.admin_preview import playbook_turn_preview

        view = self.admin_site.admin_view(lambda request, object_id: playbook_turn_preview(self, request, object_id))
        return [
            path("<path:object_id>/turn-preview/", view, name="playbooks_playbook_turn_preview"),
            *super().get_urls(),
        ]

    @admin.display(description=_("Turn preview"))
    def preview(self, obj: Playbook) -> str:
        url = reverse("admin:playbooks_playbook_turn_preview", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("What a run of it would see (recorded)"))


@admin.register(PreApproval)
class PreApprovalAdmin(_ReadOnly, admin.ModelAdmin):
    list_display = ("playbook", "connector_tool", "granted_by", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    fields = ("playbook", "connector_tool", "definition_hash", "granted_by", "granted_at", "expires_at")
    readonly_fields = fields
    actions = ["revoke"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description=_("Revoke the selected pre-approvals"), permissions=["view"])
    def revoke(self, request, queryset) -> None:
        for pre in queryset:
            try:
                pre_approval_revoke(pre_approval=pre, actor=request.user, request=request)
            except PlaybookError as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return
        self.message_user(request, _("Revoked."), messages.SUCCESS)


@admin.register(PlaybookRun)
class PlaybookRunAdmin(AuditedViewsMixin, _ReadOnly, admin.ModelAdmin):
    audit_resource_kind = ResourceKind.PLAYBOOK_RUN
    audit_owner_field = "actor_id"
    audit_owner_name_field = "actor__username"
    list_display = ("id", "playbook", "actor", "trigger", "status", "created_at", "finished_at")
    list_filter = ("status", "trigger", "playbook")
    list_select_related = ("playbook", "actor")
    fields = (
        "playbook",
        "actor",
        "trigger",
        "status",
        "error",
        "created_at",
        "finished_at",
        "parameters_shown",
        "nodes_shown",
    )
    readonly_fields = fields

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description=_("parameters"))
    def parameters_shown(self, obj: PlaybookRun) -> str:
        # Stored masked: personal data a person typed is a token of the run.
        items = (obj.parameters or {}).items()
        return format_html_join("", "<div><code>{}</code>: {}</div>", items) if items else "-"

    @admin.display(description=_("steps"))
    def nodes_shown(self, obj: PlaybookRun) -> str:
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><pre>{}</pre></td><td><pre>{}</pre></td>"
            "<td>{}</td></tr>",
            (
                (n.index + 1, n.key, n.kind, n.status, n.rendered_input, n.output[:8000], n.error)
                for n in NodeRun.objects.filter(run=obj)
            ),
        )
        return format_html(
            '<table class="playbook-nodes"><tr><th>#</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th>'
            "<th>{}</th><th>{}</th></tr>{}</table>",
            _("key"),
            _("kind"),
            _("status"),
            _("input"),
            _("output"),
            _("reason"),
            rows,
        )
