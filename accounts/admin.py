"""API tokens in the admin: an admin creates one for a user (the key is shown
once, in the confirmation message) or revokes it. Tokens are never edited
or deleted: a revoked token stays listed with who revoked it and when."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin as DjangoGroupAdmin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from accounts.impact import api_token_revoke_impact
from accounts.models import ApiToken, TokenScope
from accounts.services import api_token_create, api_token_revoke, user_password_change
from audit.actors import actor_from_request
from audit.admin_views import AuditedViewsMixin
from audit.confirm import ImpactConfirmAdminMixin
from audit.governed import GovernedAdminMixin
from audit.models import ResourceKind
from audit.registry import register_resource_model


class ApiTokenAddForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        label=gettext_lazy("scopes"),
        choices=TokenScope.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = ApiToken
        fields = ["user", "name", "expires_at", "scopes"]

    def clean_expires_at(self):
        expires_at = self.cleaned_data.get("expires_at")
        if expires_at is not None and expires_at <= timezone.now():
            raise forms.ValidationError(_("The expiry must be in the future."))
        return expires_at


@admin.register(ApiToken)
class ApiTokenAdmin(ImpactConfirmAdminMixin, AuditedViewsMixin, admin.ModelAdmin):
    audit_resource_kind = ResourceKind.API_TOKEN
    audit_owner_field = "user_id"
    audit_owner_name_field = "user__username"
    list_display = ("name", "user", "prefix", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "created_at")
    search_fields = ("user__username", "name", "prefix")
    list_select_related = ("user",)
    readonly_fields = (
        "user",
        "name",
        "prefix",
        "scopes",
        "created_at",
        "created_by_username",
        "expires_at",
        "revoked_at",
        "revoked_by_username",
        "last_used_at",
    )
    actions = ["revoke_selected"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenAddForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request, obj=None):
        return list(self.readonly_fields) if obj is not None else ["user", "name", "expires_at", "scopes"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        if change:
            return  # nothing about a token is edited here
        try:
            token, key = api_token_create(
                user=obj.user,
                name=obj.name,
                expires_at=obj.expires_at,
                scopes=form.cleaned_data.get("scopes") or (),
                actor=request.user,
                request=request,
            )
        except ValueError as exc:
            raise PermissionDenied(str(exc))
        # The admin's confirmation and log entry describe the stored token.
        for field in ApiToken._meta.concrete_fields:
            setattr(obj, field.attname, getattr(token, field.attname))
        obj._state.adding = False
        messages.warning(request, _("Copy the new token now; it will not be shown again: %(key)s") % {"key": key})

    @admin.action(description=gettext_lazy("Revoke selected API tokens"), permissions=["change"])
    def revoke_selected(self, request, queryset):
        # Scripts using a token stop at once: the page says whose and how used first.
        tokens = list(queryset.select_related("user").filter(revoked_at__isnull=True))

        def apply() -> None:
            for token in tokens:
                api_token_revoke(token=token, actor=request.user, request=request)
            self.message_user(request, _("%(count)d API token(s) revoked.") % {"count": len(tokens)}, messages.SUCCESS)

        impacts = [impact for impact in map(api_token_revoke_impact, tokens) if impact is not None]
        return self.confirm_action(request, queryset, impacts, apply)


# Users and groups: who may do what here. Every change goes through
# accounts.services (GovernedAdminMixin), so who made whom staff, superuser
# or a group member is on the record; opening the user list (or another
# user's page) is an admin view event too.
User = get_user_model()
for _model in (User, Group):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)
register_resource_model(ResourceKind.USER, User)
register_resource_model(ResourceKind.GROUP, Group)


@admin.register(User)
class AuditedUserAdmin(GovernedAdminMixin, AuditedViewsMixin, DjangoUserAdmin):
    audit_resource_kind = ResourceKind.USER
    audit_owner_field = "pk"
    audit_owner_name_field = "username"

    def user_change_password(self, request, id, form_url=""):
        # Django's view saves the user itself: the service records around it.
        if request.method != "POST":
            return super().user_change_password(request, id, form_url)
        return user_password_change(
            user_id=unquote(id),
            actor=actor_from_request(request),
            apply=lambda: super(AuditedUserAdmin, self).user_change_password(request, id, form_url),
        )


@admin.register(Group)
class GovernedGroupAdmin(GovernedAdminMixin, DjangoGroupAdmin):
    pass
