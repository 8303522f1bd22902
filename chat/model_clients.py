"""The model client for a provider kind. Apart from chat.llm so that the
clients (chat.llm's OpenAI-compatible one, chat.demo_model's offline one,
which uses chat.llm's reply types) do not import each other."""

from __future__ import annotations

import os

from django.utils.translation import gettext as _

from chat.demo_model import OfflineDemoClient
from chat.llm import ModelClient, ModelError, OpenAICompatibleClient
from owlai.install_config import ProviderKind


def client_for(*, provider_kind: str, base_url: str, api_key_env: str, model_name: str) -> ModelClient:
    if provider_kind == ProviderKind.OFFLINE_DEMO:
        return OfflineDemoClient()
    if provider_kind == ProviderKind.OPENAI:
        return OpenAICompatibleClient(
            base_url=base_url,
            api_key=os.environ.get(api_key_env, "") if api_key_env else "",
            model=model_name,
        )
    raise ModelError(_("unsupported provider kind: %(kind)s") % {"kind": provider_kind})
