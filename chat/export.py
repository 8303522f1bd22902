"""A conversation as a file its owner downloads: Markdown or JSON.

Masked, as stored: the text is what the timeline shows (personal data as
tokens such as [전화번호-3]); nothing is revealed on the way out, so an
exported file carries no more than the page showed before any reveal.
Earlier versions (regenerated answers, edited messages) are kept, marked.
"""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext as _

from chat.models import Conversation
from chat.turns.timeline import conversation_timeline
from owlai.times import api_time

EXPORT_FORMATS = ("markdown", "json")


def conversation_export_json(*, conversation: Conversation) -> dict:
    items = conversation_timeline(conversation=conversation)
    superseded = {i["supersedes"] for i in items if i["role"] == "user" and i.get("supersedes")}
    return {
        "conversation": {
            "id": str(conversation.pk),
            "title": conversation.title,
            "tier": conversation.tier,
            "created_at": api_time(conversation.created_at),
            "updated_at": api_time(conversation.updated_at),
        },
        "exported_at": api_time(timezone.now()),
        "masked": True,
        "items": [{**item, "earlier_version": item["turn_id"] in superseded} for item in items],
    }


def _fence(text: str) -> str:
    """A code fence longer than any backtick run inside `text`."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def conversation_export_markdown(*, conversation: Conversation) -> str:
    data = conversation_export_json(conversation=conversation)
    lines = [f"# {conversation.title or _('New conversation')}", ""]
    lines += [_("Exported %(when)s. Personal data is masked as it was stored.") % {"when": data["exported_at"]}, ""]
    for item in data["items"]:
        earlier = f" ({_('earlier version')})" if item["earlier_version"] else ""
        when = f" · {item['at']}" if item.get("at") else ""
        if item["role"] == "user":
            lines += [f"## {_('You')}{earlier}{when}", "", item["content"], ""]
        elif item["role"] == "assistant":
            who = " · ".join(x for x in (item.get("model"), item.get("tier")) if x)
            lines += [f"## {_('Assistant')}{earlier} ({who}){when}", "", item["content"], ""]
        elif item["role"] == "step":
            code = item.get("sql") if item.get("sql") is not None else item.get("query")
            head = " · ".join(str(x) for x in (item.get("tool"), item.get("resource"), item.get("outcome")) if x)
            lines += [f"> {_('Tool call')}: {head}", ""]
            if code:
                fence = _fence(code)
                lines += [fence + ("sql" if item.get("sql") is not None else ""), code, fence, ""]
        elif item["role"] == "status":
            lines += [f"> {item['status']}: {item.get('content') or ''}".rstrip(), ""]
    return "\n".join(lines).rstrip() + "\n"
