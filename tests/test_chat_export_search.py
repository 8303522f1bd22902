"""Export a conversation (Markdown / JSON, masked as stored) and search
one's conversations: the owner's only, 404 for anyone else's."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from chat.models import Message, MessageRole, Turn, TurnStatus
from chat.services import conversation_create

pytestmark = pytest.mark.django_db

TOKEN = "[전화번호-1]"


def _conversation(owner, title="고객 연락처"):
    conversation = conversation_create(owner=owner, title=title)
    first = Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED, model_name="m", tier="private")
    Message.objects.create(conversation=conversation, turn=first, role=MessageRole.USER, content="김철수 번호?")
    Message.objects.create(
        conversation=conversation,
        turn=first,
        role=MessageRole.ASSISTANT,
        content=f"번호는 {TOKEN}입니다.\n```sql\nSELECT 1\n```",
    )
    again = Turn.objects.create(conversation=conversation, status=TurnStatus.COMPLETED, supersedes=first)
    Message.objects.create(conversation=conversation, turn=again, role=MessageRole.USER, content="김철수 번호?")
    Message.objects.create(conversation=conversation, turn=again, role=MessageRole.ASSISTANT, content="다시 답합니다.")
    return conversation, first, again


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_markdown_export_is_masked_and_marks_the_earlier_version(personas):
    conversation, first, again = _conversation(personas.staff)
    response = _client(personas.staff).get(f"/api/conversations/{conversation.pk}/export/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/markdown")
    assert "attachment" in response["Content-Disposition"] and ".md" in response["Content-Disposition"]
    text = response.content.decode()
    assert text.startswith("# 고객 연락처\n")
    assert TOKEN in text  # as stored: the token, never the original
    assert "```sql\nSELECT 1\n```" in text
    assert text.count("김철수 번호?") == 2
    assert text.index("다시 답합니다.") > text.index(TOKEN)


def test_json_export_carries_the_timeline_with_versions(personas):
    conversation, first, again = _conversation(personas.staff)
    response = _client(personas.staff).get(f"/api/conversations/{conversation.pk}/export/?as=json")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
    data = json.loads(response.content)
    assert data["masked"] is True and data["conversation"]["title"] == "고객 연락처"
    roles = [(i["role"], i["turn_id"], i["earlier_version"]) for i in data["items"]]
    assert roles == [
        ("user", first.pk, True),
        ("assistant", first.pk, True),
        ("user", again.pk, False),
        ("assistant", again.pk, False),
    ]
    assert data["items"][2]["supersedes"] == first.pk


def test_export_of_another_users_conversation_is_404_and_a_bad_format_400(personas):
    conversation, _, _ = _conversation(personas.staff)
    other = _client(personas.outsider)
    assert other.get(f"/api/conversations/{conversation.pk}/export/").status_code == 404
    assert other.get(f"/api/conversations/{conversation.pk}/export/?as=json").status_code == 404
    owner = _client(personas.staff)
    assert owner.get(f"/api/conversations/{conversation.pk}/export/?as=html").status_code == 400


def test_search_finds_titles_and_messages_of_ones_own_conversations(personas):
    mine, _, _ = _conversation(personas.staff)
    other = conversation_create(owner=personas.staff, title="매출 보고")
    theirs, _, _ = _conversation(personas.outsider, title="남의 대화")
    client = _client(personas.staff)

    def found(q):
        return [c["id"] for c in client.get("/api/conversations/", {"q": q}).json()]

    assert found("매출") == [str(other.pk)]
    assert found("다시 답합") == [str(mine.pk)]  # in a message, once though it matches twice
    assert found("남의") == []  # another user's conversation never shows
    assert found(TOKEN) == [str(mine.pk)]  # the masked text is what is searched
    assert len(found("")) == 2
