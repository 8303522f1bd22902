"""Personal data never reaches the model. Tool results are masked
before they become model input; tokens are stable per conversation; the
server puts originals back only into SQL it runs; reveal is permissioned and
audited."""

from __future__ import annotations

import io
import itertools
import json
import re
import sqlite3
import sys

import pytest
from django.core.management import call_command
from django.urls import reverse

from audit.models import AuditEvent, ToolCallAudit
from chat.agent import TokenSafeStream
from chat.models import VaultEntry
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from governance.models import ColumnClassification, DbConnection, DbGrant, LlmModel, MaskStat, Role
from governance.schema_analysis import column_classification_set, schema_analysis_run
from governance.services import db_connection_set_stored_dsn, feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.support.fake_llm import FakeLLMServer, text, tool_call

pytestmark = pytest.mark.django_db

CUSTOMERS = [
    (1, "김민준", "010-1234-5678", "minjun@example.co.kr", "서울"),
    (2, "이서연", "010-2222-3333", "seoyeon@example.com", "부산"),
    (3, "박지후", "010-4444-5555", "jihoo@example.kr", "서울"),
]
MEMOS = [
    (1, 1, "환불", "고객이 국민은행 123456-01-234567 로 환불 요청, 연락처 010-9876-5432"),
    (2, 1, "환불", "재요청. 이메일 other.person@example.org 로 회신 바람"),
    (3, 3, "배송", "배송 지연 문의"),
]
ORDERS = [(1, 1, 50000), (2, 1, 12000), (3, 3, 7000)]
PERSONAL_VALUES = (
    [c[1] for c in CUSTOMERS]
    + [c[2] for c in CUSTOMERS]
    + [c[3] for c in CUSTOMERS]
    + ["123456-01-234567", "010-9876-5432", "other.person@example.org", "01012345678", "01098765432"]
)


@pytest.fixture
def company_db(tmp_path) -> str:
    path = tmp_path / "company.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, phone TEXT, email TEXT, city TEXT)")
        conn.execute(
            "CREATE TABLE consultations (id INTEGER PRIMARY KEY, customer_id INTEGER, category TEXT, memo TEXT)"
        )
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?, ?)", CUSTOMERS)
        conn.executemany("INSERT INTO consultations VALUES (?, ?, ?, ?)", MEMOS)
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", ORDERS)
    return f"sqlite:///{path}"


@pytest.fixture
def fake():
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def world(db, fake, company_db, django_user_model):
    install_config_sync(
        config=parse_install_config(
            f'[[providers]]\nname="p"\nkind="openai"\ntier="private"\nbase_url="{fake.base_url}"\nmodels=["m"]\n'
        )
    )
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="m"))
    user = django_user_model.objects.create_user("agent", password="pw-agent-123")
    role = Role.objects.create(name="cs")
    role.users.add(user)
    crm = DbConnection.objects.create(name="crm", engine="sqlite", business_summary="고객 상담 DB")
    db_connection_set_stored_dsn(connection=crm, dsn=company_db)
    DbGrant.objects.create(role=role, connection=crm, whole_database=True)
    schema_analysis_run(connection_id=crm.pk)
    return {"user": user, "role": role, "crm": crm}


def run_turn(conversation, user, text_):
    turn = turn_start(conversation=conversation, user=user, text=text_, model=None)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == "completed", turn.error
    return turn


def tool_results(body: dict) -> list[dict]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def test_schema_analysis_classifies_by_name_and_values(world):
    kinds = dict(
        ((c.table_name, c.column_name), c.pii_kind)
        for c in ColumnClassification.objects.filter(connection=world["crm"])
    )
    assert kinds[("customers", "name")] == "name"
    assert kinds[("customers", "phone")] == "phone"
    assert kinds[("customers", "email")] == "email"
    assert kinds[("customers", "city")] == ""
    assert kinds[("consultations", "memo")] == ""  # free text: the detectors catch values at query time
    assert kinds[("orders", "amount")] == ""


def test_multi_turn_conversation_never_sends_personal_values(world, fake):
    user = world["user"]
    fake.script = [
        tool_call("run_sql", {"connection": "crm", "sql": "SELECT * FROM customers ORDER BY id"}, "c1"),
        text("고객 목록을 확인했습니다."),
        tool_call(
            "run_sql",
            {
                "connection": "crm",
                "sql": "SELECT c.name, s.memo FROM consultations s JOIN customers c ON c.id = s.customer_id",
            },
            "c2",
        ),
        text("상담 메모를 확인했습니다."),
        # The follow-up uses the token the model saw for 김민준's phone.
        tool_call(
            "run_sql",
            {
                "connection": "crm",
                "sql": "SELECT o.id, o.amount FROM orders o JOIN customers c ON c.id = o.customer_id "
                "WHERE c.phone = '[전화번호-1]' ORDER BY o.id",
            },
            "c3",
        ),
        text("그 고객의 주문은 2건입니다."),
        tool_call("run_sql", {"connection": "crm", "sql": "SELECT count(*) AS n, max(phone) FROM customers"}, "c4"),
        text("끝"),
    ]
    conversation = conversation_create(owner=user)
    run_turn(conversation, user, "고객 목록 보여줘")
    run_turn(conversation, user, "상담 메모 요약해줘")
    typed = "그 고객의 지난 주문도 보여 줘"
    run_turn(conversation, user, typed)
    run_turn(conversation, user, "고객 수와 최대 전화번호")

    everything = fake.all_request_text()
    leaked = [v for v in PERSONAL_VALUES if v in everything]
    assert leaked == []
    first = tool_results(fake.requests[1])[0]
    assert first["rows"][0] == [1, "[이름-1]", "[전화번호-1]", "[이메일-1]", "서울"]
    memos = tool_results(fake.requests[3])[-1]["rows"]
    assert memos[0][0] == "[이름-1]" and "[계좌번호-1]" in memos[0][1] and "[전화번호-4]" in memos[0][1]
    assert "[이메일-4]" in memos[1][1]
    # The follow-up reached the database with the original and returned rows.
    orders = tool_results(fake.requests[5])[-1]
    assert orders["rows"] == [[1, 50000], [2, 12000]]
    audit_sql = ToolCallAudit.objects.filter(sql_text__contains="[전화번호-1]").get()
    assert audit_sql.call_outcome == "success" and audit_sql.call_row_count == 2  # kept as the model wrote it
    counted = tool_results(fake.requests[7])[-1]["rows"][0]
    assert counted[0] == 3 and counted[1].startswith("[전화번호-")
    # Statistics per column and kind.
    stat = MaskStat.objects.get(table_name="customers", column_name="phone", pii_kind="phone")
    assert stat.count >= 4


def test_token_from_another_conversation_is_not_reidentified_and_delete_removes_vault(world, fake, client):
    user = world["user"]
    fake.script = [
        tool_call("run_sql", {"connection": "crm", "sql": "SELECT phone FROM customers WHERE id = 3"}, "a"),
        text("ok"),
        tool_call(
            "run_sql", {"connection": "crm", "sql": "SELECT id FROM customers WHERE phone = '[전화번호-1]'"}, "b"
        ),
        text("ok"),
    ]
    first = conversation_create(owner=user)
    run_turn(first, user, "3번 고객 전화번호")
    assert tool_results(fake.requests[1])[0]["rows"] == [["[전화번호-1]"]]  # 박지후's phone in conversation 1
    second = conversation_create(owner=user)
    run_turn(second, user, "그 번호로 찾아줘")
    assert tool_results(fake.requests[3])[0]["rows"] == []  # not re-identified: no such literal in the DB
    assert VaultEntry.objects.filter(conversation=first).count() == 1
    client.force_login(user)
    assert client.delete(reverse("chat:conversation-detail", args=[first.pk])).status_code == 204
    assert VaultEntry.objects.filter(conversation_id=first.pk).count() == 0


def test_reveal_needs_the_permission_and_is_audited_without_the_value(world, fake, client):
    user = world["user"]
    fake.script = [
        tool_call("run_sql", {"connection": "crm", "sql": "SELECT phone FROM customers WHERE id = 1"}),
        text("x"),
    ]
    conversation = conversation_create(owner=user)
    run_turn(conversation, user, "1번 고객 전화번호")
    client.force_login(user)
    url = reverse("chat:conversation-reveal", args=[conversation.pk])
    refused = client.post(url, {"token": "[전화번호-1]"}, content_type="application/json")
    assert refused.status_code == 403
    world["role"].can_view_raw_pii = True
    world["role"].save()
    allowed = client.post(url, {"token": "[전화번호-1]"}, content_type="application/json")
    assert allowed.status_code == 200 and allowed.json()["original"] == "010-1234-5678"
    events = list(AuditEvent.objects.filter(kind__startswith="pii_reveal").order_by("id"))
    assert [e.kind for e in events] == ["pii_reveal_refused", "pii_reveal"]
    assert all(e.details["token_kind"] == "phone" and e.resource_id == str(conversation.pk) for e in events)
    assert "010-1234-5678" not in json.dumps([e.details for e in events]) + "".join(e.user_agent for e in events)


def test_manual_classification_survives_rescan_and_changes_the_next_query(world, fake, rf):
    crm = world["crm"]
    city = ColumnClassification.objects.get(connection=crm, table_name="customers", column_name="city")
    request = rf.post("/")
    request.user = world["user"]
    column_classification_set(classification=city, pii_kind="address", request=request)
    phone = ColumnClassification.objects.get(connection=crm, table_name="customers", column_name="phone")
    column_classification_set(classification=phone, pii_kind="", request=request)  # downgrade: no longer masked whole
    schema_analysis_run(connection_id=crm.pk)
    city.refresh_from_db()
    assert (city.pii_kind, city.source) == ("address", "manual")
    assert AuditEvent.objects.filter(kind="classification_set", resource_kind="column_classification").count() == 2
    fake.script = [
        tool_call("run_sql", {"connection": "crm", "sql": "SELECT city FROM customers WHERE id = 1"}),
        text("x"),
    ]
    run_turn(conversation_create(owner=world["user"]), world["user"], "도시")
    assert tool_results(fake.requests[1])[0]["rows"] == [["[주소-1]"]]


def test_user_text_is_not_masked(world, fake):
    fake.script = [text("네")]
    run_turn(conversation_create(owner=world["user"]), world["user"], "010-1234-5678 고객 찾아줘")
    assert fake.requests[0]["messages"][-1]["content"] == "010-1234-5678 고객 찾아줘"


def test_token_split_across_deltas_is_sent_whole():
    sent: list[str] = []
    stream = TokenSafeStream(sent.append)
    for piece in ["고객 [전화", "번호-", "3] 님의 a[1] 배열 [", "이메일-12", "]"]:
        stream.feed(piece)
    stream.flush()
    tokens = [t for chunk in sent for t in re.findall(r"\[[^\]]*\]?", chunk)]
    assert "[전화번호-3]" in tokens and "[이메일-12]" in tokens
    assert "".join(sent) == "고객 [전화번호-3] 님의 a[1] 배열 [이메일-12]"


def test_pii_mask_cli_masks_line_for_line(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("연락처 010-1234-5678\n메일 a@b.co.kr, 다시 010 1234 5678\n"))
    out = io.StringIO()
    call_command("pii_mask", stdout=out)
    assert out.getvalue().splitlines() == ["연락처 [전화번호-1]", "메일 [이메일-1], 다시 [전화번호-1]"]


def test_schema_analysis_start_is_an_admin_event_and_writes_no_tool_call_rows(world, client, django_user_model):
    admin = django_user_model.objects.create_superuser("root", password="pw-root-123")
    client.force_login(admin)
    before = ToolCallAudit.objects.count()
    response = client.post(
        reverse("admin:governance_dbconnection_changelist"),
        {"action": "analyse_schema", "_selected_action": [world["crm"].pk]},
        follow=True,
    )
    assert response.status_code == 200
    event = AuditEvent.objects.get(kind="analysis_started")
    assert (event.actor_username, event.resource_id, event.details) == (
        "root",
        str(world["crm"].pk),
        {"connection": "crm"},
    )
    assert ToolCallAudit.objects.count() == before
    assert ColumnClassification.objects.filter(connection=world["crm"], pii_kind="phone").exists()


def test_no_lineage_at_all_masks_every_column(world, monkeypatch):
    """If lineage yields nothing, a connection with personal-data columns gets
    every output column masked (fail closed), not just the detectors."""
    import uuid as uuid_

    from chat.context import TurnContext
    from chat.executor import execute_tool_call

    monkeypatch.setattr("chat.executor.tools.sql.classify_outputs", lambda *args, **kwargs: [])
    conversation = conversation_create(owner=world["user"])
    ctx = TurnContext(
        user_id=world["user"].pk,
        username="agent",
        tier="private",
        model_name="m",
        provider_name="p",
        conversation_id=conversation.pk,
        turn_id=uuid_.uuid4().int % 1000,
    )
    result = execute_tool_call(
        ctx, name="run_sql", arguments=json.dumps({"connection": "crm", "sql": "SELECT name, city FROM customers"})
    )
    rows = json.loads(result.content)["rows"]
    assert all(cell.startswith("[") for row in rows for cell in row)


# --- the analysed schema is cached per classification revision ---------------------


_TURNS = itertools.count(1)


def _run_sql(world, sql: str):
    from chat.context import TurnContext
    from chat.executor import execute_tool_call

    ctx = TurnContext(
        user_id=world["user"].pk,
        username="agent",
        tier="private",
        model_name="m",
        provider_name="p",
        conversation_id=world.setdefault("conversation", conversation_create(owner=world["user"])).pk,
        # A new turn per call: inside the test's transaction the commit hooks
        # that keep a turn's cached known values current never fire.
        turn_id=next(_TURNS),
    )
    result = execute_tool_call(ctx, name="run_sql", arguments=json.dumps({"connection": "crm", "sql": sql}))
    return json.loads(result.content)["rows"]


def _classification_queries(queries) -> int:
    return sum("governance_columnclassification" in q["sql"] for q in queries)


def _revision() -> str | None:
    from governance.models import ClassificationRevision

    return ClassificationRevision.objects.filter(pk=1).values_list("token", flat=True).first()


def test_every_kind_of_classification_change_gives_a_new_revision(world):
    from django.db import connection

    seen = {_revision()}
    assert None not in seen
    city = ColumnClassification.objects.get(connection=world["crm"], table_name="customers", column_name="city")
    city.pii_kind = "address"
    city.save()  # ORM save
    seen.add(_revision())
    ColumnClassification.objects.filter(pk=city.pk).update(pii_kind="")  # bulk update: no signals
    seen.add(_revision())
    with connection.cursor() as cursor:  # direct SQL
        cursor.execute("UPDATE governance_columnclassification SET pii_kind = 'name' WHERE id = %s", [city.pk])
    seen.add(_revision())
    ColumnClassification.objects.create(
        connection=world["crm"], table_name="extra", column_name="x", source="auto", state="suggested"
    )
    seen.add(_revision())
    ColumnClassification.objects.filter(table_name="extra").delete()
    seen.add(_revision())
    assert len(seen) == 6 and None not in seen


def test_schema_is_read_once_per_revision_and_an_edit_takes_effect_on_the_next_query(world, rf):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    sql = "SELECT city FROM customers WHERE id = 1"
    assert _run_sql(world, sql) == [["서울"]]  # fills the cache for this revision
    with CaptureQueriesContext(connection) as queries:
        assert _run_sql(world, sql) == [["서울"]]
    assert _classification_queries(queries.captured_queries) == 0  # served from the cache

    city = ColumnClassification.objects.get(connection=world["crm"], table_name="customers", column_name="city")
    request = rf.post("/")
    request.user = world["user"]
    column_classification_set(classification=city, pii_kind="address", request=request)
    with CaptureQueriesContext(connection) as queries:
        assert _run_sql(world, sql) == [["[주소-1]"]]  # the very next query masks it
    assert _classification_queries(queries.captured_queries) == 1  # new revision: read again

    ColumnClassification.objects.filter(pk=city.pk).update(pii_kind="")  # bulk downgrade
    # This conversation's vault now holds "서울": known values keep it masked here...
    assert _run_sql(world, sql) == [["[주소-1]"]]
    # ...while a new conversation, whose vault is empty, sees the downgrade.
    world["conversation"] = conversation_create(owner=world["user"])
    assert _run_sql(world, sql) == [["서울"]]


def test_without_a_revision_row_the_schema_is_read_on_every_call(world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from governance.models import ClassificationRevision

    ClassificationRevision.objects.all().delete()  # e.g. a flushed database: nothing may be cached
    sql = "SELECT name FROM customers WHERE id = 1"
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            assert _run_sql(world, sql) == [["[이름-1]"]]
        assert _classification_queries(queries.captured_queries) == 1


def test_mask_statistics_add_up_in_one_statement(world):
    from datetime import timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from governance.pii.masking import MaskCounts
    from governance.schema_analysis import mask_stats_record

    crm = world["crm"]
    counts = MaskCounts({("customers", "phone", "phone"): 3, ("customers", "name", "name"): 2, ("", "", "email"): 1})
    with CaptureQueriesContext(connection) as queries:
        mask_stats_record(connection_id=crm.pk, counts=counts)
    assert len(queries.captured_queries) == 1
    mask_stats_record(connection_id=crm.pk, counts=MaskCounts({("customers", "phone", "phone"): 4}))
    stats = {
        (s.table_name, s.column_name, s.pii_kind): s.count
        for s in MaskStat.objects.filter(connection_id_value=crm.pk, day=timezone.localdate())
    }
    assert stats == {("customers", "phone", "phone"): 7, ("customers", "name", "name"): 2, ("", "", "email"): 1}
    # Another day is another row.
    MaskStat.objects.filter(connection_id_value=crm.pk).update(day=timezone.localdate() - timedelta(days=1))
    mask_stats_record(connection_id=crm.pk, counts=MaskCounts({("customers", "phone", "phone"): 1}))
    assert MaskStat.objects.get(connection_id_value=crm.pk, day=timezone.localdate()).count == 1


def test_a_result_full_of_personal_values_costs_a_bounded_number_of_queries(world):
    """DbVault.prefetch: the vault is asked once per result, not once per value."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chat.models import VaultEntry

    sql = "SELECT name, phone, email FROM customers"
    with CaptureQueriesContext(connection) as queries:
        first = _run_sql(world, sql)
    vault_queries = [q for q in queries.captured_queries if "chat_vaultentry" in q["sql"]]
    # the known-value refresh (rows added since the last call), one lookup,
    # and per kind (name, phone, email) one MAX and one multi-row INSERT
    assert len(vault_queries) <= 1 + 1 + 2 * 3, [q["sql"][:80] for q in vault_queries]
    assert VaultEntry.objects.filter(conversation=world["conversation"]).count() == 9
    assert first[0] == ["[이름-1]", "[전화번호-1]", "[이메일-1]"]
    assert first[2] == ["[이름-3]", "[전화번호-3]", "[이메일-3]"]
    # The same values again: the same tokens, the known-value refresh and one lookup at most.
    with CaptureQueriesContext(connection) as queries:
        assert _run_sql(world, sql) == first
    assert sum("chat_vaultentry" in q["sql"] for q in queries.captured_queries) <= 2
    assert not any(value in json.dumps(first, ensure_ascii=False) for value in PERSONAL_VALUES)


def test_prefetch_that_loses_a_race_falls_back_to_one_by_one(world, monkeypatch):
    from django.db import IntegrityError

    from chat.models import VaultEntry
    from chat.vault import DbVault

    conversation = conversation_create(owner=world["user"])
    first = DbVault(conversation.pk)
    assert first.token_for("phone", "010-1111-2222") == "[전화번호-1]"

    def lost_race(*args, **kwargs):
        raise IntegrityError("another worker took the number")

    monkeypatch.setattr(VaultEntry.objects, "bulk_create", lost_race)
    vault = DbVault(conversation.pk)
    vault.prefetch([("phone", "010-1111-2222"), ("phone", "010-3333-4444")])
    assert vault.token_for("phone", "010 1111 2222") == "[전화번호-1]"  # known: found by the prefetch
    assert vault.token_for("phone", "010-3333-4444") == "[전화번호-2]"  # allocated one by one
    assert VaultEntry.objects.filter(conversation=conversation).count() == 2


@pytest.mark.embedded
def test_sqlite_triggers_come_back_after_a_migration_rebuilds_a_table(world):
    """SQLite loses a table's triggers when a migration rebuilds it; every
    migrate re-creates them (post_migrate), so the schema cache cannot go
    stale and the audit and exposure guards cannot vanish."""
    from django.core.management.sql import emit_post_migrate_signal
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL keeps triggers through ALTER TABLE (this runs in make test's SQLite pass)")

    def triggers() -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            return {name for (name,) in cursor.fetchall()}

    installed = triggers()
    assert {"owlai_classification_revision_update", "owlai_exposure_one_way_governance_dbconnection"} <= installed
    with connection.cursor() as cursor:  # what a table rebuild does to them
        for name in installed:
            cursor.execute(f"DROP TRIGGER {name}")
    before = _revision()
    ColumnClassification.objects.filter(connection=world["crm"], column_name="city").update(pii_kind="address")
    assert _revision() == before  # no trigger: the cache would now go stale

    emit_post_migrate_signal(verbosity=0, interactive=False, db="default")
    assert triggers() == installed
    ColumnClassification.objects.filter(connection=world["crm"], column_name="city").update(pii_kind="")
    assert _revision() != before
