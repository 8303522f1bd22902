"""The playbook pages, in Korean (the default) and English: the list with
its notices badge, a playbook's page running it with checked parameters
(a translated error), a run's page with its steps' masked outputs; another
person's run is not shown there."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from playbooks.models import PlaybookRun
from playbooks.schedules import schedule_set
from playbooks.services import playbook_create

pytestmark = [pytest.mark.django_db(transaction=True)]

NODE = {"key": "phones", "kind": "tool", "tool": "run_sql", "arguments": {"connection": "sales", "sql": "$sql"}}


def test_list_run_and_run_detail_pages(personas, install_models):
    playbook = playbook_create(
        owner=personas.staff,
        name="전화번호 목록",
        model=install_models,
        parameters=[{"name": "sql", "kind": "text"}, {"name": "n", "kind": "number", "required": False}],
        nodes=[NODE],
        actor=personas.staff,
    )
    schedule_set(
        playbook=playbook, kind="interval", every_minutes=30, parameters={"sql": "SELECT 1"}, actor=personas.staff
    )
    client = Client()
    client.force_login(personas.staff)
    listed = client.get(reverse("playbooks:list")).content.decode()
    assert "전화번호 목록" in listed and "플레이북" in listed
    page = client.get(reverse("playbooks:page", args=[playbook.pk])).content.decode()
    assert "30분마다" in page and "다음 실행" in page
    refused = client.post(reverse("playbooks:page", args=[playbook.pk]), {"sql": "SELECT 1", "n": "many"})
    assert "n은(는) 숫자여야 합니다." in refused.content.decode()
    assert not PlaybookRun.objects.exists()
    started = client.post(
        reverse("playbooks:page", args=[playbook.pk]), {"sql": "SELECT name, phone FROM customers", "n": ""}
    )
    run = PlaybookRun.objects.get()
    assert started.status_code == 302 and started["Location"] == reverse("playbooks:run-page", args=[run.pk])
    detail = client.get(started["Location"]).content.decode()
    assert "완료" in detail or "Completed" in detail
    assert "010-1234-5678" not in detail and "phones" in detail
    english = client.get(started["Location"], HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "Steps" in english or "단계" in english
    other = Client()
    other.force_login(personas.outsider)
    assert other.get(started["Location"]).status_code == 404
