"""Built-in groups: ready seats for the people the product is for.

The auditor (a compliance officer) reads the record and nothing else: the
audit lists and details, their filters and pickers, CSV export, and the
admin events (view events among them). No permission outside the audit app
and no add/change/delete anywhere, so nothing that changes governance.
Staff status (needed to sign in to the admin) is the user's own flag, not a
group's: an admin sets it with the membership.

The group is created by a migration (accounts/migrations) under its name in
the installation's language (LANGUAGE_CODE); `auditor_group()` finds it by
its name in any shipped language.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_noop

AUDITOR_GROUP_NAME = gettext_noop("Auditor")

# (app label, codename): exactly what the audit screens check.
AUDITOR_PERMISSIONS = (
    ("audit", "view_toolcallaudit"),
    ("audit", "view_sqlexecution"),
    ("audit", "view_auditevent"),
)


def group_name_in(language: str) -> str:
    with translation.override(language):
        return translation.gettext(AUDITOR_GROUP_NAME)


def auditor_group_names() -> set[str]:
    return {AUDITOR_GROUP_NAME} | {group_name_in(code) for code, _label in settings.LANGUAGES}


def auditor_group(group_model=None):
    """The built-in auditor group (None if an admin deleted it)."""
    if group_model is None:
        from django.contrib.auth.models import Group as group_model
    return group_model.objects.filter(name__in=auditor_group_names()).order_by("pk").first()


def auditor_group_ensure():
    """The auditor group, created as the migration does when it is missing
    (a flushed or hand-pruned database; the demo seed relies on it)."""
    from django.contrib.auth.models import Group, Permission

    group = auditor_group()
    if group is not None:
        return group
    group = Group.objects.create(name=group_name_in(settings.LANGUAGE_CODE))
    for app_label, codename in AUDITOR_PERMISSIONS:
        group.permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    return group
