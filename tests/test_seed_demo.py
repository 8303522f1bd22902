"""The demo company builder and the `seed_demo` management command."""

from __future__ import annotations

import re
import sqlite3
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from governance.demo_company import REFERENCE_DATE, REPEAT_REFUNDERS, build_demo_company_db
from governance.models import DbConnection, DbGrant, Feature, FeatureDefault, LlmModel, Role
from governance.services import db_connection_dsn, feature_default_set
from governance.sql.execute import execute_readonly
from owlai.install_config import InstallConfig, ModelSpec, ProviderSpec

TABLES = ("customers", "consultations", "orders")
PHONE = re.compile(r"010-\d{4}-\d{4}")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
ACCOUNT = re.compile(r"(국민은행|신한은행|우리은행|하나은행|농협|카카오뱅크|기업은행) \d{3,6}(-\d{2,7}){2,3}")


def _rows(path, table: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY id").fetchall()
    finally:
        conn.close()


def _query(path, sql: str, *params) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


# --- builder -------------------------------------------------------------------


def test_builder_counts_and_determinism(tmp_path):
    first, second, other = tmp_path / "a.sqlite3", tmp_path / "b.sqlite3", tmp_path / "c.sqlite3"
    counts = build_demo_company_db(first, reference_date=REFERENCE_DATE)
    assert counts == {"customers": 200, "consultations": 600, "orders": 1000}
    assert build_demo_company_db(second, seed=7, reference_date=REFERENCE_DATE) == counts
    build_demo_company_db(other, seed=8, reference_date=REFERENCE_DATE)
    for table in TABLES:
        assert len(_rows(first, table)) == counts[table]
        assert _rows(first, table) == _rows(second, table)
    assert _rows(first, "customers")[:5] != _rows(other, "customers")[:5]
    # Only the finished file remains: no temporary or journal files.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sqlite3", "b.sqlite3", "c.sqlite3"]


def test_builder_replaces_existing_file(tmp_path):
    path = tmp_path / "demo.sqlite3"
    path.write_text("not a database")
    build_demo_company_db(path, reference_date=REFERENCE_DATE)
    assert _query(path, "SELECT count(*) FROM customers") == [(200,)]
    # Foreign keys are indexed.
    indexes = {row[0] for row in _query(path, "SELECT sql FROM sqlite_master WHERE type = 'index'")}
    assert any("consultations(customer_id)" in (sql or "") for sql in indexes)
    assert any("orders(customer_id)" in (sql or "") for sql in indexes)


def test_builder_data_looks_korean_and_consistent(tmp_path):
    path = tmp_path / "demo.sqlite3"
    build_demo_company_db(path, reference_date=REFERENCE_DATE)
    customers = _rows(path, "customers")
    family_names = set("김이박최정강조윤장임한오서신권황안송류홍")
    assert all(name[0] in family_names and 2 <= len(name) <= 4 for _id, name, *_rest in customers)
    assert all(re.fullmatch(r"010-\d{4}-\d{4}", row[2]) for row in customers)
    assert len({row[2] for row in customers}) == len(customers)  # phones are unique
    assert all(EMAIL.fullmatch(row[3]) for row in customers)
    categories = {row[0] for row in _query(path, "SELECT DISTINCT category FROM consultations")}
    assert categories == {"환불", "배송", "교환", "결제", "기타"}
    # Every row refers to an existing customer and is dated before the reference date.
    assert _query(path, "SELECT count(*) FROM consultations WHERE customer_id NOT IN (SELECT id FROM customers)") == [
        (0,)
    ]
    assert _query(path, "SELECT count(*) FROM orders WHERE customer_id NOT IN (SELECT id FROM customers)") == [(0,)]
    assert _query(path, "SELECT max(created_at) FROM consultations")[0][0] < REFERENCE_DATE.isoformat()
    assert _query(path, "SELECT max(ordered_on) FROM orders")[0][0] < REFERENCE_DATE.isoformat()
    assert _query(path, "SELECT min(amount) > 0, typeof(amount) FROM orders GROUP BY typeof(amount)") == [
        (1, "integer")
    ]


def test_memos_contain_personal_data_patterns(tmp_path):
    path = tmp_path / "demo.sqlite3"
    build_demo_company_db(path, reference_date=REFERENCE_DATE)
    memos = [row[0] for row in _query(path, "SELECT memo FROM consultations")]
    with_phone = [m for m in memos if PHONE.search(m)]
    with_email = [m for m in memos if EMAIL.search(m)]
    with_account = [m for m in memos if ACCOUNT.search(m)]
    assert len(with_phone) >= 20
    assert len(with_email) >= 10
    assert len(with_account) >= 10
    # Most memos are plain notes without personal data.
    assert len(set(with_phone) | set(with_email) | set(with_account)) < len(memos) / 2
    assert any(re.search(r"국민은행 \d{6}-\d{2}-\d{6}", m) for m in memos)


def test_repeat_refunders_in_the_last_week(tmp_path):
    path = tmp_path / "demo.sqlite3"
    build_demo_company_db(path, reference_date=REFERENCE_DATE)
    week_start = (REFERENCE_DATE - timedelta(days=7)).isoformat()
    last_week = _query(
        path,
        """
        SELECT customer_id, count(*) FROM consultations
        WHERE category = '환불' AND created_at >= ? AND created_at < ?
        GROUP BY customer_id HAVING count(*) > 3
        """,
        week_start,
        REFERENCE_DATE.isoformat(),
    )
    assert len(last_week) == REPEAT_REFUNDERS
    assert all(count >= 4 for _customer, count in last_week)
    # Over two weeks there are more (near misses with a fourth refund the week before).
    two_weeks = _query(
        path,
        """
        SELECT customer_id FROM consultations
        WHERE category = '환불' AND created_at >= ?
        GROUP BY customer_id HAVING count(*) > 3
        """,
        (REFERENCE_DATE - timedelta(days=14)).isoformat(),
    )
    assert len(two_weeks) > len(last_week)


# --- seed_demo command -----------------------------------------------------------


@pytest.fixture
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


@pytest.mark.django_db
def test_seed_demo_creates_everything(var_dir):
    output = _seed()
    path = var_dir / "demo_company.sqlite3"
    assert path.exists()
    assert "admin" in output and "staff" in output

    user_model = get_user_model()
    admin = user_model.objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff and admin.check_password("admin")
    staff = user_model.objects.get(username="staff")
    assert not staff.is_staff and not staff.is_superuser and staff.check_password("staff")

    connection = DbConnection.objects.get(name="demo_company")
    assert connection.engine == "sqlite"
    assert connection.business_summary == "데모 회사 고객·상담·주문 DB: 고객 정보, 상담 이력(메모 포함), 주문 내역"
    assert not connection.dsn_env and connection.dsn_encrypted
    assert str(path.resolve()) not in connection.dsn_encrypted  # stored encrypted

    sales = Role.objects.get(name="영업팀")
    assert set(sales.users.values_list("username", flat=True)) == {"admin", "staff", "manager"}
    sales_grant = DbGrant.objects.get(role=sales, connection=connection)
    assert sales_grant.whole_database is True
    support = Role.objects.get(name="고객센터")
    assert not support.users.exists()
    support_grant = DbGrant.objects.get(role=support, connection=connection)
    assert support_grant.whole_database is False
    assert sorted(support_grant.tables) == ["consultations", "orders"]

    chat_default = FeatureDefault.objects.get(feature=Feature.CHAT)
    assert chat_default.model is not None
    assert chat_default.model.provider.kind == "offline-demo"


@pytest.mark.django_db
def test_stored_dsn_runs_through_the_executor(var_dir):
    _seed()
    connection = DbConnection.objects.get(name="demo_company")
    dsn = db_connection_dsn(connection=connection)
    assert dsn == "sqlite:///" + str((var_dir / "demo_company.sqlite3").resolve())
    assert dsn.startswith("sqlite:////")
    result = execute_readonly(
        engine="sqlite", dsn=dsn, sql="SELECT count(*) FROM customers", row_cap=10, timeout_ms=2000
    )
    assert result.rows == [(200,)]
    assert not result.truncated


@pytest.mark.django_db
def test_seed_demo_is_idempotent(var_dir):
    _seed()
    path = var_dir / "demo_company.sqlite3"
    inode = path.stat().st_ino
    user_model = get_user_model()
    admin = user_model.objects.get(username="admin")
    admin.set_password("a-new-secret")
    admin.save()
    connection = DbConnection.objects.get(name="demo_company")
    stored = connection.dsn_encrypted

    output = _seed()

    assert path.stat().st_ino == inode  # the file is not rebuilt
    assert "already" in output or "이미" in output  # English or Korean (default) output
    assert user_model.objects.filter(username="admin").count() == 1
    assert user_model.objects.filter(username="staff").count() == 1
    admin.refresh_from_db()
    assert admin.check_password("a-new-secret")
    assert DbConnection.objects.filter(name="demo_company").count() == 1
    connection.refresh_from_db()
    assert connection.dsn_encrypted == stored  # unchanged, not re-encrypted
    assert Role.objects.filter(name="영업팀").count() == 1
    assert Role.objects.filter(name="고객센터").count() == 1
    assert DbGrant.objects.filter(connection=connection).count() == 2
    assert DbGrant.objects.get(role__name="영업팀").whole_database is True
    support_grant = DbGrant.objects.get(role__name="고객센터")
    assert support_grant.whole_database is False
    assert sorted(support_grant.tables) == ["consultations", "orders"]
    assert set(Role.objects.get(name="영업팀").users.values_list("username", flat=True)) == {
        "admin",
        "staff",
        "manager",
    }


@pytest.mark.django_db
def test_seed_demo_rebuild_replaces_the_file(var_dir):
    _seed()
    path = var_dir / "demo_company.sqlite3"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM orders")
    conn.close()
    _seed()
    assert _query(path, "SELECT count(*) FROM orders") == [(0,)]  # left alone without --rebuild
    _seed("--rebuild")
    assert _query(path, "SELECT count(*) FROM orders") == [(1000,)]


@pytest.mark.django_db
def test_seed_demo_keeps_a_chosen_chat_default(settings, var_dir):
    settings.OWLAI_INSTALL = InstallConfig(
        path="test",
        providers=(
            ProviderSpec(
                name="offline-demo",
                kind="offline-demo",
                tier="private",
                base_url="",
                api_key_env="",
                models=(ModelSpec(name="owlai-offline-demo", label="Offline demo model"),),
            ),
            ProviderSpec(
                name="onprem",
                kind="openai",
                tier="private",
                base_url="http://llm.internal.example/v1",
                api_key_env="",
                models=(ModelSpec(name="local-model", label="Local model"),),
            ),
        ),
    )
    _seed()
    assert FeatureDefault.objects.get(feature=Feature.CHAT).model.name == "owlai-offline-demo"
    local = LlmModel.objects.get(name="local-model")
    feature_default_set(feature=Feature.CHAT, model=local)
    _seed()
    assert FeatureDefault.objects.get(feature=Feature.CHAT).model == local


@pytest.mark.django_db
def test_seed_demo_without_offline_model_leaves_chat_default_empty(settings, var_dir):
    settings.OWLAI_INSTALL = InstallConfig(
        path="test",
        providers=(
            ProviderSpec(
                name="onprem",
                kind="openai",
                tier="private",
                base_url="http://llm.internal.example/v1",
                api_key_env="",
                models=(ModelSpec(name="local-model", label="Local model"),),
            ),
        ),
    )
    output = _seed()
    assert FeatureDefault.objects.get(feature=Feature.CHAT).model is None
    assert DbConnection.objects.filter(name="demo_company").exists()
    assert "admin" in output


@pytest.mark.django_db
def test_seed_demo_masks_names_from_the_first_query_and_manager_may_reveal(var_dir):
    """The schema is analysed by seed_demo itself: names (which no format
    detector finds) are tokens in the very first result, and `manager`, not
    `staff`, may reveal them (README's user table)."""
    import json

    from audit.models import AuditEvent, EventKind
    from chat.context import TurnContext
    from chat.executor import execute_tool_call
    from chat.reveal import may_reveal
    from chat.services import conversation_create
    from governance.models import ColumnClassification

    _seed()
    connection = DbConnection.objects.get(name="demo_company")
    kinds = dict(
        ColumnClassification.objects.filter(connection=connection, table_name="customers").values_list(
            "column_name", "pii_kind"
        )
    )
    assert (kinds["name"], kinds["phone"], kinds["email"], kinds["city"]) == ("name", "phone", "email", "")
    started = AuditEvent.objects.get(kind=EventKind.ANALYSIS_STARTED)
    assert started.details == {"connection": "demo_company", "trigger": "seed_demo"}

    user_model = get_user_model()
    staff, manager = user_model.objects.get(username="staff"), user_model.objects.get(username="manager")
    assert manager.check_password("manager") and not manager.is_staff
    assert may_reveal(user=manager) and not may_reveal(user=staff)

    conversation = conversation_create(owner=staff)
    ctx = TurnContext(
        user_id=staff.pk,
        username="staff",
        tier="private",
        model_name="m",
        provider_name="p",
        conversation_id=conversation.pk,
        turn_id=1,
    )
    arguments = json.dumps(
        {"connection": "demo_company", "sql": "SELECT name, city FROM customers ORDER BY id LIMIT 3"}
    )
    result = execute_tool_call(ctx, name="run_sql", arguments=arguments)
    rows = json.loads(result.content)["rows"]
    assert result.outcome == "success" and len(rows) == 3
    assert all(re.fullmatch(r"\[이름-\d+\]", name) for name, _city in rows), rows

    # A second seed keeps the analysis (and an admin's classifications) as they are.
    _seed()
    assert AuditEvent.objects.filter(kind=EventKind.ANALYSIS_STARTED).count() == 1
