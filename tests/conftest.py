"""Shared fixtures: personas, sample customer databases, service detection.

Service tests (real PostgreSQL / Redis) are marked `services`. Locally they
skip when the service is unreachable; with OWLAI_REQUIRE_SERVICES=1 (CI) a
skipped service test is a failure, so CI can never pass by skipping them.
Tests of the embedded profile's own guards are marked `embedded`; `make test`
runs them in a second pass on SQLite after the PostgreSQL pass.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from tests.support.browser import browser_stack, chat_env, chromium, pages  # noqa: F401 (fixtures)
from tests.support.customer_dbs import (  # noqa: F401 (fixtures)
    mysql_customer_db,
    pg_customer_db,
    port_open,
    sqlite_customer_db,
)

REQUIRE_SERVICES = os.environ.get("OWLAI_REQUIRE_SERVICES") == "1"
PG_ADMIN_URL = os.environ.get("OWLAI_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


_port_open = port_open


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    # Fixtures read it in their teardown (browser screenshots on failure).
    setattr(item, f"rep_{report.when}", report)
    needs_services = item.get_closest_marker("services") or item.get_closest_marker("e2e")
    if REQUIRE_SERVICES and needs_services and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped while OWLAI_REQUIRE_SERVICES=1 (CI forbids skips): {report.longrepr}"


def app_db_is_postgres() -> bool:
    return settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


@pytest.fixture
def require_postgres_app_db():
    if not app_db_is_postgres():
        pytest.skip("needs DATABASE_URL pointing at PostgreSQL (run `make test`)")


@pytest.fixture
def require_redis():
    if not settings.REDIS_URL or not _port_open("127.0.0.1", 6379):
        pytest.skip("needs REDIS_URL and a reachable Redis (run `make test`)")


@pytest.fixture
def english():
    """For tests that read English messages (the default language is Korean);
    a turn started inside takes this language too (Turn.language)."""
    from django.utils import translation

    with translation.override("en"):
        yield


@pytest.fixture(autouse=True)
def in_process_runtime(request, settings):
    """Unit and integration tests run turns in-process with the in-memory layer;
    end-to-end tests start real processes with their own environment."""
    # Password hashing is deliberately slow; tests create many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    if request.node.get_closest_marker("e2e"):
        yield
        return
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.CELERY_TASK_ALWAYS_EAGER = True
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


@pytest.fixture(autouse=True)
def sqlite_audit_guards(request):
    """The SQLite append-only triggers (migration audit 0003) also block the
    DELETE that resets the database after a transactional test; lift them
    just for that reset and put them back for the next test."""
    marker = request.node.get_closest_marker("django_db")
    transactional = bool(marker and (marker.kwargs.get("transaction") or (marker.args and marker.args[0])))
    transactional = transactional or "transactional_db" in request.fixturenames
    uses_db = transactional or marker is not None or "db" in request.fixturenames
    if not uses_db or settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        yield
        return
    from django.db import connection

    from audit.sqlite_guards import create_trigger_statements, drop_trigger_statements

    request.getfixturevalue("transactional_db" if transactional else "db")
    with connection.cursor() as cursor:
        for statement in create_trigger_statements():
            cursor.execute(statement)
    yield
    if transactional:
        with connection.cursor() as cursor:
            for statement in drop_trigger_statements():
                cursor.execute(statement)


# --- Sample customer databases ----------------------------------------------

SAMPLE_SCHEMA = [
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, phone TEXT, city TEXT)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER)",
    "CREATE TABLE salaries (id INTEGER PRIMARY KEY, employee TEXT, amount INTEGER)",
]
SAMPLE_ROWS = [
    "INSERT INTO customers VALUES (1, '김민준', '010-1234-5678', '서울'), (2, '이서연', '010-2222-3333', '부산'),"
    " (3, '박지후', '010-4444-5555', '서울')",
    "INSERT INTO orders VALUES (1, 1, 50000), (2, 1, 12000), (3, 3, 7000)",
    "INSERT INTO salaries VALUES (1, '최도윤', 90000000)",
]


@pytest.fixture
def audit_inserts_refused(db):
    """The database refuses every new tool-call audit row (a trigger), so
    fail-closed tests go through the real write path, whatever it is."""
    from django.db import connection

    from audit.models import ToolCallAudit

    table = ToolCallAudit._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION owlai_test_audit_down() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'audit store down'; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                f"CREATE TRIGGER owlai_test_audit_down BEFORE INSERT ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION owlai_test_audit_down()"
            )
        else:
            cursor.execute(
                f"CREATE TRIGGER owlai_test_audit_down BEFORE INSERT ON {table} "
                "BEGIN SELECT RAISE(ABORT, 'audit store down'); END"
            )
    yield  # the test's transaction rolls the trigger back with everything else


@pytest.fixture
def sample_sqlite_db(tmp_path: Path) -> str:
    path = tmp_path / "company.sqlite3"
    conn = sqlite3.connect(path)
    for statement in SAMPLE_SCHEMA + SAMPLE_ROWS:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return f"sqlite:///{path}"


@pytest.fixture(scope="session")
def pg_target_dsn():
    """A throwaway PostgreSQL customer database with the sample tables."""
    if not _port_open("127.0.0.1", 5432):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    name = f"owlai_target_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    dsn = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in SAMPLE_SCHEMA + SAMPLE_ROWS:
            conn.execute(statement)
    yield dsn
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- Personas ----------------------------------------------------------------


@pytest.fixture
def install_models(db):
    """Providers/models from a config with the offline demo and a scripted provider."""
    from governance.services import feature_default_set, install_config_sync
    from owlai.install_config import parse_install_config

    config = parse_install_config(
        """
[[providers]]
name = "offline-demo"
kind = "offline-demo"
tier = "private"
models = [{ name = "owlai-offline-demo", label = "Offline demo model" }]
"""
    )
    install_config_sync(config=config)
    from governance.models import LlmModel

    demo = LlmModel.objects.get(name="owlai-offline-demo")
    feature_default_set(feature="chat", model=demo)
    return demo


@pytest.fixture
def personas(db, sample_sqlite_db):
    """admin (superuser), staff (role with whole-DB grant on `sales` and the
    `customers` table only on `hr`), outsider (no role)."""
    from django.contrib.auth import get_user_model

    from governance.models import DbConnection, DbGrant, Role
    from governance.services import db_connection_set_stored_dsn

    User = get_user_model()
    admin = User.objects.create_superuser("admin", "admin@example.com", "pw-admin-123")
    staff = User.objects.create_user("staff", "staff@example.com", "pw-staff-123")
    outsider = User.objects.create_user("outsider", "out@example.com", "pw-out-123")
    sales = DbConnection.objects.create(
        name="sales", engine="sqlite", business_summary="Sales DB: customers and orders"
    )
    db_connection_set_stored_dsn(connection=sales, dsn=sample_sqlite_db)
    partial = DbConnection.objects.create(name="partial", engine="sqlite", business_summary="Only customers granted")
    db_connection_set_stored_dsn(connection=partial, dsn=sample_sqlite_db)
    hidden = DbConnection.objects.create(name="hr_secret", engine="sqlite", business_summary="HR: salaries")
    db_connection_set_stored_dsn(connection=hidden, dsn=sample_sqlite_db)
    role = Role.objects.create(name="sales-team")
    role.users.add(staff)
    DbGrant.objects.create(role=role, connection=sales, whole_database=True)
    DbGrant.objects.create(role=role, connection=partial, whole_database=False, tables=["customers"])

    class P:
        pass

    p = P()
    p.admin, p.staff, p.outsider = admin, staff, outsider
    p.sales, p.partial, p.hidden, p.role = sales, partial, hidden, role
    return p


@pytest.fixture(scope="session", autouse=True)
def _flush_survives_a_deadlock():
    """A transactional test ends with Django's flush (one TRUNCATE of every
    table). The live stacks of the reliability tests keep their workers
    running the leased sweeps meanwhile, and a sweep's row lock taken while
    the TRUNCATE waits for its table locks is a deadlock PostgreSQL breaks
    by aborting one side — sometimes the flush, which then leaves the next
    test a database full of the last one's rows. The flush is retried (the
    sweep's side has rolled back by then); any other error is raised."""
    import time

    from django.core.management.commands import flush

    handle = flush.Command.handle

    def handle_with_retry(self, **options):
        for attempt in range(5):
            try:
                return handle(self, **options)
            except Exception as exc:
                # flush raises CommandError from the database's error.
                said = f"{exc} {exc.__cause__ or ''}".lower()
                if attempt == 4 or "deadlock detected" not in said:
                    raise
                time.sleep(0.2 * (attempt + 1))

    flush.Command.handle = handle_with_retry
    yield
    flush.Command.handle = handle
