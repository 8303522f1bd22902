"""One way to write a time on every audit screen and export: ISO 8601 in the
installation's time zone (settings.TIME_ZONE), always with its UTC offset, so
a time read on a screen, in a detail title or in a CSV file names the same
instant without the reader guessing the zone."""

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
