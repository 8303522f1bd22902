"""One time format and one zone (owlai.times): the API writes what Django REST
framework's DateTimeField writes, hand-built answers included; screens write
ISO 8601 dates and times in the installation's zone, and every admin page
names that zone."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.urls import reverse
from django.utils import formats, translation
from rest_framework.fields import DateTimeField

from chat.services import conversation_create
from owlai.times import api_time, local_iso, zone_label

MOMENT = dt.datetime(2026, 3, 1, 0, 30, 5, 123456, tzinfo=dt.UTC)


def test_api_times_are_the_serializers_in_the_installations_zone(settings):
    settings.TIME_ZONE = "Asia/Seoul"
    assert api_time(MOMENT) == DateTimeField().to_representation(MOMENT) == "2026-03-01T09:30:05.123456+09:00"
    assert api_time(None) is None
    assert local_iso(MOMENT) == "2026-03-01T09:30:05+09:00"
    assert zone_label().startswith("Asia/Seoul, UTC+09:00")


@pytest.mark.parametrize("language", ["ko", "en"])
def test_screens_write_dates_and_times_as_iso_reads_them(language):
    local = MOMENT.astimezone(dt.timezone(dt.timedelta(hours=9)))
    with translation.override(language):
        assert formats.date_format(local, "DATETIME_FORMAT") == "2026-03-01 09:30:05"
        assert formats.date_format(local, "SHORT_DATETIME_FORMAT") == "2026-03-01 09:30:05"
        assert formats.date_format(local.date(), "DATE_FORMAT") == "2026-03-01"


ISO_WITH_OFFSET = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+09:00$")


@pytest.mark.django_db
def test_hand_built_and_serialized_api_times_agree(client, personas, settings):
    settings.TIME_ZONE = "Asia/Seoul"
    conversation = conversation_create(owner=personas.staff)
    client.force_login(personas.staff)
    listed = client.get(reverse("chat:conversations")).json()
    mine = next(
        c for c in (listed if isinstance(listed, list) else listed["results"]) if c["id"] == str(conversation.pk)
    )
    assert ISO_WITH_OFFSET.match(mine["updated_at"]), mine
    detail = client.get(reverse("chat:conversation-detail", args=[conversation.pk])).json()
    stamps = [v for k, v in detail.items() if k.endswith("_at") and v]
    assert stamps and all(ISO_WITH_OFFSET.match(v) for v in stamps), detail


@pytest.mark.django_db
@pytest.mark.parametrize(("language", "words"), [("en", "Times in Asia/Seoul"), ("ko", "시각 기준: Asia/Seoul")])
def test_every_admin_page_names_its_zone(admin_client, settings, language, words):
    settings.TIME_ZONE = "Asia/Seoul"
    admin_client.cookies[settings.LANGUAGE_COOKIE_NAME] = language
    for url in (reverse("admin:index"), reverse("admin:auth_user_changelist")):
        page = admin_client.get(url, HTTP_ACCEPT_LANGUAGE=language).content.decode()
        assert words in page and "UTC+09:00" in page, url
