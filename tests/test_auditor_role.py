"""The built-in auditor group: a compliance officer reads the whole record
(lists, details, pickers, CSV, view events) and can change nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import NoReverseMatch, reverse

from accounts.builtin_groups import AUDITOR_PERMISSIONS, auditor_group, group_name_in
from audit.events import audit_event_write
from audit.models import AuditEvent, EventKind
from audit.services import tool_call_audit_write
from tests.test_seed_demo import var_dir  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db

AUDIT_LISTS = ["audit_sqlexecution", "audit_toolcallaudit", "audit_auditevent"]


@pytest.fixture
def officer(personas, client):
    user = get_user_model().objects.create_user("officer", password="pw-officer-123", is_staff=True)
    user.groups.add(auditor_group())
    client.force_login(user)
    return user


@pytest.fixture
def records(personas):
    row = tool_call_audit_write(
        actor_id=personas.staff.pk,
        actor_username="staff",
        tool="run_sql",
        outcome="denied",
        resource_id=personas.sales.pk,
        resource_name="sales",
        row_count=0,
        sql_text="DELETE FROM customers",
    )
    event = audit_event_write(kind=EventKind.ADMIN_VIEW, actor=personas.admin, resource_kind="conversation")
    return row, event


def test_the_migration_creates_the_group_with_the_audit_view_permissions_only():
    group = auditor_group()
    assert group is not None and group.name == group_name_in("ko") == "감사 담당자"
    assert group_name_in("en") == "Auditor"
    granted = set(group.permissions.values_list("content_type__app_label", "codename"))
    assert granted == set(AUDITOR_PERMISSIONS)
    assert all(codename.startswith("view_") for _app, codename in granted)


def test_the_auditor_reads_lists_details_pickers_and_exports(client, officer, personas, records):
    row, event = records
    for name in AUDIT_LISTS:
        assert client.get(reverse(f"admin:{name}_changelist")).status_code == 200, name
        assert client.get(reverse(f"admin:{name}_export")).status_code == 200, name
    assert client.get(reverse("admin:audit_sqlexecution_change", args=[row.pk])).status_code == 200
    assert client.get(reverse("admin:audit_auditevent_change", args=[event.pk])).status_code == 200
    views = client.get(reverse("admin:audit_auditevent_changelist"), {"kind__exact": "admin_view"})
    assert event in views.context["cl"].result_list
    # The pickers of the screens' user and connection filters.
    users = client.get(reverse("admin:audit_sqlexecution_pick", args=["user"]), {"term": "sta"})
    assert users.status_code == 200 and [r["text"] for r in users.json()["results"]] == ["staff"]
    found = client.get(reverse("admin:audit_toolcallaudit_pick", args=["db_connection"]), {"term": "sale"})
    assert found.status_code == 200 and [r["text"] for r in found.json()["results"]] == ["sales"]
    # Reading others' records is on the record too.
    assert AuditEvent.objects.filter(kind=EventKind.ADMIN_VIEW, actor_id=officer.pk).exists()
    assert AuditEvent.objects.filter(kind=EventKind.CSV_EXPORT, actor_id=officer.pk).count() == 3


def _admin_urls(personas) -> list[str]:
    """Every add, change and list page of the screens outside the audit app."""
    urls = []
    for model in admin.site._registry:
        opts = model._meta
        if opts.app_label == "audit":
            continue
        urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
        for view, args in (
            ("add", []),
            *(("change", [pk]) for pk in model._default_manager.values_list("pk", flat=True)[:2]),
        ):
            try:
                urls.append(reverse(f"admin:{opts.app_label}_{opts.model_name}_{view}", args=args))
            except NoReverseMatch:
                pass
    return urls


def test_the_auditor_cannot_open_any_governance_screen(client, officer, personas):
    urls = _admin_urls(personas)
    assert any("/governance/role/" in url for url in urls) and any("/add/" in url for url in urls)
    opened = {url: client.get(url).status_code for url in urls}
    assert {url: code for url, code in opened.items() if code not in (403, 404)} == {}
    index = client.get(reverse("admin:index")).content.decode()
    assert "/admin/audit/" in index and "/admin/governance/" not in index


def test_pickers_check_the_screen_they_serve(client, personas):
    clerk = get_user_model().objects.create_user("clerk", password="pw-clerk-123", is_staff=True)
    # May see users, but not the audit screen asking: refused.
    clerk.user_permissions.add(Permission.objects.get(codename="view_user"))
    client.force_login(clerk)
    url = reverse("admin:audit_sqlexecution_pick", args=["user"])
    assert client.get(url, {"term": "sta"}).status_code == 403


def test_seed_demo_adds_the_auditor(var_dir):  # noqa: F811
    call_command("seed_demo", stdout=StringIO())
    auditor = get_user_model().objects.get(username="auditor")
    assert auditor.check_password("auditor") and auditor.is_staff and not auditor.is_superuser
    assert list(auditor.groups.all()) == [auditor_group()]
    assert not auditor.user_permissions.exists()
    out = StringIO()
    call_command("seed_demo", stdout=out)  # idempotent
    assert get_user_model().objects.filter(username="auditor").count() == 1


def test_seed_demo_makes_the_group_again_when_it_is_missing(var_dir):  # noqa: F811
    auditor_group().delete()
    call_command("seed_demo", stdout=StringIO())
    group = auditor_group()
    assert set(group.permissions.values_list("content_type__app_label", "codename")) == set(AUDITOR_PERMISSIONS)
    assert list(group.user_set.values_list("username", flat=True)) == ["auditor"]


def test_seed_demos_summary_reads_in_korean(var_dir):  # noqa: F811
    from django.utils import translation

    out = StringIO()
    with translation.override("ko"):
        call_command("seed_demo", stdout=out)
    text = out.getvalue()
    assert "감사 담당자: auditor / auditor" in text
    assert "역할 영업팀은 DB 전체를, 역할 고객센터는" in text and "(는)" not in text
