"""Model clients. Every provider is reached through one small interface:
`complete(messages, tools, on_delta) -> AssistantReply`.

`OpenAICompatibleClient` speaks chat completions with tool calls (vLLM, Ollama,
llama.cpp server, OpenAI) through the official `openai` library, streaming so
the user sees text as it arrives. The offline demo model implements the same
interface without any network.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it


@dataclass(frozen=True)
class AssistantReply:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


class ModelError(Exception):
    """The provider could not be reached or answered with an error."""


class ModelClient(Protocol):
    def complete(
        self, *, messages: list[dict], tools: list[dict], on_delta: Callable[[str], None]
    ) -> AssistantReply: ...


class OpenAICompatibleClient:
    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float) -> None:
        import openai

        self._openai = openai
        # Local servers usually ignore the key, but the library requires one.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=1)
        self._model = model

    def complete(self, *, messages: list[dict], tools: list[dict], on_delta: Callable[[str], None]) -> AssistantReply:
        kwargs: dict = {"model": self._model, "messages": messages, "stream": True}
        if tools:
            kwargs["tools"] = tools
        content: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        try:
            stream = self._client.chat.completions.create(**kwargs)
            for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    content.append(delta.content)
                    on_delta(delta.content)
                # Tool calls arrive in fragments keyed by index; stitch them.
                for fragment in delta.tool_calls or []:
                    slot = calls.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
                    if fragment.id:
                        slot["id"] = fragment.id
                    if fragment.function is not None:
                        slot["name"] += fragment.function.name or ""
                        slot["arguments"] += fragment.function.arguments or ""
        except self._openai.OpenAIError as exc:
            raise ModelError(f"model provider error: {exc.__class__.__name__}") from exc
        tool_calls = [
            ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments=slot["arguments"])
            for index, slot in sorted(calls.items())
        ]
        return AssistantReply(content="".join(content), tool_calls=tool_calls)


def client_for(*, provider_kind: str, base_url: str, api_key_env: str, model_name: str, timeout: float) -> ModelClient:
    if provider_kind == "offline-demo":
        from chat.demo_model import OfflineDemoClient

        return OfflineDemoClient()
    if provider_kind == "openai":
        return OpenAICompatibleClient(
            base_url=base_url,
            api_key=os.environ.get(api_key_env, "") if api_key_env else "",
            model=model_name,
            timeout=timeout,
        )
    raise ModelError(f"unsupported provider kind: {provider_kind}")
