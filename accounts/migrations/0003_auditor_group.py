"""The built-in auditor group (accounts.builtin_groups): the audit app's view
permissions and nothing else. Permissions are normally created after all
migrations ran (post_migrate); they are created here first, so the group is
complete on a fresh database too."""

from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations

from accounts.builtin_groups import AUDITOR_PERMISSIONS, auditor_group, group_name_in


def create_auditor_group(apps, schema_editor):
    audit_config = apps.get_app_config("audit")
    audit_config.models_module = True  # create_permissions skips an app without models
    create_permissions(audit_config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    if auditor_group(group_model) is not None:
        return  # created before (or renamed back by an admin): leave it alone
    group = group_model.objects.create(name=group_name_in(settings.LANGUAGE_CODE))
    for app_label, codename in AUDITOR_PERMISSIONS:
        group.permissions.add(permission_model.objects.get(content_type__app_label=app_label, codename=codename))


def remove_auditor_group(apps, schema_editor):
    group = auditor_group(apps.get_model("auth", "Group"))
    if group is not None:
        group.delete()


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_apitoken_scopes"),
        ("audit", "0011_event_kind_without_choices"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_auditor_group, remove_auditor_group)]
