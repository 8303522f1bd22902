"""Spilled results: the file holds the masked result, never an original;
read_spill pages through the conversation's own files only, through the
same pipeline (audited, shaped), and refuses path tricks, other
conversations' files and files whose source the turn may no longer use."""

from __future__ import annotations

import json
import os

import pytest

from audit.models import ToolCallAudit
from chat.executor import spill_folder, tool_definitions
from chat.services import conversation_create
from governance.visibility import visible_resources
from tests.support.tool_world import tool_world

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]

PHONES = ["010-1234-5678", "010-2222-3333", "010-4444-5555"]


@pytest.fixture
def world(personas, settings, tmp_path):
    return tool_world(personas, settings, tmp_path)


def read_spill(world, arguments, **context):
    return world.call("read_spill", arguments, **context)


def test_a_big_result_is_spilled_masked_and_previewed(world):
    preview = world.spill()
    spilled = preview["spilled"]
    assert (spilled["total"], spilled["shown"], len(preview["rows"])) == (3, 1, 1)
    assert "read_spill" in spilled["note"]
    path = spill_folder(world.conversation.pk) / spilled["file"]
    on_disk = path.read_text(encoding="utf-8")
    # Written after masking: the file holds tokens, never an original.
    assert not any(phone in on_disk for phone in PHONES)
    assert "[전화번호-" in on_disk
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    record = json.loads(on_disk)
    assert record["origin"] == {"tool": "run_sql", "target": "sales"}
    assert [row[0] for row in record["result"]["rows"]] == [1, 2, 3]


def test_read_spill_pages_through_the_file_and_is_audited(world):
    file = world.spill()["spilled"]["file"]
    page, outcome = read_spill(world, {"file": file, "offset": 1, "limit": 2})
    assert outcome == "success", page
    assert [row[0] for row in page["rows"]] == [2, 3]
    assert (page["offset"], page["returned"], page["total"], page["file"]) == (1, 2, 3, file)
    assert page["columns"] == ["id", "name", "phone", "city"]
    assert not any(phone in json.dumps(page) for phone in PHONES)
    past_end, outcome = read_spill(world, {"file": file, "offset": 5})
    assert outcome == "success" and past_end["rows"] == [] and past_end["returned"] == 0
    rows = list(ToolCallAudit.objects.filter(tool="read_spill").order_by("id"))
    assert [(r.outcome, r.call_outcome, r.call_row_count) for r in rows] == [
        ("started", "success", 2),
        ("started", "success", 0),
    ]
    assert {(r.resource_kind, r.resource_name, r.sql_text) for r in rows} == {("spill_file", file, "")}


def test_a_page_is_shaped_again_with_what_the_vault_learnt_since(world):
    from chat.vault import DbVault

    file = world.spill()["spilled"]["file"]
    page, _ = read_spill(world, {"file": file, "offset": 0, "limit": 1})
    assert page["rows"][0][1] == "김민준"  # names are not classified on this connection
    token = DbVault(world.conversation.pk).token_for("name", "김민준")
    page, _ = read_spill(world, {"file": file, "offset": 0, "limit": 1})
    assert page["rows"][0][1] == token


def test_a_page_fits_the_context_budget(world, settings):
    file = world.spill()["spilled"]["file"]
    settings.OWLAI_SPILL_CHARS = 150
    page, outcome = read_spill(world, {"file": file, "offset": 0, "limit": 200})
    assert outcome == "success" and 1 <= page["returned"] < 3
    assert "spilled" not in page  # a page is never spilled again


def test_read_spill_is_offered_once_the_conversation_has_a_spilled_result(world):
    ctx = world.context()
    resources = visible_resources(user_id=ctx.user_id, tier=ctx.tier)

    def names():
        return [d["function"]["name"] for d in tool_definitions(ctx, resources)]

    assert names() == ["run_sql", "search_documents"]
    world.spill()
    assert names() == ["run_sql", "search_documents", "read_spill"]


@pytest.mark.parametrize(
    "file",
    [
        "../../../etc/passwd",
        "/etc/passwd",
        "turn1-deadbeef.json",  # well-formed, absent
        "turn1-deadbeef.json/../../x",
        "./turn1-deadbeef.json",
        "TURN1-DEADBEEF.JSON",
        "",
        7,
    ],
)
def test_path_tricks_read_like_a_missing_file(world, file):
    world.spill()
    payload, outcome = read_spill(world, {"file": file})
    assert outcome == "denied"
    expected = "refused: file is required" if file in ("", 7) else "refused: no spill file of that name is available"
    assert payload["error"] == expected


def test_another_conversations_file_is_not_readable(world):
    other = conversation_create(owner=world.personas.staff)
    theirs = world.spill(conversation=other)["spilled"]["file"]
    assert read_spill(world, {"file": theirs}, conversation=other)[1] == "success"
    payload, outcome = read_spill(world, {"file": theirs})
    assert outcome == "denied" and payload["error"] == "refused: no spill file of that name is available"


def test_a_link_into_another_conversation_is_not_followed(world):
    other = conversation_create(owner=world.personas.staff)
    theirs = world.spill(conversation=other)["spilled"]["file"]
    world.spill()  # makes this conversation's folder
    link = spill_folder(world.conversation.pk) / "turn1-0badf00d.json"
    os.symlink(spill_folder(other.pk) / theirs, link)
    payload, outcome = read_spill(world, {"file": link.name})
    assert outcome == "denied" and "no spill file" in payload["error"]


def test_a_file_whose_source_the_user_may_no_longer_use_is_hidden(world):
    from governance.models import DbGrant

    file = world.spill()["spilled"]["file"]
    DbGrant.objects.filter(role=world.personas.role, connection=world.personas.sales).delete()
    payload, outcome = read_spill(world, {"file": file})
    assert outcome == "denied" and payload["error"] == "refused: no spill file of that name is available"


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"offset": -1}, "offset must be"),
        ({"offset": "1"}, "offset must be"),
        ({"offset": True}, "offset must be"),
        ({"limit": 0}, "limit must be"),
        ({"limit": 201}, "limit must be"),
        ({"limit": 2.0}, "limit must be"),
    ],
)
def test_bad_offsets_and_limits_are_refused(world, arguments, reason):
    file = world.spill()["spilled"]["file"]
    payload, outcome = read_spill(world, {"file": file, **arguments})
    assert outcome == "denied" and reason in payload["error"]
    assert ToolCallAudit.objects.filter(tool="read_spill").get().outcome == "denied"


def test_a_spill_file_is_purged_with_its_conversation(world):
    from chat.retention import conversations_purge
    from chat.services import conversation_delete

    world.spill()
    folder = spill_folder(world.conversation.pk)
    assert any(folder.iterdir())
    conversation_delete(conversation=world.conversation)
    world.settings.OWLAI_CONVERSATION_DELETED_DAYS = 0
    conversations_purge()
    assert not folder.exists()
