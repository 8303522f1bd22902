"""The session engine: Django's database store, reading a session with one
prepared statement. A websocket re-reads its session on every frame that
starts, stops or syncs a turn (a logout ends the socket's rights at once),
so this read is on every turn's path: `session_signs_in` reads the session
and its user in that one statement."""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model, load_backend
from django.contrib.sessions.backends.db import SessionStore as DatabaseSessionStore
from django.contrib.sessions.models import Session
from django.db import connection
from django.utils import timezone
from django.utils.crypto import constant_time_compare

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


MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


def session_signs_in(*, session_key: str | None, user_id) -> bool:
    """Whether session `session_key` still signs `user_id` in, as a request
    would find it: not expired or deleted (logout), naming this user and a
    configured backend, with the hash of the user's current password (a
    password change signs every session out), for a user who may still sign
    in (ModelBackend: is_active). Session and user are read in one prepared
    statement; a backend other than ModelBackend loads the user itself."""
    if not session_key:
        return False
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    rows = prepared.fetchall(_session_user_sql(), [user_id, session_key, now])
    if not rows:
        return False
    session_data, password, is_active = rows[0]
    data = SessionStore().decode(session_data)
    if str(data.get(SESSION_KEY, "")) != str(user_id):
        return False
    backend_path = data.get(BACKEND_SESSION_KEY, "")
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return False
    if backend_path == MODEL_BACKEND:
        # ModelBackend.get_user: the user row, refused when inactive.
        user = get_user_model()(pk=user_id, password=password) if password is not None and is_active else None
    else:
        user = load_backend(backend_path).get_user(user_id)
    stored_hash = data.get(HASH_SESSION_KEY) or ""
    return user is not None and constant_time_compare(stored_hash, user.get_session_auth_hash())


@cache
def _session_user_sql() -> str:
    user = get_user_model()._meta
    return (
        f"SELECT s.session_data, u.{user.get_field('password').column}, u.{user.get_field('is_active').column}"
        f" FROM {Session._meta.db_table} s LEFT JOIN {user.db_table} u ON u.{user.pk.column} = %s"
        " WHERE s.session_key = %s AND s.expire_date > %s"
    )
