"""Disposable customer databases for the free-text taint and provenance tests:
a classified `people` table, an unclassified `memos` table whose free text
holds a phone, an account, a card, a resident registration number and an
e-mail, and `parts`, whose two text columns hold values split in two.
Each engine gets its own database and a SELECT-only login."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from tests.support.customer_dbs import MYSQL_HOST, MYSQL_PORT, PG_ADMIN_URL, CustomerDb, _mysql_admin, port_open

TABLES = [
    "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, phone TEXT)",
    "CREATE TABLE memos (id INTEGER PRIMARY KEY, memo TEXT)",
    "CREATE TABLE parts (id INTEGER PRIMARY KEY, a TEXT, b TEXT)",
    "CREATE TABLE sales (id INTEGER PRIMARY KEY, ordered_on TEXT, status TEXT, amount INTEGER)",
]
ROWS = [
    "INSERT INTO people VALUES (1, '김민준', '010-2718-2818'), (2, '이서연', '010-1618-0339')",
    "INSERT INTO memos VALUES (1, '고객 연락처 010-3141-5926 로 회신'),"
    " (2, '환불 계좌 110-234-567890 (신한은행)'),"
    " (3, '카드 4111-1111-1111-1111 결제 취소'),"
    " (4, '주민번호 900101-1234568 확인 요청'),"
    " (5, '메일 hong.gildong@example.org 로 발송')",
    # A known value split over the two columns of a row; one spelled with a space
    # and a zero-width space inside, one in decomposed Hangul (NFD).
    "INSERT INTO parts VALUES (1, '010-2718', '-2818'), (2, '김', '민준'),"
    " (3, '담당 김 민준 님', 'x'), (4, '담당 김\u200b민준', 'y'),"
    " (5, '담당 \u1100\u1175\u11b7\u1106\u1175\u11ab\u110c\u116e\u11ab', 'z')",
    # Dates and statuses stored as text: codes, not free text (once the analysis has seen them).
    "INSERT INTO sales VALUES (1, '2025-10-03 09:15:00', 'paid', 100), (2, '2025-10-20 18:00:05', 'paid', 250),"
    " (3, '2025-11-02 11:11:11', 'refunded', 40)",
]
# What the memos hold, as digits (or the e-mail folded): no output may contain these.
MEMO_VALUES = ("01031415926", "110234567890", "4111111111111111", "9001011234568", "honggildongexampleorg")
SCHEMA = {
    "people": {"id": None, "name": "name", "phone": "phone"},
    "memos": {"id": None, "memo": None},
    "parts": {"id": None, "a": None, "b": None},
    "sales": {"id": None, "ordered_on": None, "status": None, "amount": None},
}


def _statements(engine: str) -> list[str]:
    statements = [*TABLES, *ROWS]
    if engine == "mysql":
        statements = [s.replace(" TEXT", " VARCHAR(200)") for s in statements]
    return statements


@pytest.fixture(scope="session")
def pg_taint_db():
    if not port_open("127.0.0.1", 5432):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    suffix = uuid.uuid4().hex[:10]
    name, reader = f"owlai_taint_{suffix}", f"owlai_taint_rd_{suffix}"
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f"CREATE ROLE \"{reader}\" LOGIN PASSWORD 'reader-pw' NOSUPERUSER NOCREATEDB NOCREATEROLE")
    admin_dsn = f"{base}/{name}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for statement in _statements("postgresql"):
            conn.execute(statement)
        conn.execute(f'REVOKE ALL ON SCHEMA public FROM PUBLIC; GRANT USAGE ON SCHEMA public TO "{reader}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{reader}"')
    host = base.split("@", 1)[1]
    yield CustomerDb("postgresql", f"postgresql://{reader}:reader-pw@{host}/{name}", admin_dsn)
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{reader}"')


@pytest.fixture(scope="session")
def mysql_taint_db():
    if not port_open(MYSQL_HOST, MYSQL_PORT):
        pytest.skip("MySQL/MariaDB is not reachable on 127.0.0.1:3306")
    suffix = uuid.uuid4().hex[:10]
    name, reader = f"owlai_taint_{suffix}", f"owlai_tr_{suffix}"
    admin = _mysql_admin()
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        cursor.execute(f"USE `{name}`")
        for statement in _statements("mysql"):
            cursor.execute(statement)
        for host in ("%", "localhost"):
            cursor.execute(f"CREATE USER '{reader}'@'{host}' IDENTIFIED BY 'reader-pw'")
            cursor.execute(f"GRANT SELECT ON `{name}`.* TO '{reader}'@'{host}'")
    yield CustomerDb(
        "mysql",
        f"mysql://{reader}:reader-pw@{MYSQL_HOST}:{MYSQL_PORT}/{name}",
        f"mysql://root@{MYSQL_HOST}:{MYSQL_PORT}/{name}",
    )
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        for host in ("%", "localhost"):
            cursor.execute(f"DROP USER IF EXISTS '{reader}'@'{host}'")
    admin.close()


@pytest.fixture
def sqlite_taint_db(tmp_path: Path):
    path = tmp_path / "taint.sqlite3"
    conn = sqlite3.connect(path)
    for statement in _statements("sqlite"):
        conn.execute(statement)
    conn.commit()
    conn.close()
    dsn = f"sqlite:///{path}"
    return CustomerDb("sqlite", dsn, dsn)
