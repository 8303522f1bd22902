"""Connector output attacks end to end: a scripted model on a PUBLIC provider
calls a hostile MCP server's tool (tests/support/mcp_server_leaky.py, on
loopback HTTP) over the real websocket, through daphne, a Celery worker,
PostgreSQL, Redis and the real OpenAI-compatible client, one attack of each
class per call: credential-bearing URLs (webhook path, signature parameters,
fragment, HTML-escaped separator), phone numbers as JSON floats, vault
values respelled (NFD, JSON escapes), an e-mail percent-encoded in a link,
and huge results in one step under a small history budget.

Afterwards no secret is in any request body the model received (in either
JSON spelling), and the results of the huge step all reached the model:
bounded, none blanked for another."""

from __future__ import annotations

import json

import pytest

from audit.models import ToolCallAudit
from chat.services import conversation_create
from chat.vault import DbVault
from governance.models import LlmModel, Role
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from tests.support.connector_world import ALL_MODELS, add_connector, two_tier_config
from tests.support.fake_llm import FakeLLMServer, Reply, text
from tests.support.mcp_server_leaky import CASES, EMAIL, NAME, OTHER_NAME
from tests.test_connector_attacks import leaky_http  # noqa: F401 -- the module's server fixture
from tests.test_e2e_connectors import PUBLIC, Script, Socket, finished_tools, start_stack

pytestmark = [
    pytest.mark.services,
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(420),
]

TOOL = "leaky__emit"
SPILL_CHARS, HISTORY_CHARS = 20_000, 30_000
# One attack of each class.
ATTACKS = [
    "url_slack_text",
    "url_s3_link",
    "url_fragment_text",
    "url_html_escaped",
    "url_json_escaped_slashes",
    "number_phone_float",
    "number_phone_international_float",
    "known_nfd_text",
    "known_json_escapes",
    "email_percent_link",
]
# One step: two results each bigger than any budget, and a small one.
HUGE_STEP = ["huge_single_block", "huge_resource", "url_discord_structured"]


def calls(cases: list[str], prefix: str) -> Reply:
    return Reply(tool_calls=[(f"{prefix}{n}", TOOL, {"case": case}) for n, case in enumerate(cases)])


@pytest.fixture
def world(tmp_path, require_postgres_app_db, require_redis, settings, django_user_model, leaky_http):  # noqa: F811
    fake = FakeLLMServer().__enter__()
    script = Script()
    fake.script = [script] * 10_000
    config = two_tier_config(fake.base_url)
    config_path = tmp_path / "owlai.toml"
    config_path.write_text(config)
    settings.OWLAI_INSTALL = parse_install_config(config)
    install_config_sync(config=settings.OWLAI_INSTALL)
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
    user = django_user_model.objects.create_user("leak-e2e", password="pw-leak-e2e-1")
    role = Role.objects.create(name="leak-e2e-role")
    role.users.add(user)
    add_connector("leaky", url=leaky_http.url, roles=[role], exposure=ALL_MODELS)
    from django.test import Client

    web = Client()
    web.force_login(user)

    class World:
        pass

    w = World()
    w.user, w.fake, w.script, w.tmp, w.config_path = user, fake, script, tmp_path, config_path
    w.cookie = web.cookies["sessionid"].value
    try:
        yield w
    finally:
        fake.__exit__(None, None, None)


def test_hostile_connector_output_reaches_a_public_model_as_references_and_tokens(world):
    conversation = conversation_create(owner=world.user)
    vault = DbVault(conversation.pk)  # the names an earlier result masked
    vault.token_for("name", NAME)
    vault.token_for("name", OTHER_NAME)
    stack = start_stack(
        world,
        OWLAI_SPILL_CHARS=str(SPILL_CHARS),
        OWLAI_HISTORY_CHARS=str(HISTORY_CHARS),
        OWLAI_VAR_DIR=str(world.tmp / "var"),
    )
    with stack.running():
        sock = Socket(stack.port, conversation.pk, world.cookie)
        try:
            world.script.then("cloud-model", calls(ATTACKS, "a"), text("확인했습니다."))
            frames = sock.ask("연결된 도구 결과를 모두 보여 줘", model=PUBLIC)
            assert frames[-1]["status"] == "completed", frames[-3:]
            assert finished_tools(frames) == [(TOOL, "success")] * len(ATTACKS)

            world.script.then("cloud-model", calls(HUGE_STEP, "h"), text("큰 결과를 확인했습니다."))
            frames = sock.ask("큰 파일도 읽어 줘", model=PUBLIC)
            assert frames[-1]["status"] == "completed", frames[-3:]
            assert finished_tools(frames) == [(TOOL, "success")] * len(HUGE_STEP)
        finally:
            sock.close()

    bodies = world.script.bodies["cloud-model"]
    assert len(bodies) == 4
    sent = world.fake.all_request_text()
    secrets = [secret for case in [*ATTACKS, *HUGE_STEP] if case in CASES for secret in CASES[case][1]]
    for secret in [*secrets, EMAIL]:
        assert secret not in sent and json.dumps(secret)[1:-1] not in sent, secret
    first = [m["content"] for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert len(first) == len(ATTACKS) and all("[URL-" in r for r in first[:5]), first[:5]

    # The huge step: every result reached the model, each bounded (the two
    # big ones sharing the history budget, cut with a note), the small one whole.
    huge = [m["content"] for m in bodies[3]["messages"] if m["role"] == "tool"][-len(HUGE_STEP) :]
    assert all(len(r) <= SPILL_CHARS for r in huge)
    assert huge[0].startswith('{"spilled": {"file": "turn') and "가가가가" in huge[0] and "[trimmed:" in huge[0]
    assert "zzzz" in huge[1] and "[trimmed:" in huge[1]
    small = json.loads(huge[2])
    assert small["structured"]["hook"].startswith("[URL-")
    total = sum(len(m.get("content") or "") for m in bodies[3]["messages"])
    assert total <= HISTORY_CHARS
    assert len(ToolCallAudit.objects.filter(conversation_id=conversation.pk)) == len(ATTACKS) + len(HUGE_STEP)
