"""The audit write path of a tool call.

* A call that reaches a customer database has an attempt row (outcome
  `started`) that is committed before anything reaches that database; its
  outcome is a second, append-only record (ToolCallOutcome).
* An audit write that cannot take its lock fails closed within the lock
  timeout, and nothing runs.
* NUL bytes and lone surrogates never make a record unwritable.
* The SQL history and its CSV export show one line per call.

"Nothing reached the customer database" is observed, not inferred: the
connection's DSN points at a canary, a TCP listener that records every
connection made to it (and closes it). A positive control shows the canary
does see the executor when the audit write succeeds.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import socket
import threading
import time
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection
from django.utils import timezone, translation

from audit.admin import TOOL_CALL_COLUMNS
from audit.digest import seal_new_rows, verify
from audit.models import NO_OUTCOME, NO_OUTCOME_LABEL, Outcome, ToolCallAudit, ToolCallOutcome
from audit.services import (
    AuditWriteError,
    sanitise_text,
    tool_call_audit_write,
    tool_call_outcome_write,
)
from tests.support.customer_dbs import CustomerDb
from tests.support.governed import governed_connection


class Canary:
    """A TCP listener standing in for a customer database: counts every
    connection made to it; `on_contact` runs (in the listener thread) before
    the connection is closed."""

    def __init__(self, on_contact=None) -> None:
        self.contacts = 0
        self.seen: list = []
        self._on_contact = on_contact
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def dsn(self) -> str:
        return f"postgresql://canary:canary@127.0.0.1:{self.port}/canary?connect_timeout=3"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.contacts += 1
            try:
                if self._on_contact is not None:
                    self.seen.append(self._on_contact())
            finally:
                client.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._server.close()


@contextmanager
def canary(on_contact=None):
    c = Canary(on_contact)
    try:
        yield c
    finally:
        c.close()


def governed_canary(c: Canary, user_model):
    return governed_connection(CustomerDb("postgresql", c.dsn, c.dsn), user_model)


def later() -> dt.datetime:
    return timezone.now() + dt.timedelta(minutes=1)


def app_db_connect() -> psycopg.Connection:
    s = connection.settings_dict
    params = {"host": s["HOST"], "port": s["PORT"], "user": s["USER"], "password": s["PASSWORD"], "dbname": s["NAME"]}
    return psycopg.connect(**{k: v for k, v in params.items() if v}, autocommit=True)


# --- ordering: the attempt is durable before the customer database is contacted ---


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_the_attempt_is_committed_before_the_customer_database_is_contacted(
    require_postgres_app_db, django_user_model, english
):
    """When the customer database is first contacted, another connection to
    the app database already sees the committed attempt row."""
    conversation = {}

    def committed_rows():
        with app_db_connect() as other:
            return other.execute(
                "SELECT outcome FROM audit_toolcallaudit WHERE conversation_id = %s ORDER BY id",
                [conversation["id"]],
            ).fetchall()

    with canary(on_contact=committed_rows) as c:
        g = governed_canary(c, django_user_model)
        conversation["id"] = g.conversation.pk
        payload, outcome = g.run("SELECT count(*) FROM customers")
    assert c.contacts >= 1  # the positive control: the canary sees the executor
    assert c.seen[0] == [("started",)]
    # The canary is no database: no session could be made (the call failed;
    # the platform refused nothing), recorded as the outcome.
    assert outcome == "failed" and "could not be reached" in payload["error"]
    (attempt,) = g.audit_rows()
    assert (attempt.outcome, attempt.final.outcome, attempt.call_outcome) == ("started", "failed", "failed")


@pytest.mark.embedded
def test_an_attempt_that_cannot_be_recorded_never_contacts_the_customer_database(
    audit_inserts_refused, django_user_model
):
    with canary() as c:
        g = governed_canary(c, django_user_model)
        with pytest.raises(AuditWriteError):
            g.run("SELECT count(*) FROM customers")
        time.sleep(0.3)  # a connection attempt would have been accepted by now
    assert c.contacts == 0
    assert ToolCallOutcome.objects.count() == 0


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_lock_on_the_audit_table_fails_the_call_closed_within_the_timeout(
    require_postgres_app_db, django_user_model, settings
):
    settings.OWLAI_AUDIT_LOCK_TIMEOUT_MS = 300
    with canary() as c:
        g = governed_canary(c, django_user_model)
        locker = app_db_connect()
        try:
            locker.autocommit = False
            # EXCLUSIVE: reads go on, every INSERT waits.
            locker.execute("LOCK TABLE audit_toolcallaudit IN EXCLUSIVE MODE")
            started = time.monotonic()
            with pytest.raises(AuditWriteError):
                g.run("SELECT count(*) FROM customers")
            elapsed = time.monotonic() - started
        finally:
            locker.rollback()
            locker.close()
        time.sleep(0.3)
    assert elapsed < 30  # it ends (the lock was never released while it waited)
    assert c.contacts == 0
    assert g.audit_rows() == []


# --- sanitising ------------------------------------------------------------------


def test_sanitise_text_replaces_nul_and_lone_surrogates_only():
    assert sanitise_text("plain") == "plain"
    assert sanitise_text("a\x00b") == "a\ufffdb"
    assert sanitise_text("고객\ud800\x00") == "고객\ufffd\ufffd"
    assert sanitise_text("emoji 😀 kept") == "emoji 😀 kept"
    assert len(sanitise_text("x\udfffy\x00")) == 4


@pytest.mark.embedded
@pytest.mark.django_db
def test_refused_attempts_with_nul_and_surrogates_are_recorded_and_the_digest_verifies(
    sqlite_customer_db, django_user_model
):
    from chat.executor import execute_tool_call

    g = governed_connection(sqlite_customer_db, django_user_model)
    ctx = g.context()
    # JSON escapes as the model would send them: \u0000 and a lone \ud800.
    attempts = [
        ("run_sql", '{"connection": "%s", "sql": "DELETE FROM customers WHERE name = \'a\\u0000b\\ud800\'"}'),
        ("run_sql", '{"connection": "no\\u0000such\\ud800db", "sql": "SELECT 1"}'),
        ("run_sql", '{"connection": "%s", "sql": "SELECT 1; DROP TABLE customers_\\udc80 -- \\u0000"}'),
        ("run\x00sql\ud800", "{}"),
    ]
    for name, raw in attempts:
        raw = raw.replace("%s", g.connection.name)
        result = execute_tool_call(ctx, name=name, arguments=raw)
        assert result.outcome == "denied"
    rows = list(ToolCallAudit.objects.filter(conversation_id=g.conversation.pk).order_by("id"))
    assert len(rows) == len(attempts)
    assert all(row.outcome == Outcome.DENIED for row in rows)
    stored = json.dumps([[str(v) for v in row.__dict__.values()] for row in rows], ensure_ascii=False)
    assert "\x00" not in stored and "\\u0000" not in stored
    assert rows[0].sql_text == "DELETE FROM customers WHERE name = 'a\ufffdb\ufffd'"
    assert rows[1].resource_name == "no\ufffdsuch\ufffddb"
    assert rows[3].tool == "run\ufffdsql\ufffd"
    # The digest chain hashes what is stored: it seals and verifies.
    assert seal_new_rows(now=later())
    assert verify(now=later()) == []


@pytest.mark.embedded
@pytest.mark.django_db
def test_every_text_field_is_sanitised_and_cut_to_its_column():
    row = tool_call_audit_write(
        actor_id=1,
        actor_username="u\x00" * 100,
        tool="t\ud800",
        outcome=Outcome.DENIED,
        reason="r\x00",
        resource_name="n\x00" * 150,
        sql_text="s\x00",
        tables=["a\x00", "b\udc00"],
        origin_ref="o\x00",
    )
    row = ToolCallAudit.objects.get(pk=row.pk)
    assert row.actor_username == "u\ufffd" * 75
    assert (row.tool, row.reason, row.sql_text, row.origin_ref) == ("t\ufffd", "r\ufffd", "s\ufffd", "o\ufffd")
    assert row.resource_name == ("n\ufffd" * 100)
    assert row.tables == ["a\ufffd", "b\ufffd"]
    record = tool_call_outcome_write(
        attempt=tool_call_audit_write(actor_id=1, actor_username="u", tool="run_sql", outcome=Outcome.STARTED),
        outcome=Outcome.FAILED,
        reason="bad\x00\ud800",
    )
    assert ToolCallOutcome.objects.get(pk=record.pk).reason == "bad\ufffd\ufffd"


@pytest.mark.embedded
@pytest.mark.django_db
def test_an_outcome_needs_a_started_attempt_and_a_final_outcome():
    denied = tool_call_audit_write(actor_id=1, actor_username="u", tool="run_sql", outcome=Outcome.DENIED)
    with pytest.raises(AuditWriteError):
        tool_call_outcome_write(attempt=denied, outcome=Outcome.SUCCESS)
    started = tool_call_audit_write(actor_id=1, actor_username="u", tool="run_sql", outcome=Outcome.STARTED)
    with pytest.raises(AuditWriteError):
        tool_call_outcome_write(attempt=started, outcome=Outcome.STARTED)
    tool_call_outcome_write(attempt=started, outcome=Outcome.SUCCESS, row_count=2)
    with pytest.raises(AuditWriteError):  # one outcome per attempt (unique)
        tool_call_outcome_write(attempt=started, outcome=Outcome.FAILED)


# --- one line per call -------------------------------------------------------------


def _three_calls(user) -> dict[str, ToolCallAudit]:
    common = {"actor_id": user.pk, "actor_username": user.username, "tool": "run_sql", "resource_name": "sales"}
    ran = tool_call_audit_write(**common, outcome=Outcome.STARTED, sql_text="SELECT 1 AS ran")
    tool_call_outcome_write(attempt=ran, outcome=Outcome.SUCCESS, row_count=5, duration_ms=3.5)
    lost = tool_call_audit_write(**common, outcome=Outcome.STARTED, sql_text="SELECT 2 AS lost")
    denied = tool_call_audit_write(**common, outcome=Outcome.DENIED, reason="not a read-only query", sql_text="DELETE")
    return {"ran": ran, "lost": lost, "denied": denied}


@pytest.mark.embedded
@pytest.mark.django_db
def test_sql_history_shows_one_line_per_call_with_no_outcome_recorded(admin_client, admin_user):
    calls = _three_calls(admin_user)
    response = admin_client.get("/admin/audit/sqlexecution/")
    assert response.status_code == 200
    lines = {obj.pk: obj for obj in response.context["cl"].result_list}
    assert set(lines) == {c.pk for c in calls.values()}
    assert lines[calls["ran"].pk].line_outcome == "success" and lines[calls["ran"].pk].line_row_count == 5
    assert lines[calls["lost"].pk].line_outcome == str(NO_OUTCOME_LABEL)
    assert lines[calls["denied"].pk].line_outcome == "denied"
    assert str(NO_OUTCOME_LABEL) in response.content.decode()

    for value, expected in [
        ("success", "ran"),
        (NO_OUTCOME, "lost"),
        ("denied", "denied"),
    ]:
        response = admin_client.get(f"/admin/audit/sqlexecution/?outcome__exact={value}")
        assert [o.pk for o in response.context["cl"].result_list] == [calls[expected].pk]
    # The tool-call list too.
    response = admin_client.get("/admin/audit/toolcallaudit/")
    assert len(response.context["cl"].result_list) == 3
    # Detail of the call that ran: its outcome record's outcome and rows.
    detail = admin_client.get(f"/admin/audit/sqlexecution/{calls['ran'].pk}/change/")
    assert detail.status_code == 200 and str(Outcome.SUCCESS.label) in detail.content.decode()


@pytest.mark.embedded
@pytest.mark.django_db
def test_csv_export_has_one_line_per_call(admin_client, admin_user):
    calls = _three_calls(admin_user)
    response = admin_client.get("/admin/audit/sqlexecution/export/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    with translation.override("ko"):  # the rows keep the request's language, whatever is active later
        text = b"".join(response.streaming_content).decode("utf-8-sig")
    header, *rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) == 3
    column = [field for field, _header in TOOL_CALL_COLUMNS].index
    by_sql = {row[column("sql_text")]: row for row in rows}
    outcome, count = column("line_outcome"), column("line_row_count")
    # Outcomes in words (the request's language: English here).
    assert (by_sql["SELECT 1 AS ran"][outcome], by_sql["SELECT 1 AS ran"][count]) == ("Success", "5")
    assert by_sql["SELECT 2 AS lost"][outcome] == "no outcome recorded"
    assert by_sql["DELETE"][outcome] == "Denied"
    assert by_sql["DELETE"][column("line_reason")] == "not a read-only query"
    del calls


@pytest.mark.embedded
@pytest.mark.django_db
def test_outcome_records_are_digested_and_verify():
    started = tool_call_audit_write(actor_id=1, actor_username="u", tool="run_sql", outcome=Outcome.STARTED)
    tool_call_outcome_write(attempt=started, outcome=Outcome.SUCCESS, row_count=1)
    sealed = seal_new_rows(now=later())
    assert "audit_toolcalloutcome" in {d.table for d in sealed}
    assert verify(now=later()) == []


def _timeouts() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
        return cursor.fetchone()


@pytest.mark.services
@pytest.mark.parametrize("transactional", [False, True])
def test_the_audit_timeouts_do_not_outlive_the_write(require_postgres_app_db, request, transactional):
    """SET LOCAL ends with the write's own transaction (autocommit) or is put
    back (inside a caller's transaction): other queries keep their settings."""
    request.getfixturevalue("transactional_db" if transactional else "db")
    before = _timeouts()
    row = tool_call_audit_write(actor_id=1, actor_username="u", tool="run_sql", outcome=Outcome.STARTED)
    tool_call_outcome_write(attempt=row, outcome=Outcome.SUCCESS, row_count=1)
    assert _timeouts() == before
    assert ToolCallAudit.objects.get(pk=row.pk).call_outcome == "success"
