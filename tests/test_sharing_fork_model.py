"""The fork of a shared conversation never sends an original to the model:
the owner's conversation ran against a scripted (recording) model server on
loopback, read phone numbers and had one typed by its owner; the viewer's
fork then runs a turn against the same server, and every request it sent
holds tokens only."""

from __future__ import annotations

import json

import pytest

from chat.models import Turn, TurnStatus
from chat.services import conversation_create
from chat.turns.runner import turn_run
from chat.turns.start import turn_start
from governance.models import LlmModel
from governance.services import feature_default_set, install_config_sync
from owlai.install_config import parse_install_config
from sharing.fork import share_link_fork
from sharing.services import share_link_create
from tests.support.connector_world import two_tier_config
from tests.support.fake_llm import FakeLLMServer, text, tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("english")]

PHONES = ["010-1234-5678", "010-2222-3333", "010-4444-5555"]


@pytest.fixture
def fake():
    with FakeLLMServer() as server:
        yield server


def test_the_fork_sends_tokens_and_never_an_original_to_the_model(settings, fake, personas):
    settings.OWLAI_INSTALL = parse_install_config(two_tier_config(fake.base_url))
    install_config_sync(config=settings.OWLAI_INSTALL)
    feature_default_set(feature="chat", model=LlmModel.objects.get(name="inhouse-model"))
    owner, viewer = personas.staff, personas.outsider
    conversation = conversation_create(owner=owner)
    fake.script = [
        tool_call("run_sql", {"connection": "sales", "sql": "SELECT name, phone FROM customers"}),
        text("세 고객의 번호는 [전화번호-1], [전화번호-2], [전화번호-3] 입니다."),
    ]
    first = turn_start(conversation=conversation, user=owner, text="고객 전화번호 보여 줘", model=None)
    turn_run(turn_id=first.pk)
    # The owner types a value (theirs to give their model), in a second turn.
    fake.script = [text("[전화번호-1] 고객입니다.")]
    second = turn_start(conversation=conversation, user=owner, text=f"{PHONES[0]} 는 누구야?", model=None)
    turn_run(turn_id=second.pk)
    assert Turn.objects.filter(conversation=conversation, status=TurnStatus.COMPLETED).count() == 2
    sent_before = len(fake.requests)
    assert all(p in json.dumps(fake.requests, ensure_ascii=False) for p in PHONES[:1])  # the typed one went out

    link = share_link_create(conversation=conversation, actor=owner)
    fork = share_link_fork(key=link.key, actor=viewer)
    fake.script = [text("계속합니다.")]
    turn = turn_start(conversation=fork, user=viewer, text="[전화번호-2] 고객의 주문은?", model=None)
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == TurnStatus.COMPLETED and turn.tier == "private"

    fork_requests = fake.requests[sent_before:]
    assert fork_requests
    sent = json.dumps(fork_requests, ensure_ascii=False)
    for phone in PHONES:
        assert phone not in sent
    # The history came along, as tokens (the owner's typed value included).
    assert "[전화번호-3]" in sent and "고객 전화번호 보여 줘" in sent
    assert "[전화번호-1] 는 누구야?" in sent
