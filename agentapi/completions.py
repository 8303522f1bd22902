"""The OpenAI chat-completions shapes of a governed turn: its stored events
(chat.protocol) read as one `chat.completion` or a stream of
`chat.completion.chunk`s. Pure functions: agentapi.openai_views follows the
turn (agentapi.streams) and sends what these return.

The answer is the turn's answer as the page shows it: personal data as the
conversation's tokens ([전화번호-1]), never the originals. A turn that needs
an approval ends the completion with a notice and the request under
`owlai.approval` (answer it at /api/agent/approvals/<id>/); a refused or
failed turn ends it with its reason."""

from __future__ import annotations

import json
import time

from django.utils.translation import gettext as _

from chat.protocol import ServerEvent

# Where the extension fields go on every completion and chunk: OpenAI
# clients keep unknown fields (openai-python: `completion.model_extra`).
EXTRA = "owlai"


def completion_id(turn_id: int) -> str:
    return f"chatcmpl-owlai-{turn_id}"


class Answer:
    """What a turn said so far, built from its frames in order."""

    def __init__(self, *, turn_id: int, conversation_id: str, model: str) -> None:
        self.turn_id, self.conversation_id, self.model = turn_id, conversation_id, model
        self.created = int(time.time())
        self.streamed = ""  # message.delta texts
        self.final: str | None = None  # message.completed
        self.status = "queued"
        self.approval: dict | None = None
        self.reason = ""

    def extra(self) -> dict:
        out = {"conversation_id": self.conversation_id, "turn_id": self.turn_id, "status": self.status}
        if self.approval is not None:
            out["approval"] = self.approval
        return out

    def take(self, frame: dict) -> str:
        """Read one frame; returns the text it adds to the answer as shown."""
        kind = frame["type"]
        if kind == ServerEvent.TURN_ACCEPTED:
            self.status = "running"
        elif kind == ServerEvent.MESSAGE_DELTA:
            piece = str(frame.get("text", ""))
            self.streamed += piece
            return piece
        elif kind == ServerEvent.MESSAGE_COMPLETED:
            self.final = str(frame.get("text", ""))
            # A model that streamed nothing (or not all of it): the rest now.
            if self.final.startswith(self.streamed):
                rest = self.final[len(self.streamed) :]
                self.streamed = self.final
                return rest
        elif kind == ServerEvent.TURN_REJECTED:
            self.reason = str(frame.get("reason", ""))
        elif kind == ServerEvent.ERROR:
            self.reason = str(frame.get("message", ""))
        elif kind == ServerEvent.APPROVAL_REQUESTED:
            self.status = "waiting_approval"
            self.approval = {
                k: frame.get(k) for k in ("approval_id", "tool", "connector", "arguments", "expires_at") if k in frame
            }
            return self._notice(
                _("A tool call waits for your approval: %(tool)s of %(connector)s (request %(id)s).")
                % {
                    "tool": frame.get("tool", ""),
                    "connector": frame.get("connector", ""),
                    "id": frame.get("approval_id", ""),
                }
            )
        elif kind == ServerEvent.TURN_FINISHED:
            self.status = str(frame.get("status", ""))
            if self.status != "completed" and not self.final:
                return self._notice(
                    self.reason or _("The turn ended without an answer (%(status)s).") % {"status": self.status}
                )
        return ""

    def _notice(self, text: str) -> str:
        return ("\n\n" if self.streamed else "") + text

    def text(self, shown: str) -> str:
        return self.final if self.final is not None and self.status == "completed" else shown

    def completion(self, shown: str) -> dict:
        return {
            "id": completion_id(self.turn_id),
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.text(shown)},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            EXTRA: self.extra(),
        }

    def chunk(self, delta: dict, finish_reason: str | None = None) -> str:
        body = {
            "id": completion_id(self.turn_id),
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            EXTRA: self.extra(),
        }
        return "data: " + json.dumps(body, ensure_ascii=False) + "\n\n"


DONE = "data: [DONE]\n\n"


def last_user_text(messages) -> str | None:
    """The text of the request's last message when it is the user's (a
    string, or the text parts of a content list); else None."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    if last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        if parts and all(isinstance(p, str) for p in parts):
            return "\n".join(parts)
    return None
