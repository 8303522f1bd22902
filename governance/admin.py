"""Admin for providers (read-only), models, defaults, connections and roles.

Writes go through governance.services so the rules hold however a change is
made, and so every governed change is on the record. Role grants live in
governance.admin_grants, classifications (and the coverage page) in
governance.admin_classifications.
"""

from __future__ import annotations

import os

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from audit.actors import actor_from_request
from audit.confirm import ImpactConfirmAdminMixin
from audit.governed import GovernedAdminMixin, register_governed
from audit.models import ResourceKind
from audit.registry import register_resource_model
from governance import documents  # noqa: F401 (registers the governed document models)
from governance.admin_classifications import ColumnClassificationAdmin
from governance.admin_grants import DbGrantInline, posted_grants
from governance.connectors import services as connector_services
from governance.exposure import (
    CLOSE_REFUSED,
    embedding_exposure_warning,
    exposure_change_allowed,
    record_exposure_opened,
    resource_open_to_all_models,
)
from governance.impact import model_disable_impact, model_enable_impact, resource_open_impact, role_grant_impact
from governance.models import (
    ColumnClassification,
    Connector,
    ConnectorTool,
    ConnectorToolPolicy,
    ConnectorToolState,
    DbConnection,
    Document,
    DocumentCollection,
    Exposure,
    FeatureDefault,
    LlmModel,
    Provider,
    Role,
)
from governance.schema_analysis import schema_analysis_start
from governance.schema_analysis_status import dsn_source_label, schema_analysis_status
from governance.services import (
    GovernanceError,
    db_connection_account_check,
    db_connection_dsn,
    db_connection_set_stored_dsn,
    feature_default_set,
    model_set_enabled,
    role_grants_snapshot,
)
from governance.sql.execute import QueryError

# The audit screens pick these by id and link to their pages (audit.registry).
for _kind, _model in (
    (ResourceKind.DB_CONNECTION, DbConnection),
    (ResourceKind.DOCUMENT_COLLECTION, DocumentCollection),
    (ResourceKind.ROLE, Role),
    (ResourceKind.COLUMN_CLASSIFICATION, ColumnClassification),
    (ResourceKind.LLM_MODEL, LlmModel),
    (ResourceKind.CONNECTOR, Connector),
    (ResourceKind.CONNECTOR_TOOL, ConnectorTool),
    (ResourceKind.DOCUMENT, Document),
):
    register_resource_model(_kind, _model)

admin.site.register(ColumnClassification, ColumnClassificationAdmin)


class ReadOnlyModelsInline(admin.TabularInline):
    model = LlmModel
    fields = ("name", "label", "enabled", "in_config")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    """Providers come from the install config only: tier, URL and key source
    cannot be changed by a click here."""

    list_display = ("name", "kind", "tier", "base_url", "api_key_env", "in_config", "synced_at")
    list_filter = ("tier", "kind", "in_config")
    inlines = [ReadOnlyModelsInline]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


def _model_save(*, instance: LlmModel, actor, related=None) -> None:
    model_set_enabled(model=instance, enabled=instance.enabled, actor=actor)


def _feature_default_save(*, instance: FeatureDefault, actor, related=None) -> None:
    feature_default_set(feature=instance.feature, model=instance.model, actor=actor)


def _not_deleted(*, instance, actor) -> None:
    # Models and feature defaults come from the install config: never deleted here.
    raise PermissionError(f"{instance._meta.label} is not deleted in the admin")


register_governed(LlmModel, save=_model_save, delete=_not_deleted)
register_governed(FeatureDefault, save=_feature_default_save, delete=_not_deleted)


@admin.register(LlmModel)
class LlmModelAdmin(ImpactConfirmAdminMixin, GovernedAdminMixin, admin.ModelAdmin):
    list_display = ("name", "label", "provider", "tier_display", "enabled", "in_config")
    list_filter = ("enabled", "provider__tier", "provider")
    fields = ("provider", "name", "label", "tier_display", "in_config", "enabled")
    readonly_fields = ("provider", "name", "label", "tier_display", "in_config")
    actions = ["enable_models", "disable_models"]

    @admin.display(description=_("tier"))
    def tier_display(self, obj: LlmModel) -> str:
        return obj.provider.get_tier_display()

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def change_impacts(self, request, form, formsets, change):
        # Enabling widens what reaches a model; disabling stops runs and
        # clears defaults: both are shown before they apply.
        if not change:
            return []
        impact = (model_enable_impact if form.cleaned_data.get("enabled") else model_disable_impact)(form.instance)
        return [impact] if impact is not None else []

    def _set_enabled(self, request, queryset, *, enabled: bool):
        models = list(queryset.select_related("provider"))
        impact_of = model_enable_impact if enabled else model_disable_impact
        impacts = [impact for impact in map(impact_of, models) if impact is not None]

        def apply() -> None:
            actor = actor_from_request(request)
            for model in models:
                model_set_enabled(model=model, enabled=enabled, actor=actor)

        return self.confirm_action(request, queryset, impacts, apply)

    @admin.action(description=_("Enable selected models"))
    def enable_models(self, request, queryset):
        return self._set_enabled(request, queryset, enabled=True)

    @admin.action(description=_("Disable selected models"))
    def disable_models(self, request, queryset):
        return self._set_enabled(request, queryset, enabled=False)


@admin.register(FeatureDefault)
class FeatureDefaultAdmin(GovernedAdminMixin, admin.ModelAdmin):
    list_display = ("feature", "model")
    fields = ("feature", "model")
    readonly_fields = ("feature",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "model":
            kwargs["queryset"] = LlmModel.objects.select_related("provider").filter(
                enabled=True, in_config=True, provider__in_config=True
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_related(self, request, form, formsets, change) -> None:
        try:
            super().save_related(request, form, formsets, change)
        except GovernanceError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)


class DbConnectionForm(forms.ModelForm):
    stored_dsn = forms.CharField(
        label=_("Replace stored DSN"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=_(
            "Write-only: the current value is never shown. Leave blank to keep it. "
            "Prefer an environment variable for production."
        ),
    )

    class Meta:
        model = DbConnection
        fields = (
            "name",
            "business_summary",
            "engine",
            "exposure",
            "dsn_env",
            "schemas",
            "row_cap",
            "statement_timeout_ms",
        )

    def clean(self):
        cleaned = super().clean()
        _refuse_closing(self)
        has_stored = bool(self.instance.pk and self.instance.dsn_encrypted)
        if not cleaned.get("dsn_env") and not cleaned.get("stored_dsn") and not has_stored:
            raise forms.ValidationError(_("Give either a DSN environment variable or a stored DSN."))
        self._check_account(cleaned)
        return cleaned

    def _check_account(self, cleaned: dict) -> None:
        """A DSN whose account may do more than read is refused here; one that
        cannot be reached now is saved (the executor checks again before every
        use and refuses then)."""
        dsn = cleaned.get("stored_dsn") or (os.environ.get(cleaned["dsn_env"]) if cleaned.get("dsn_env") else "")
        engine = cleaned.get("engine")
        if not dsn or not engine:
            return
        try:
            db_connection_account_check(engine=engine, dsn=dsn)
        except GovernanceError as refused:
            raise forms.ValidationError(str(refused)) from refused
        except QueryError:
            pass


def _refuse_closing(form: forms.ModelForm) -> None:
    """Form-level guard of the one-way rule (the service and a DB trigger hold it too)."""
    if not form.instance.pk or "exposure" not in form.cleaned_data:
        return
    stored = type(form.instance).objects.filter(pk=form.instance.pk).values_list("exposure", flat=True).first()
    if stored and not exposure_change_allowed(old=stored, new=form.cleaned_data["exposure"]):
        form.add_error("exposure", CLOSE_REFUSED)


class ExposureAdminMixin(ImpactConfirmAdminMixin):
    """Exposure in the admin: opening goes through the service (recorded),
    after a page showing who and which models would start seeing the
    resource (audit.confirm); once open the field is read-only and says why."""

    def change_impacts(self, request, form, formsets, change):
        impacts = list(super().change_impacts(request, form, formsets, change))
        if change and form.cleaned_data.get("exposure") == Exposure.ALL_MODELS:
            impact = resource_open_impact(form.instance)
            if impact is not None:
                impacts.append(impact)
        return impacts

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.exposure == Exposure.ALL_MODELS:
            fields.append("exposure")
        return fields

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if obj is not None and obj.exposure == Exposure.ALL_MODELS:
            form.base_fields.pop("exposure", None)
        return form

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.exposure == Exposure.ALL_MODELS:
            self.message_user(request, CLOSE_REFUSED, level=messages.INFO)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def governed_before_save(self, request, form, change) -> None:
        # The form may not change exposure: opening is the service's (below).
        obj = form.instance
        if change:
            stored = type(obj).objects.filter(pk=obj.pk).values_list("exposure", flat=True).first()
            obj.exposure = stored or obj.exposure
        super().governed_before_save(request, form, change)

    def governed_after_save(self, request, form, change) -> None:
        super().governed_after_save(request, form, change)
        obj = form.instance
        wanted = form.cleaned_data.get("exposure", obj.exposure)
        if wanted == Exposure.ALL_MODELS and obj.exposure != Exposure.ALL_MODELS:
            resource_open_to_all_models(resource=obj, request=request)
            obj.exposure = Exposure.ALL_MODELS
        elif not change and obj.exposure == Exposure.ALL_MODELS:
            record_exposure_opened(resource=obj, before=None, request=request)
        if not change and obj.exposure == Exposure.INTERNAL_ONLY:
            warning = embedding_exposure_warning()
            if warning:
                self.message_user(request, warning, level=messages.WARNING)


@admin.register(DbConnection)
class DbConnectionAdmin(ExposureAdminMixin, GovernedAdminMixin, admin.ModelAdmin):
    form = DbConnectionForm
    impact_dropped_fields = ("stored_dsn",)  # never echoed into the impact page
    actions = ["analyse_schema"]

    @admin.action(description=_("Analyse schema (classify personal data columns)"))
    def analyse_schema(self, request, queryset) -> None:
        started = 0
        for connection in queryset:
            # Checked here too, so the admin reads the refusal now rather than
            # in a worker's log (the analysis itself refuses as well).
            try:
                db_connection_account_check(engine=connection.engine, dsn=db_connection_dsn(connection=connection))
            except GovernanceError as refused:
                self.message_user(request, f"{connection.name}: {refused}", level=messages.ERROR)
                continue
            except QueryError as error:
                self.message_user(
                    request,
                    _("%(name)s: the database could not be reached (%(error)s).")
                    % {"name": connection.name, "error": error},
                    level=messages.ERROR,
                )
                continue
            schema_analysis_start(connection=connection, request=request)
            started += 1
        if started:
            self.message_user(
                request,
                _("Schema analysis started. The list's schema analysis column says when it has finished."),
                level=messages.INFO,
            )

    @admin.display(description=_("schema analysis"))
    def analysis_status(self, obj: DbConnection) -> str:
        return schema_analysis_status(connection_id=obj.pk)

    list_display = (
        "name",
        "engine",
        "exposure",
        "dsn_from",
        "row_cap",
        "statement_timeout_ms",
        "coverage",
        "analysis_status",
    )
    list_filter = ("engine", "exposure")
    search_fields = ("name", "business_summary")
    readonly_fields = ("dsn_from", "analysis_status", "database_code_shown")

    @admin.display(description=_("database's own functions, operators and casts"))
    def database_code_shown(self, obj: DbConnection):
        """What schema analysis found of the customer database's own code: the
        executor never calls it (statements are bound to the catalog), but an
        admin granting this connection should know it is there, SECURITY
        DEFINER ones above all."""
        entries = obj.database_code
        if entries is None:
            return _("not analysed yet (run Analyse schema)")
        if not entries:
            return _("none in the connection's schemas")
        definers = sum(1 for entry in entries if entry.get("security_definer"))
        head = _("%(count)s found, %(definers)s of them SECURITY DEFINER; never called by the agent") % {
            "count": len(entries),
            "definers": definers,
        }
        rows = format_html_join(
            "",
            "<li>{} <code>{}</code>{}{}</li>",
            (
                (
                    entry.get("kind", ""),
                    entry.get("name", ""),
                    " SECURITY DEFINER" if entry.get("security_definer") else "",
                    f" ({entry['extension']})" if entry.get("extension") else "",
                )
                for entry in entries
            ),
        )
        return format_html("{}<ul>{}</ul>", head, rows)

    @admin.display(description=_("DSN source"))
    def dsn_from(self, obj: DbConnection) -> str:
        return dsn_source_label(obj.dsn_source)

    @admin.display(description=_("classification coverage"))
    def coverage(self, obj: DbConnection) -> str:
        url = reverse("admin:governance_columnclassification_coverage", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("Coverage"))

    def governed_after_save(self, request, form, change) -> None:
        # Inside governance.services.connection_save: a replaced DSN is in
        # the same record as the other settings (that it changed, never what).
        super().governed_after_save(request, form, change)
        if form.cleaned_data.get("stored_dsn"):
            db_connection_set_stored_dsn(connection=form.instance, dsn=form.cleaned_data["stored_dsn"])


class DocumentCollectionForm(forms.ModelForm):
    class Meta:
        model = DocumentCollection
        fields = ("name", "business_summary", "exposure")

    def clean(self):
        cleaned = super().clean()
        _refuse_closing(self)
        return cleaned


class DocumentInline(admin.StackedInline):
    model = Document
    extra = 0
    fields = ("title", "body")


@admin.register(DocumentCollection)
class DocumentCollectionAdmin(ExposureAdminMixin, GovernedAdminMixin, admin.ModelAdmin):
    form = DocumentCollectionForm
    list_display = ("name", "exposure", "created_at")
    list_filter = ("exposure",)
    search_fields = ("name", "business_summary")
    inlines = [DocumentInline]


@admin.register(Document)
class DocumentAdmin(GovernedAdminMixin, admin.ModelAdmin):
    list_display = ("title", "collection", "created_at")
    list_filter = ("collection",)
    search_fields = ("title",)


class ConnectorForm(forms.ModelForm):
    class Meta:
        model = Connector
        fields = (
            "name",
            "business_summary",
            "exposure",
            "transport",
            "url",
            "command",
            "secret_headers",
            "timeout_seconds",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The admin picks a command the install config allows; it never types one.
        names = [spec.name for spec in settings.OWLAI_INSTALL.connector_commands]
        if "command" in self.fields:
            self.fields["command"].widget = forms.Select(choices=[("", "—")] + [(n, n) for n in names])

    def clean(self):
        cleaned = super().clean()
        _refuse_closing(self)
        return cleaned


class ConnectorToolInline(admin.TabularInline):
    model = ConnectorTool
    fields = ("name", "state", "policy", "definition_hash")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Connector)
class ConnectorAdmin(ExposureAdminMixin, GovernedAdminMixin, admin.ModelAdmin):
    """Connectors (MCP servers). Tools come from the server (*Sync tools*, and
    a scheduled job); their policy and definition review are per tool."""

    form = ConnectorForm
    list_display = ("name", "transport", "exposure", "timeout_seconds", "last_synced_at", "last_sync_error")
    list_filter = ("transport", "exposure")
    search_fields = ("name", "business_summary")
    readonly_fields = ("last_synced_at", "last_sync_error")
    inlines = [ConnectorToolInline]
    actions = ["sync_tools"]

    @admin.action(description=_("Sync tools (fetch the tool list from the server)"))
    def sync_tools(self, request, queryset) -> None:
        from governance.connectors.client import ConnectorError

        for connector in queryset:
            try:
                result = connector_services.connector_tools_sync(connector=connector, actor=actor_from_request(request))
            except ConnectorError as error:
                self.message_user(request, f"{connector.name}: {error}", level=messages.ERROR)
                continue
            self.message_user(
                request,
                _("%(name)s: %(added)d added, %(removed)d removed, %(changed)d changed (awaiting review).")
                % {
                    "name": connector.name,
                    "added": len(result.added),
                    "removed": len(result.removed),
                    "changed": len(result.changed),
                },
                level=messages.WARNING if result.changed else messages.INFO,
            )


class ConnectorToolForm(forms.ModelForm):
    class Meta:
        model = ConnectorTool
        fields = ("policy",)


def _connector_tool_save(*, instance: ConnectorTool, actor, related=None) -> None:
    connector_services.connector_tool_set_policy(tool=instance, policy=instance.policy, actor=actor)


register_governed(ConnectorTool, save=_connector_tool_save, delete=_not_deleted)


@admin.register(ConnectorTool)
class ConnectorToolAdmin(GovernedAdminMixin, admin.ModelAdmin):
    """A tool's policy (allow / require approval / block) and the review of a
    changed definition. Everything else comes from the server."""

    form = ConnectorToolForm
    list_display = ("name", "connector", "state", "policy", "first_seen_at", "changed_at")
    list_filter = ("state", "policy", "connector")
    search_fields = ("name", "description")
    readonly_fields = (
        "connector",
        "name",
        "slug",
        "state",
        "description",
        "input_schema",
        "definition_hash",
        "pending_description",
        "pending_input_schema",
        "pending_hash",
        "first_seen_at",
        "changed_at",
    )
    actions = ["approve_definition", "set_allow", "set_require_approval", "set_block"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description=_("Approve the changed definition"))
    def approve_definition(self, request, queryset) -> None:
        actor = actor_from_request(request)
        for tool in queryset.filter(state=ConnectorToolState.CHANGED):
            try:
                connector_services.connector_tool_definition_approve(tool=tool, actor=actor)
            except GovernanceError as refused:
                self.message_user(request, str(refused), level=messages.ERROR)

    def _set_policy(self, request, queryset, policy: str) -> None:
        actor = actor_from_request(request)
        for tool in queryset:
            connector_services.connector_tool_set_policy(tool=tool, policy=policy, actor=actor)

    @admin.action(description=_("Policy: allow"))
    def set_allow(self, request, queryset) -> None:
        self._set_policy(request, queryset, ConnectorToolPolicy.ALLOW)

    @admin.action(description=_("Policy: require approval"))
    def set_require_approval(self, request, queryset) -> None:
        self._set_policy(request, queryset, ConnectorToolPolicy.REQUIRE_APPROVAL)

    @admin.action(description=_("Policy: block"))
    def set_block(self, request, queryset) -> None:
        self._set_policy(request, queryset, ConnectorToolPolicy.BLOCK)


@admin.register(Role)
class RoleAdmin(ImpactConfirmAdminMixin, GovernedAdminMixin, admin.ModelAdmin):
    """Grant changes are recorded as one permission-change event per save
    (governance.services.role_save): what it opened and what it closed. A
    save that gives anyone more (tables, collections, connectors, reveal,
    new members) first shows which members gain what (audit.confirm)."""

    def change_impacts(self, request, form, formsets, change):
        role_id = form.instance.pk if change else None
        impact = role_grant_impact(
            role_id=role_id,
            role_name=form.cleaned_data.get("name") or form.instance.name,
            before=role_grants_snapshot(role_id=role_id),
            after=posted_grants(form, formsets),
        )
        return [impact] if impact is not None else []

    list_display = ("name", "description")
    search_fields = ("name",)
    filter_horizontal = ("users", "document_collections", "connectors")
    fields = ("name", "description", "users", "document_collections", "connectors", "can_view_raw_pii")
    inlines = [DbGrantInline]
