"""The session engine: Django's database store, reading a session with one
prepared statement. A websocket re-reads its session on every frame that
starts, stops or syncs a turn (a logout ends the socket's rights at once),
so this read is on every turn's path."""

from __future__ import annotations

from functools import cache

from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.utils import timezone

from owlai import prepared


class SessionStore(DatabaseSessionStore):
    def _get_session_from_db(self):
        if not self.session_key:
            self._session_key = None
            return None
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        rows = prepared.fetchall(_session_sql(), [self.session_key, now])
        if not rows:
            self._session_key = None
            return None
        return prepared.instances(Session, rows[0])


@cache
def _session_sql() -> str:
    return (
        f"SELECT {prepared.columns(Session, 's')} FROM {Session._meta.db_table} s"
        " WHERE s.session_key = %s AND s.expire_date > %s"
    )
