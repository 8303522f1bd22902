"""Column classifications in the admin: review the analysis, decide in bulk,
and see per connection where the classification falls short (coverage).

Every decision goes through governance.schema_analysis services, which write
its classification_set event; a classification is never deleted here (deleting
one would unmask its column on the next query): it is set to "none" instead.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.db.models import OuterRef, Subquery, Sum
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.admin_filters import PickerFilter, PickerFiltersMixin
from audit.confirm import ImpactConfirmAdminMixin
from audit.events import audit_event_write
from audit.models import EventKind, ResourceKind
from audit.services import AuditWriteError
from governance.coverage import classification_coverage
from governance.impact import column_unmask_impacts
from governance.models import ColumnClassification, DbConnection, MaskStat, PiiKindChoice
from governance.schema_analysis import (
    column_classification_confirm,
    column_classification_set,
    column_classification_set_kind,
    connection_columns,
    reason_text,
)
from governance.services import GovernanceError
from governance.sql.execute import QueryError

logger = logging.getLogger(__name__)

NONE = "none"  # the kind filter's value for "not personal data" (stored as "")


def _kinds_text(kinds: dict[str, int]) -> str:
    labels = dict(PiiKindChoice.choices)
    return ", ".join(f"{labels.get(kind, kind)} {count}" for kind, count in sorted(kinds.items(), key=lambda i: -i[1]))


class ClassificationConnectionFilter(PickerFilter):
    title = gettext_lazy("DB connection")
    parameter_name = "connection_id"
    resource_kind = ResourceKind.DB_CONNECTION
    field = "connection_id"


class TableFilter(admin.SimpleListFilter):
    """The tables of the picked connection (of all, when none is picked)."""

    title = gettext_lazy("table")
    parameter_name = "table"

    def lookups(self, request, model_admin):
        rows = ColumnClassification.objects.all()
        connection_id = request.GET.get(ClassificationConnectionFilter.parameter_name, "")
        if connection_id.isdigit():
            rows = rows.filter(connection_id=int(connection_id))
        tables = rows.values_list("table_name", flat=True).distinct().order_by("table_name")
        return [(t, t) for t in tables[:500]]

    def queryset(self, request, queryset):
        return queryset.filter(table_name=self.value()) if self.value() else queryset


class KindFilter(admin.SimpleListFilter):
    title = gettext_lazy("personal data kind")
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [(NONE, gettext_lazy("Not personal data")), *PiiKindChoice.choices]

    def queryset(self, request, queryset):
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(pii_kind="" if value == NONE else value)


class ClassificationActionForm(ActionForm):
    pii_kind = forms.ChoiceField(
        label=gettext_lazy("kind"), required=False, choices=[("", "---------"), *PiiKindChoice.choices]
    )


class ClassificationForm(forms.ModelForm):
    class Meta:
        model = ColumnClassification
        fields = ("pii_kind",)


class ColumnClassificationAdmin(ImpactConfirmAdminMixin, PickerFiltersMixin, admin.ModelAdmin):
    """Review and correct the analysis. The masked count of the last 7 days
    shows over-masked columns; an edit applies to the next query. Setting a
    masked column to not personal data (its values then go out in clear)
    first shows what it changes (audit.confirm, governance.impact)."""

    form = ClassificationForm
    action_form = ClassificationActionForm
    actions = ["confirm_suggestions", "set_kind", "set_none"]
    list_display = (
        "connection",
        "table_name",
        "column_name",
        "kind_shown",
        "source",
        "state",
        "confidence",
        "masked_last_7_days",
    )
    list_filter = (ClassificationConnectionFilter, TableFilter, KindFilter, "source", "state")
    search_fields = ("table_name", "column_name")
    readonly_fields = (
        "connection",
        "table_name",
        "column_name",
        "data_type",
        "source",
        "state",
        "confidence",
        "sample_size",
        "reason_shown",
        "classified_at",
        "classified_by_username",
        "masked_last_7_days",
    )

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        # Withdrawing a classification is setting it to none, on the record.
        return False

    def get_urls(self):
        coverage = path(
            "coverage/<int:connection_id>/",
            self.admin_site.admin_view(self.coverage_view),
            name="governance_columnclassification_coverage",
        )
        return [coverage, *super().get_urls()]

    def get_queryset(self, request):
        since = timezone.localdate() - timedelta(days=7)
        masked = (
            MaskStat.objects.filter(
                connection_id_value=OuterRef("connection_id"),
                table_name=OuterRef("table_name"),
                column_name=OuterRef("column_name"),
                day__gte=since,
            )
            .values("connection_id_value")
            .annotate(total=Sum("count"))
            .values("total")
        )
        return super().get_queryset(request).select_related("connection").annotate(masked_7d=Subquery(masked))

    @admin.display(description=gettext_lazy("personal data kind"), ordering="pii_kind")
    def kind_shown(self, obj: ColumnClassification) -> str:
        return obj.get_pii_kind_display() if obj.pii_kind else _("Not personal data")

    @admin.display(description=gettext_lazy("reason"))
    def reason_shown(self, obj: ColumnClassification) -> str:
        return reason_text(obj.reason) or "-"

    @admin.display(description=gettext_lazy("masked (7 days)"), ordering="masked_7d")
    def masked_last_7_days(self, obj) -> int:
        return getattr(obj, "masked_7d", None) or 0

    def save_model(self, request, obj, form, change) -> None:
        # Deferred to apply_change, after the impact check (audit.confirm).
        return None

    def change_impacts(self, request, form, formsets, change):
        return column_unmask_impacts([form.instance], new_kind=form.cleaned_data["pii_kind"]) if change else []

    def apply_change(self, request, form, formsets, change) -> None:
        column_classification_set(classification=form.instance, pii_kind=form.cleaned_data["pii_kind"], request=request)

    # --- bulk decisions -----------------------------------------------------------

    def _decide(self, request, service, **kwargs) -> None:
        try:
            changed = service(request=request, **kwargs)
        except GovernanceError as refused:
            self.message_user(request, str(refused), level=messages.ERROR)
            return
        except AuditWriteError:
            logger.exception("classification change could not be recorded")
            self.message_user(
                request, _("The change could not be recorded in the audit log, so nothing changed."), messages.ERROR
            )
            return
        self.message_user(
            request, _("%(count)d column classifications changed; the next query uses them.") % {"count": changed}
        )

    @admin.action(description=gettext_lazy("Confirm the selected suggestions"))
    def confirm_suggestions(self, request, queryset) -> None:
        self._decide(request, column_classification_confirm, classifications=list(queryset))

    @admin.action(description=gettext_lazy("Set the selected columns to the kind chosen"))
    def set_kind(self, request, queryset) -> None:
        kind = request.POST.get("pii_kind", "")
        if not kind:
            self.message_user(request, _("Choose a kind next to the action first."), level=messages.ERROR)
            return
        self._decide(request, column_classification_set_kind, classifications=list(queryset), pii_kind=kind)

    @admin.action(description=gettext_lazy("Set the selected columns to not personal data"))
    def set_none(self, request, queryset):
        rows = list(queryset)
        return self.confirm_action(
            request,
            queryset,
            column_unmask_impacts(rows, new_kind=""),
            lambda: self._decide(request, column_classification_set_kind, classifications=rows, pii_kind=""),
        )

    # --- coverage -----------------------------------------------------------------

    def coverage_view(self, request, connection_id: int):
        """Where a connection's classification falls short; an admin view event."""
        if not self.has_view_permission(request):
            raise Http404
        connection = get_object_or_404(DbConnection, pk=connection_id)
        live, error = None, ""
        try:
            live = connection_columns(connection)
        except GovernanceError as refused:
            error = str(refused)
        except QueryError as failed:
            error = _("The database could not be reached (%(error)s).") % {"error": failed}
        except Exception:  # a coverage page without the live columns still shows the rest
            logger.exception("could not read the columns of connection %s", connection.pk)
            error = _("The database's column list could not be read.")
        coverage = classification_coverage(connection=connection, live_columns=live, error=error)
        try:
            audit_event_write(
                kind=EventKind.ADMIN_VIEW,
                request=request,
                resource_kind=ResourceKind.CLASSIFICATION_COVERAGE,
                resource_id=connection.pk,
                row_count=len(coverage.never_analysed) + len(coverage.unconfirmed) + len(coverage.masked_while_none),
                details={"connection": connection.name},
            )
        except AuditWriteError:
            logger.exception("coverage view event could not be written")
            return HttpResponse(_("This view could not be recorded in the audit log, so it is not shown."), status=503)
        changelist = reverse("admin:governance_columnclassification_changelist")
        by_connection = {ClassificationConnectionFilter.parameter_name: connection.pk}
        context = {
            **self.admin_site.each_context(request),
            "title": _("Classification coverage: %(connection)s") % {"connection": connection.name},
            "opts": self.model._meta,
            "connection": connection,
            "coverage": coverage,
            "suggestions_url": f"{changelist}?{urlencode({**by_connection, 'state__exact': 'suggested'})}",
            "connection_classifications_url": f"{changelist}?{urlencode(by_connection)}",
            "masked": [(m, _kinds_text(m.kinds)) for m in coverage.masked_while_none],
            "unconfirmed": [(c, reason_text(c.reason)) for c in coverage.unconfirmed],
        }
        return TemplateResponse(request, "admin/governance/coverage.html", context)
