"""Admin for providers (read-only), models, defaults, connections and roles.

Writes go through governance.services so the rules hold however a change is made.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.utils.translation import gettext_lazy as _

from governance.models import DbConnection, DbGrant, FeatureDefault, LlmModel, Provider, Role
from governance.services import GovernanceError, db_connection_set_stored_dsn, feature_default_set, model_set_enabled


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
    cannot be changed by a click here (seed 002)."""

    list_display = ("name", "kind", "tier", "base_url", "api_key_env", "in_config", "synced_at")
    list_filter = ("tier", "kind", "in_config")
    inlines = [ReadOnlyModelsInline]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(LlmModel)
class LlmModelAdmin(admin.ModelAdmin):
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

    def save_model(self, request, obj, form, change) -> None:
        model_set_enabled(model=obj, enabled=form.cleaned_data["enabled"])

    @admin.action(description=_("Enable selected models"))
    def enable_models(self, request, queryset) -> None:
        for model in queryset:
            model_set_enabled(model=model, enabled=True)

    @admin.action(description=_("Disable selected models"))
    def disable_models(self, request, queryset) -> None:
        for model in queryset:
            model_set_enabled(model=model, enabled=False)


@admin.register(FeatureDefault)
class FeatureDefaultAdmin(admin.ModelAdmin):
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

    def save_model(self, request, obj, form, change) -> None:
        try:
            feature_default_set(feature=obj.feature, model=form.cleaned_data["model"])
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
        fields = ("name", "business_summary", "engine", "dsn_env", "row_cap", "statement_timeout_ms")

    def clean(self):
        cleaned = super().clean()
        has_stored = bool(self.instance.pk and self.instance.dsn_encrypted)
        if not cleaned.get("dsn_env") and not cleaned.get("stored_dsn") and not has_stored:
            raise forms.ValidationError(_("Give either a DSN environment variable or a stored DSN."))
        return cleaned


class DbGrantInline(admin.TabularInline):
    model = DbGrant
    extra = 0
    fields = ("connection", "whole_database", "tables")


@admin.register(DbConnection)
class DbConnectionAdmin(admin.ModelAdmin):
    form = DbConnectionForm
    list_display = ("name", "engine", "dsn_source", "row_cap", "statement_timeout_ms")
    search_fields = ("name", "business_summary")
    readonly_fields = ("dsn_source",)

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if form.cleaned_data.get("stored_dsn"):
            db_connection_set_stored_dsn(connection=obj, dsn=form.cleaned_data["stored_dsn"])


@admin.register(Role)
class RoleAdmin(admin.ModelAdmin):
    list_display = ("name", "description")
    search_fields = ("name",)
    filter_horizontal = ("users",)
    inlines = [DbGrantInline]
