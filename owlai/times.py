"""One way to write a time: ISO 8601 in the installation's time zone
(settings.TIME_ZONE), always with its UTC offset, so a time read on a
screen, in a detail title, a CSV file or an API answer names the same
instant without the reader guessing the zone. Screens and exports write
seconds (`local_iso`); the API and the websocket write what Django REST
framework's DateTimeField writes (`api_time`: the same, with the
microseconds the database keeps), so hand-built answers and serializers
agree. Admin lists use the same zone and the formats in owlai/formats/,
and every admin page names the zone (`zone_label`)."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone


def local_iso(value: dt.datetime | None) -> str:
    """`2025-03-01T09:30:00+09:00`; "" for None. Seconds are enough to
    match a screen line to a database log; the stored value keeps the rest."""
    if value is None:
        return ""
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt.UTC)
    return timezone.localtime(value).isoformat(timespec="seconds")


def zone_label() -> str:
    """The zone every audit time is written in, e.g. `Asia/Seoul, UTC+09:00`."""
    now = timezone.localtime()
    offset = now.strftime("%z")  # +0900
    return f"{timezone.get_current_timezone_name()}, UTC{offset[:3]}:{offset[3:]}"


def api_time(value: dt.datetime | None) -> str | None:
    """An API or websocket time: `2025-03-01T09:30:00.123456+09:00`; None for None."""
    if value is None:
        return None
    from rest_framework.fields import DateTimeField

    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt.UTC)
    return DateTimeField().to_representation(value)


def zone_context(request) -> dict:
    """Template context: every admin page names the zone its times are in."""
    return {"owlai_zone": zone_label()}
