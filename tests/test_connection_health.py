"""A lost application-database connection is replaced (owlai.connection_health,
owlai.prepared), and a customer-DB call's deadline wakes a blocked reader
(governance.sql.execution_connect). The end-to-end faults are in
tests/test_reliability_db_faults.py."""

from __future__ import annotations

import socket
import threading

import psycopg
import pytest
from django.db import OperationalError, connection, transaction

from governance.sql.execution_connect import Deadline, Limits
from owlai import prepared
from owlai.connection_health import until_answered
from tests.conftest import app_db_is_postgres
from tests.support.fault_helpers import app_db_dsn

pytestmark = pytest.mark.django_db(transaction=True)


def _terminate_own_backend() -> int:
    pid = connection.connection.info.backend_pid
    with psycopg.connect(app_db_dsn(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    return pid


@pytest.fixture
def postgres():
    if not app_db_is_postgres() or not prepared.enabled():
        pytest.skip("the prepared path runs on PostgreSQL")


def test_a_kept_connection_the_server_ended_is_replaced_at_the_first_prepared_statement(postgres):
    assert prepared.fetchall("SELECT 1", []) == [(1,)]
    pid = _terminate_own_backend()  # a database restart, for this session
    connection.close_if_unusable_or_obsolete()  # a request or task begins (Django's signal handlers)
    assert prepared.fetchall("SELECT 1", []) == [(1,)]
    assert connection.connection.info.backend_pid != pid


# Not a plain SELECT: what may write (an UPDATE, a data-modifying WITH) is
# never repeated by the prepared path.
MAY_WRITE = "WITH one AS (SELECT 1) SELECT * FROM one"


def test_a_connection_a_statement_failed_on_is_replaced_at_the_next_one(postgres):
    assert prepared.fetchall("SELECT 1", []) == [(1,)]  # the task's health check is done
    pid = _terminate_own_backend()
    with pytest.raises(OperationalError):
        prepared.fetchall(MAY_WRITE, [])
    # A long turn goes on: its next statement runs on a new connection.
    assert prepared.fetchall(MAY_WRITE, []) == [(1,)]
    assert connection.connection.info.backend_pid != pid


def test_a_read_that_finds_its_connection_lost_runs_again_on_a_new_one(postgres):
    assert prepared.fetchall("SELECT 1", []) == [(1,)]
    pid = _terminate_own_backend()
    assert prepared.fetchall("SELECT 2", []) == [(2,)]
    assert connection.connection.info.backend_pid != pid
    raised = []
    with pytest.raises(OperationalError), transaction.atomic():
        _terminate_own_backend()
        try:
            prepared.fetchall("SELECT 3", [])
        except OperationalError:  # inside a transaction: lost with it, not read again
            raised.append(True)
            raise
    assert raised


def test_a_repeatable_write_waits_for_the_database_and_only_outside_a_transaction():
    tries = []

    def write():
        tries.append(1)
        if len(tries) < 3:
            raise OperationalError("server closed the connection unexpectedly")
        return "stored"

    assert until_answered(write, seconds=10, what="test") == "stored"
    assert len(tries) == 3
    tries.clear()
    with transaction.atomic(), pytest.raises(OperationalError):
        until_answered(write, seconds=10, what="test")  # the transaction is lost with its connection
    assert len(tries) == 1

    def down():
        raise OperationalError("could not connect to server")

    with pytest.raises(OperationalError):
        until_answered(down, seconds=0.5, what="test")  # given up after its time: recovery takes over


def test_a_deadline_wakes_a_reader_blocked_on_a_silent_connection():
    ours, theirs = socket.socketpair()
    got = []
    with ours, theirs:
        reader = threading.Thread(target=lambda: got.append(ours.recv(10)))
        with Deadline(0.3, ours.fileno()) as deadline:
            reader.start()
            reader.join(10)
        assert got == [b""] and deadline.expired  # woken: the peer never said a word
        assert ours.fileno() != -1  # shut down, not closed: the caller closes it


def test_a_call_that_ends_in_time_is_left_alone():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        with Deadline(0.2, ours.fileno()) as deadline:
            theirs.sendall(b"x")
            assert ours.recv(1) == b"x"
        threading.Event().wait(0.4)
        theirs.sendall(b"y")
        assert ours.recv(1) == b"y" and not deadline.expired
    assert Limits(connect_seconds=2, margin_seconds=3).deadline_seconds(4000) == 7
