"""A hostile MCP server's results (tests/support/mcp_server_leaky.py), one
attack per test, through the real SDK client over loopback HTTP and the
real executor: credential-bearing URLs in every place a result has, phone
numbers as JSON floats, vault values respelled (NFD, JSON escapes,
invisible characters), e-mails percent-encoded in links, and results too
big for the model. What the model would read holds none of the secrets,
in either JSON spelling."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from chat.executor import execute_tool_call
from chat.services import conversation_create
from chat.vault import DbVault
from governance.models import Role
from governance.services import install_config_sync
from owlai.install_config import parse_install_config
from tests.support.connector_world import ALL_MODELS, World, add_connector, two_tier_config
from tests.support.customer_dbs import port_open
from tests.support.mcp_server_leaky import CASES, EMAIL, HUGE, HUGE_CHARS, MANY_LINKS, NAME, OTHER_NAME
from tests.support.mcp_servers import ROOT, HttpServer, _environment
from tests.support.stack import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(240), pytest.mark.usefixtures("english")]

TOOL = "leaky__emit"


@pytest.fixture(scope="module")
def leaky_http():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_server_leaky", "--http", str(port)],
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = HttpServer(process, port)
    try:
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", port):
            assert process.poll() is None and time.monotonic() < deadline, "the leaky MCP server did not start"
            time.sleep(0.1)
        yield server
    finally:
        server.stop()


@pytest.fixture
def world(settings, django_user_model, leaky_http, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    settings.OWLAI_INSTALL = parse_install_config(two_tier_config())
    install_config_sync(config=settings.OWLAI_INSTALL)
    user = django_user_model.objects.create_user("leak-staff", password="pw-leak-123")
    role = Role.objects.create(name="leak-role")
    role.users.add(user)
    connector = add_connector("leaky", url=leaky_http.url, roles=[role], exposure=ALL_MODELS)
    conversation = conversation_create(owner=user)
    # Names have no format: the vault knows them from an earlier result.
    vault = DbVault(conversation.pk)
    vault.token_for("name", NAME)
    vault.token_for("name", OTHER_NAME)
    return World(user, conversation, {"leaky": connector}, tmp_path / "none.jsonl")


def emitted(world, case: str, *, tier: str = "public"):
    """What the model reads for the case: (its text, the parsed result, the outcome)."""
    result = execute_tool_call(world.context(tier), name=TOOL, arguments=json.dumps({"case": case}))
    return result.content, json.loads(result.content), result.outcome


def assert_absent(content: str, secrets) -> None:
    readable = json.dumps(json.loads(content), ensure_ascii=False)
    for secret in secrets:
        # Both spellings a model request may carry (ensure_ascii or not).
        assert secret not in readable and secret not in content, (secret, readable[:2000])
        assert json.dumps(secret)[1:-1] not in content, secret


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_result_leaks_nothing(world, case):
    content, payload, outcome = emitted(world, case)
    assert outcome == "success", payload
    assert_absent(content, CASES[case][1])
    readable = json.dumps(payload, ensure_ascii=False)
    # What stood in for the secret says what it was.
    if case.startswith("url_"):
        assert "[URL-" in readable, readable
    elif case.startswith("known_"):
        assert "[이름-" in readable or "[이메일-" in readable, readable
    elif case.startswith("number_"):
        assert "[전화번호-" in readable or "[주민등록번호-" in readable, readable
    elif case.startswith("email_"):
        assert "[URL-" in readable or "[이메일-" in readable, readable


def test_a_secret_url_becomes_the_same_reference_in_text_and_link(world):
    _c, in_text, _o = emitted(world, "url_fragment_text")
    _c, in_link, _o = emitted(world, "url_fragment_link")
    reference = in_text["content"][0]["text"].split()[-1]
    assert reference.startswith("[URL-") and in_link["content"][0]["uri"] == reference


def test_plain_urls_and_ordinary_numbers_stay_readable(world):
    # The model still gets what carries no secret: a docs link with paging, an amount.
    content, payload, _o = emitted(world, "plain_links")
    assert "https://docs.example.com/guide/getting-started?page=2&lang=ko" in payload["content"][0]["text"]
    assert payload["structured"] == {"amount": 1234567.5, "count": 3, "total": 2500000, "path": "/docs/guide"}


def test_a_plain_url_is_shown_decoded_so_an_email_in_it_is_masked(world):
    _c, payload, _o = emitted(world, "email_percent_query")
    (block,) = payload["content"]
    # (How much of the URL the e-mail detector takes is the detector's call.)
    assert "[이메일-" in block["text"] and "minji" not in block["text"] and "%40" not in block["text"], block


@pytest.mark.parametrize("case", sorted(HUGE))
def test_a_huge_result_leaves_a_bounded_preview_and_the_spill_file(world, settings, case):
    content, payload, outcome = emitted(world, case)
    assert outcome == "success"
    assert len(content) <= settings.OWLAI_SPILL_CHARS
    spilled = payload["spilled"]
    assert spilled["file"] and spilled["total"] >= 1 and spilled["shown"] >= 1
    # The preview shows the start of the big value and says how much was cut.
    assert "more characters" in content or "more items" in content
    assert EMAIL not in content
    from chat.executor import spill_folder

    on_disk = (spill_folder(world.conversation.pk) / spilled["file"]).read_text(encoding="utf-8")
    assert len(on_disk) > HUGE_CHARS and EMAIL not in on_disk  # whole, and masked before it was written


def test_a_huge_first_block_leaves_the_next_one_to_read_spill(world):
    _c, payload, _o = emitted(world, "huge_block_then_small")
    assert payload["content"][0]["text"].startswith("xxxx") and payload["spilled"]["total"] == 2
    page, outcome = world.call("read_spill", {"file": payload["spilled"]["file"], "offset": 1, "limit": 1})
    assert outcome == "success" and page["content"] == [{"type": "text", "text": "small tail"}], page


def test_a_link_in_every_row_costs_a_few_queries_and_keeps_its_reference(world, django_assert_max_num_queries):
    from chat.models import UrlReference

    with django_assert_max_num_queries(60):  # one per link would be over a thousand
        _c, payload, outcome = emitted(world, "many_links")
    assert outcome == "success"
    links = [row["link"] for row in payload["structured"]["rows"]]
    assert all(link.startswith("[URL-") for link in links) and len(set(links)) == MANY_LINKS
    assert UrlReference.objects.filter(conversation=world.conversation).count() == MANY_LINKS
    _c, again, _o = emitted(world, "many_links")
    assert [row["link"] for row in again["structured"]["rows"]] == links  # the same URL, the same reference
