"""The offline demo model: deterministic, no network.

It lets a newcomer try the whole governed path (executor, checks, audit)
without any model server: SQL in the message (a ``` block, or a message that
starts with an SQL statement keyword, writes included, so the executor's
refusal can be seen) is run with `run_sql` on the mentioned (or only
visible) connection and the rows come back as a table; anything else gets
the list of connections the turn can see. It answers in the turn's language
(the worker runs the turn under it), refusal reasons included.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable

from django.utils.translation import gettext as _
from sqlglot.errors import TokenError
from sqlglot.parser import Parser
from sqlglot.tokens import Tokenizer, TokenType

from chat.executor.tools.documents import SEARCH_DOCUMENTS
from chat.executor.tools.sql import RUN_SQL
from chat.llm import AssistantReply, ToolCall
from governance.refusals import localize

DEMO_LABEL = "offline demo model"
_FENCED = re.compile(r"```(?:sql)?\s*\n?(.*?)```", re.IGNORECASE | re.DOTALL)
_FIRST_WORD = re.compile(r"\s*([A-Za-z_]+)\b")
# Words that start an SQL statement, as sqlglot reads them: its statement
# parsers and commands (DELETE, DROP, SHOW, EXPLAIN, CALL, ...) and the ways
# a query starts. A message starting with one is SQL, so a write is sent to
# the executor and refused there, as a real model's would be.
_STATEMENT_TOKENS = (
    frozenset(Parser.STATEMENT_PARSERS)
    | frozenset(Tokenizer.COMMANDS)
    | {TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.TABLE, TokenType.FROM, TokenType.REPLACE}
) - {TokenType.SEMICOLON}
_LEADING_MENTIONS = re.compile(r"^\s*(@[\w.-]+\s+)+")
_MAX_TABLE_ROWS = 20


def extract_sql(text: str) -> str | None:
    fenced = _FENCED.search(text)
    if fenced and fenced.group(1).strip():
        return fenced.group(1).strip()
    # "@sales SELECT ..." names the connection and then gives bare SQL.
    bare = _LEADING_MENTIONS.sub("", text)
    if starts_with_sql_keyword(bare):
        return bare.strip()
    return None


def starts_with_sql_keyword(text: str) -> bool:
    word = _FIRST_WORD.match(text)
    if word is None:
        return False
    try:
        tokens = Tokenizer().tokenize(word.group(1))
    except TokenError:
        return False
    return bool(tokens) and tokens[0].token_type in _STATEMENT_TOKENS


def _enum_of(tools: list[dict], tool_name: str, parameter: str) -> list[str]:
    """The resource names a tool accepts: the turn's visible resources."""
    for tool in tools:
        function = tool.get("function", {})
        if function.get("name") == tool_name:
            return list(function["parameters"]["properties"][parameter].get("enum", []))
    return []


_SEARCH = re.compile(r"^\s*(?:검색|search)\s*:?\s+(.+)$", re.IGNORECASE | re.DOTALL)


def extract_search(text: str) -> str | None:
    """`검색 환불 규정` / `search refund policy` (after any @mentions) asks for a search."""
    match = _SEARCH.match(_LEADING_MENTIONS.sub("", text))
    return match.group(1).strip() if match else None


def pick_connection(text: str, names: list[str]) -> str | None:
    """The connection named in the text (longest match wins), else the only one."""
    lowered = text.lower()
    mentioned = [n for n in names if f"@{n.lower()}" in lowered or n.lower() in lowered]
    if mentioned:
        return max(mentioned, key=len)
    return names[0] if len(names) == 1 else None


def render_table(payload: dict) -> str:
    columns = payload.get("columns", [])
    rows = payload.get("rows", [])
    if not columns:
        return _("The query returned no columns.")
    lines = ["| " + " | ".join(str(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows[:_MAX_TABLE_ROWS]:
        cells = ["" if v is None else str(v).replace("|", "\\|").replace("\n", " ") for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    summary = _("%(count)d row(s).") % {"count": payload.get("row_count", len(rows))}
    if len(rows) > _MAX_TABLE_ROWS:
        summary += " " + _("Showing the first %(shown)d.") % {"shown": _MAX_TABLE_ROWS}
    if payload.get("truncated"):
        summary += " " + _("The result was cut at the connection's row cap.")
    return "\n".join(lines) + "\n\n" + summary


def render_hits(payload: dict) -> str:
    hits = payload.get("hits", [])
    if not hits:
        return _("No documents matched.")
    return "\n\n".join(f"**{h.get('title', '')}**\n{str(h.get('text', ''))[:300]}" for h in hits)


class OfflineDemoClient:
    def complete(self, *, messages: list[dict], tools: list[dict], on_delta: Callable[[str], None]) -> AssistantReply:
        reply = self._decide(messages, tools)
        if reply.content:
            # Stream in small pieces so the demo exercises the same UI path.
            for start in range(0, len(reply.content), 40):
                on_delta(reply.content[start : start + 40])
        return reply

    def _decide(self, messages: list[dict], tools: list[dict]) -> AssistantReply:
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return AssistantReply(content=self._answer_from_tool(last.get("content") or ""))
        text = last.get("content") or "" if last.get("role") == "user" else ""
        names = _enum_of(tools, RUN_SQL, "connection")
        collections = _enum_of(tools, SEARCH_DOCUMENTS, "collection")
        query = extract_search(text)
        if query is not None and collections:
            collection = pick_connection(text.replace(query, ""), collections)
            if collection is None:
                return AssistantReply(
                    content=_("Which collection should I search? Mention one of: %(names)s")
                    % {"names": ", ".join(collections)}
                )
            arguments = json.dumps({"collection": collection, "query": query}, ensure_ascii=False)
            call_id = "demo_" + hashlib.sha1(arguments.encode()).hexdigest()[:12]
            return AssistantReply(
                content="", tool_calls=[ToolCall(id=call_id, name=SEARCH_DOCUMENTS, arguments=arguments)]
            )
        sql = extract_sql(text)
        if sql is not None:
            connection = pick_connection(text.replace(sql, ""), names) or pick_connection(text, names)
            if connection is None:
                if not names:
                    return AssistantReply(content=_("You have no database connections available."))
                return AssistantReply(
                    content=_("Which connection should I query? Mention one of: %(names)s")
                    % {"names": ", ".join(names)}
                )
            call_id = "demo_" + hashlib.sha1(f"{connection}\n{sql}".encode()).hexdigest()[:12]
            return AssistantReply(
                content="",
                tool_calls=[
                    ToolCall(
                        id=call_id,
                        name=RUN_SQL,
                        arguments=json.dumps({"connection": connection, "sql": sql}, ensure_ascii=False),
                    )
                ],
            )
        if not names and not collections:
            return AssistantReply(content=_("I am the offline demo model. You have no database connections available."))
        listing = "\n".join([f"- {n}" for n in names] + [f"- {n} ({_('documents')})" for n in collections])
        return AssistantReply(
            content=_(
                "I am the offline demo model: I run SQL you write and show the rows. "
                "Connections you can query:\n%(listing)s\n\nSend a SELECT statement, or SQL in a ``` block."
            )
            % {"listing": listing}
        )

    @staticmethod
    def _answer_from_tool(content: str) -> str:
        try:
            payload = json.loads(content)
        except json.JSONDecodeError:
            return content
        if isinstance(payload, dict) and "error" in payload:
            # The executor's reason in its fixed form (or already in the
            # user's language), as a model would read it and tell the user.
            return _("I could not do that: %(reason)s") % {"reason": localize(str(payload["error"]))}
        if not isinstance(payload, dict):
            return content
        if "hits" in payload:
            return render_hits(payload)
        return render_table(payload)
