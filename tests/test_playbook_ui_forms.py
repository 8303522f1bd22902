"""The playbook pages' owner forms and page rules: a new playbook, sharing
and schedules through the governed services (their audit events, their
refusals shown), the pages' CSP without inline scripts, the editor only
for the owner, the chat page's "save as playbook" words, and a reveal on a
run page only for the person the run acted for."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from governance.models import Role
from playbooks import events
from playbooks.models import Playbook, PlaybookSchedule
from playbooks.services import playbook_create, playbook_share

pytestmark = [pytest.mark.django_db(transaction=True)]

NODE = {"key": "phones", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "$sql"}}


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _playbook(owner, model):
    return playbook_create(
        owner=owner,
        name="전화번호 목록",
        model=model,
        parameters=[{"name": "sql", "kind": "text"}],
        nodes=[NODE],
        actor=owner,
    )


def test_new_playbook_form_creates_through_the_service_and_shows_a_refusal(personas, install_models):
    client = _client(personas.staff)
    url = reverse("playbooks:new")
    refused = client.post(url, {"name": "", "model": install_models.pk, "prompt": "hi"}, follow=True)
    assert "플레이북 이름이 필요합니다." in refused.content.decode()
    assert not Playbook.objects.exists()
    made = client.post(url, {"name": "매출 요약", "model": install_models.pk, "prompt": "매출을 요약해 줘"})
    playbook = Playbook.objects.get()
    assert made["Location"] == reverse("playbooks:page", args=[playbook.pk])
    assert playbook.nodes == [{"key": "answer", "kind": "agent", "prompt": "매출을 요약해 줘"}]
    assert AuditEvent.objects.filter(kind=events.PLAYBOOK_CREATED, resource_id=str(playbook.pk)).count() == 1


def test_pages_send_the_chat_csp_and_load_only_static_scripts(personas, install_models):
    playbook = _playbook(personas.staff, install_models)
    client = _client(personas.staff)
    for url in (reverse("playbooks:list"), reverse("playbooks:page", args=[playbook.pk])):
        response = client.get(url)
        assert "script-src 'self'" in response["Content-Security-Policy"]
        html = response.content.decode()
        assert not re.search(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)", html), url


def test_editor_and_owner_forms_are_the_owners_only(personas, install_models):
    playbook = _playbook(personas.staff, install_models)
    playbook_share(playbook=playbook, users=[personas.outsider], actor=personas.staff)
    owner_page = _client(personas.staff).get(reverse("playbooks:page", args=[playbook.pk])).content.decode()
    assert 'id="editor-config"' in owner_page and 'id="schedule-form"' in owner_page
    shared_page = _client(personas.outsider).get(reverse("playbooks:page", args=[playbook.pk])).content.decode()
    assert 'id="editor-config"' not in shared_page and 'id="share-form"' not in shared_page
    assert 'id="run-form"' in shared_page
    # A form posted by someone else is not found (nothing changes, nothing recorded).
    before = AuditEvent.objects.count()
    response = _client(personas.outsider).post(reverse("playbooks:share", args=[playbook.pk]), {"users": ""})
    assert response.status_code == 404 and AuditEvent.objects.count() == before


def test_share_form_sets_roles_and_users_and_names_an_unknown_user(personas, install_models):
    playbook = _playbook(personas.staff, install_models)
    role = Role.objects.create(name="analysts")
    client = _client(personas.staff)
    url = reverse("playbooks:share", args=[playbook.pk])
    refused = client.post(url, {"roles": [role.pk], "users": "nobody-here"}, follow=True).content.decode()
    assert "nobody-here" in refused
    assert not playbook.shared_roles.exists()
    client.post(url, {"roles": [role.pk], "users": "outsider"})
    assert list(playbook.shared_roles.all()) == [role]
    assert list(playbook.shared_users.all()) == [personas.outsider]
    shared = AuditEvent.objects.get(kind=events.PLAYBOOK_SHARED)
    assert shared.details["users"] == ["outsider"] and shared.details["roles"] == ["analysts"]


def test_schedule_form_adds_shows_next_run_and_zone_and_removes(personas, install_models):
    playbook = _playbook(personas.staff, install_models)
    client = _client(personas.staff)
    add = reverse("playbooks:schedule-add", args=[playbook.pk])
    missing = client.post(add, {"kind": "cron", "cron": "0 9 * * *", "timezone": "Asia/Seoul"}, follow=True)
    assert "sql 값이 필요합니다." in missing.content.decode()  # the schedule's parameters are checked too
    good = {"s_sql": "SELECT 1"}
    bad = client.post(add, {"kind": "cron", "cron": "every day", "timezone": "Asia/Seoul", **good}, follow=True)
    assert "다섯" in bad.content.decode() and not PlaybookSchedule.objects.exists()
    bad_zone = client.post(add, {"kind": "cron", "cron": "0 9 * * *", "timezone": "Mars/Base", **good}, follow=True)
    assert not PlaybookSchedule.objects.exists() and "시간대" in bad_zone.content.decode()
    client.post(add, {"kind": "cron", "cron": "0 9 * * 1-5", "timezone": "Asia/Seoul", "s_sql": "SELECT 1"})
    schedule = PlaybookSchedule.objects.get()
    assert schedule.cron == "0 9 * * 1-5" and schedule.parameters == {"sql": "SELECT 1"}
    page = client.get(reverse("playbooks:page", args=[playbook.pk])).content.decode()
    assert re.search(r'class="pb-next">\d{4}-\d\d-\d\d 09:00 Asia/Seoul', page)
    assert AuditEvent.objects.filter(kind=events.SCHEDULE_SET).count() == 1
    client.post(reverse("playbooks:schedule-delete", args=[playbook.pk, schedule.pk]))
    assert not PlaybookSchedule.objects.exists()
    assert AuditEvent.objects.filter(kind=events.SCHEDULE_DELETED).count() == 1


def test_chat_page_words_for_save_as_playbook(personas):
    client = _client(personas.staff)
    korean = client.get(reverse("playbooks:page-text")).json()
    assert korean["saveAsPlaybook"] == "플레이북으로 저장" and korean["listUrl"] == reverse("playbooks:list")
    english = client.get(reverse("playbooks:page-text"), HTTP_ACCEPT_LANGUAGE="en").json()
    assert english["saveAsPlaybook"] == "Save as playbook"
    assert "playbooks/save.js" in client.get(reverse("chat:page")).content.decode()


def _run_config(html: str) -> dict:
    found = re.search(r'<script id="run-config" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def test_run_page_reveals_only_for_the_person_it_ran_as(personas, install_models):
    from playbooks.runs import playbook_run_start

    revealers = Role.objects.create(name="revealers", can_view_raw_pii=True)
    revealers.users.add(personas.staff, personas.outsider)
    playbook = _playbook(personas.staff, install_models)
    playbook_share(playbook=playbook, users=[personas.outsider], actor=personas.staff)
    run = playbook_run_start(
        playbook=playbook, actor=personas.outsider, parameters={"sql": "SELECT 1"}, dispatch_after_commit=False
    )
    url = reverse("playbooks:run-page", args=[run.pk])
    own = _run_config(_client(personas.outsider).get(url).content.decode())
    assert own["mayReveal"] is True and str(run.conversation_id) in own["revealUrl"]
    # The playbook's owner sees the run, not the values of the person it ran for.
    owners = _run_config(_client(personas.staff).get(url).content.decode())
    assert owners["mayReveal"] is False and owners["revealUrl"] == ""
