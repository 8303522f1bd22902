"""Disposable customer databases for the guard, masking and hygiene tests.

Each fixture makes a fresh database holding the sample tables (plus a `notes`
table with free text) and a login that may only SELECT them, the way the
README tells customers to set up a connection's account. The PostgreSQL one
also has the contrib extensions whose functions an attacker would reach for
(tuple surgery, visibility maps, buffer cache, crosstab, xml2, ...), created by
the superuser, so the guard tests can prove both layers: the guard denies them,
and with the guard bypassed the SELECT-only account still changes nothing.

`fingerprint(...)` reads every table's contents through the admin connection:
equal fingerprints before and after an attack mean nothing changed.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import uuid
from pathlib import Path

import pytest

PG_ADMIN_URL = os.environ.get("OWLAI_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
MYSQL_HOST, MYSQL_PORT = "127.0.0.1", 3306

PG_CONTRIB_EXTENSIONS = (
    "pageinspect",
    "pg_surgery",
    "pg_visibility",
    "pg_buffercache",
    "pg_prewarm",
    "pgstattuple",
    "pg_freespacemap",
    "pgrowlocks",
    "amcheck",
    "tablefunc",
    "xml2",
    "ltree",
    "hstore",
    "dblink",
    "adminpack",
    "pg_stat_statements",
)

CUSTOMER_TABLES = {
    "customers": "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, phone TEXT, email TEXT, city TEXT)",
    "orders": "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER, note TEXT)",
    "notes": "CREATE TABLE notes (id INTEGER PRIMARY KEY, memo TEXT)",
}
CUSTOMER_ROWS = [
    "INSERT INTO customers VALUES "
    "(1, '김민준', '010-1234-5678', 'minjun.kim@example.com', '서울'),"
    "(2, '이서연', '010-2222-3333', 'seoyeon@example.co.kr', '부산'),"
    "(3, '박지후', '010-4444-5555', 'jihu.park@example.net', '서울')",
    "INSERT INTO orders VALUES (1, 1, 50000, 'gift wrap'), (2, 1, 12000, NULL), (3, 3, 7000, 'call first')",
    "INSERT INTO notes VALUES (1, '고객 김민준 연락처 010-1234-5678, 계좌 110-123-456789'),"
    " (2, 'no personal data here'),"
    # Values written the ways the detectors used to miss: other separators,
    # zero-width characters, Korean domains, a bank name as the only context,
    # a label after the value.
    " (3, '연락처 010/9876/5432 또는 010·8765·4321'),"
    " (4, '메일 홍길동@회사.한국, 대표 CONTACT+sales@example.com'),"
    " (5, '국민은행 123456789012 으로 입금'),"
    " (6, '010​-5555​-6666 로 연락')",
]
# Values in the tables above that are not personal data. They may still end
# up in a conversation's vault when an output is masked out of doubt (e.g. a
# translate() of the memo column), after having been shown in clear.
NON_PERSONAL_VALUES = ("no personal data here", "gift wrap", "call first", "서울", "부산")
# Personal values planted in the tables above (as written), for leak checks.
PLANTED_VALUES = (
    "김민준",
    "이서연",
    "박지후",
    "010-1234-5678",
    "010-2222-3333",
    "010-4444-5555",
    "minjun.kim@example.com",
    "seoyeon@example.co.kr",
    "jihu.park@example.net",
    "110-123-456789",
    "010/9876/5432",
    "010·8765·4321",
    "홍길동@회사.한국",
    "CONTACT+sales@example.com",
    "123456789012",
    "010​-5555​-6666",
)
# The personal-data columns of the tables above, as a classification schema.
CUSTOMER_SCHEMA = {
    "customers": {"id": None, "name": "name", "phone": "phone", "email": "email", "city": None},
    "orders": {"id": None, "customer_id": None, "amount": None, "note": None},
    "notes": {"id": None, "memo": None},
}


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class CustomerDb:
    """A disposable customer database: `dsn` is the SELECT-only account,
    `admin_dsn` the owner's (for fixtures and fingerprints only)."""

    def __init__(self, engine: str, dsn: str, admin_dsn: str) -> None:
        self.engine, self.dsn, self.admin_dsn = engine, dsn, admin_dsn

    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for table in sorted(CUSTOMER_TABLES):
            for row in self.admin_rows(f"SELECT * FROM {table} ORDER BY id"):
                digest.update(repr(row).encode())
        return digest.hexdigest()

    def admin_rows(self, sql: str) -> list[tuple]:
        if self.engine == "postgresql":
            import psycopg

            with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
                return conn.execute(sql).fetchall()
        if self.engine == "mysql":
            conn = _mysql_admin(self.admin_dsn.rsplit("/", 1)[1])
            try:
                with conn.cursor() as cursor:
                    cursor.execute(sql)
                    return list(cursor.fetchall())
            finally:
                conn.close()
        conn = sqlite3.connect(self.admin_dsn.removeprefix("sqlite:///"))
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()


@pytest.fixture(scope="session")
def pg_customer_db():
    """PostgreSQL customer DB with contrib extensions and a SELECT-only login."""
    if not port_open("127.0.0.1", 5432):
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    import psycopg

    suffix = uuid.uuid4().hex[:10]
    name, reader = f"owlai_customer_{suffix}", f"owlai_reader_{suffix}"
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        admin.execute(f"CREATE ROLE \"{reader}\" LOGIN PASSWORD 'reader-pw' NOSUPERUSER NOCREATEDB NOCREATEROLE")
    admin_dsn = f"{base}/{name}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for extension in PG_CONTRIB_EXTENSIONS:
            conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{extension}"')
        for statement in [*CUSTOMER_TABLES.values(), *CUSTOMER_ROWS]:
            conn.execute(statement)
        conn.execute("ANALYZE")  # fills pg_stats: the statistics catalogs then hold values
        conn.execute(f'REVOKE ALL ON SCHEMA public FROM PUBLIC; GRANT USAGE ON SCHEMA public TO "{reader}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA public TO "{reader}"')
    host = base.split("@", 1)[1]
    yield CustomerDb("postgresql", f"postgresql://{reader}:reader-pw@{host}/{name}", admin_dsn)
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'DROP ROLE IF EXISTS "{reader}"')


def _mysql_admin(database: str | None = None):
    import pymysql

    return pymysql.connect(
        host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=database, autocommit=True, charset="utf8mb4"
    )


@pytest.fixture(scope="session")
def mysql_customer_db():
    """MariaDB/MySQL customer DB with a SELECT-only login."""
    if not port_open(MYSQL_HOST, MYSQL_PORT):
        pytest.skip("MySQL/MariaDB is not reachable on 127.0.0.1:3306")
    suffix = uuid.uuid4().hex[:10]
    name, reader = f"owlai_customer_{suffix}", f"owlai_rd_{suffix}"
    admin = _mysql_admin()
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        cursor.execute(f"USE `{name}`")
        for statement in [*CUSTOMER_TABLES.values(), *CUSTOMER_ROWS]:
            cursor.execute(statement.replace(" TEXT", " VARCHAR(200)"))
        cursor.execute(f"ANALYZE TABLE {', '.join(CUSTOMER_TABLES)}")
        cursor.execute(f"CREATE USER '{reader}'@'%' IDENTIFIED BY 'reader-pw'")
        cursor.execute(f"CREATE USER '{reader}'@'localhost' IDENTIFIED BY 'reader-pw'")
        cursor.execute(f"GRANT SELECT ON `{name}`.* TO '{reader}'@'%'")
        cursor.execute(f"GRANT SELECT ON `{name}`.* TO '{reader}'@'localhost'")
    yield CustomerDb(
        "mysql",
        f"mysql://{reader}:reader-pw@{MYSQL_HOST}:{MYSQL_PORT}/{name}",
        f"mysql://root@{MYSQL_HOST}:{MYSQL_PORT}/{name}",
    )
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"DROP USER IF EXISTS '{reader}'@'%'")
        cursor.execute(f"DROP USER IF EXISTS '{reader}'@'localhost'")
    admin.close()


@pytest.fixture
def sqlite_customer_db(tmp_path: Path):
    path = tmp_path / "customer.sqlite3"
    conn = sqlite3.connect(path)
    for statement in [*CUSTOMER_TABLES.values(), *CUSTOMER_ROWS]:
        conn.execute(statement)
    conn.execute("ANALYZE")  # sqlite_stat1 exists and holds statistics
    conn.commit()
    conn.close()
    dsn = f"sqlite:///{path}"
    return CustomerDb("sqlite", dsn, dsn)
