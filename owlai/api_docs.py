"""The API schema's description: how to authenticate, and the websocket
protocol, which OpenAPI cannot describe. The protocol is README's section
"Websocket protocol", read when the schema is generated, so the page beside
the schema and the README never disagree."""

from __future__ import annotations

from functools import cache
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "## Websocket protocol"

INTRO = """\
The HTTP API of the chat page, for browsers and other clients.

**Authentication.** A browser uses its session (and sends the CSRF token on
writes). Other clients send a personal API token: `Authorization: Bearer owlai_…`.
Create one with `POST /api/tokens/` while signed in (the key is in that response
only), or an admin creates one in the admin (*Accounts › API tokens*); revoke it
with `DELETE /api/tokens/<id>/`. Creating, revoking and every request made with a
token are audit events. Tokens cannot manage tokens.

"""


@cache
def websocket_protocol() -> str:
    """README's websocket section (its heading included), up to the next section."""
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else len(text)].strip() + "\n"


def add_websocket_protocol(result, generator, request, public):
    """drf-spectacular post-processing hook (settings.SPECTACULAR_SETTINGS)."""
    result["info"]["description"] = INTRO + websocket_protocol()
    return result
