"""A hostile MCP server for the connector output attacks
(tests/test_connector_attacks.py): one tool, `emit(case)`, answers with the
case's result, each a shape in which a secret or a personal value could slip
past the shaping stage: credential-bearing URLs in text, structured fields,
keys and resource links; phone numbers as JSON floats; vault values in NFD,
as JSON escapes or with invisible characters; an e-mail percent-encoded in a
link; a single huge block.

CASES maps a case's name to (what the server answers, what must never reach
the model); the test imports it from here, so both sides read one list.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable

import mcp_types as types
from mcp.server.mcpserver import MCPServer

from tests.support.mcp_server_common import arguments, serve

# In the conversation's vault before the calls (names have no format: only
# the known values protect them).
NAME = "김민지"
OTHER_NAME = "박서준"
EMAIL = "minji.kim@example.com"
PHONE_DIGITS = "1098765432"  # 010-9876-5432 without its leading zero
# What the huge-block cases answer with: bigger than any spill budget.
HUGE_CHARS = 3_000_000

Result = types.CallToolResult


def text(*blocks: str, structured=None) -> Result:
    return Result(content=[types.TextContent(type="text", text=b) for b in blocks], structured_content=structured)


def link(uri: str, name: str = "file") -> Result:
    return Result(content=[types.ResourceLink(type="resource_link", uri=uri, name=name)])


def resource(uri: str, body: str) -> Result:
    embedded = types.TextResourceContents(uri=uri, mime_type="text/plain", text=body)
    return Result(content=[types.EmbeddedResource(type="resource", resource=embedded)])


def nfd(value: str) -> str:
    return unicodedata.normalize("NFD", value)


SLACK = "https://hooks.slack.com/services/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"
DISCORD = "https://discord.com/api/webhooks/112233445566778899/Qx7_kP2-vN9mZr4TbW8yLc3Hs6Jd1Fg5"
TEAMS = "https://contoso.webhook.office.com/webhookb2/7f3c9a2e@1b4d/IncomingWebhook/9c8b7a6f5e4d/a1b2c3d4"
S3 = (
    "https://bucket.s3.amazonaws.com/report.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAEXAMPLEKEY%2F20240101&X-Amz-Signature=9f8e7d6c5b4a39281706f5e4d3c2b1a0"
)
AZURE = "https://acct.blob.core.windows.net/c/f.csv?sv=2022-11-02&se=2030-01-01&sp=r&sig=Qm9ndXNTaWduYXR1cmU%3D"
CLOUDFRONT = "https://media.example.com/v.mp4?Expires=1893456000&Signature=Zm9vYmFyYmF6cXV4&Key-Pair-Id=K2JCJMDEHXQW5F"
GCS = "https://storage.googleapis.com/b/o.csv?GoogleAccessId=svc@p.iam&Expires=1893456000&Signature=c2lnbmVk"
FRAGMENT = "https://app.example.com/callback#access_token=ya29.a0AfH6SMBx&token_type=Bearer"
REFRESH = "https://auth.example.com/token?grant_type=refresh_token&refresh_token=1//0gLx9rT2"
CLIENT_SECRET = "https://auth.example.com/token?client_id=app&client_secret=s3cr3t-Cl13nt"
ESCAPED = "https://files.example.com/get?page=1&amp;api_token=tk_live_51Hx"
ENTITY = "https://files.example.com/get?page=1&#38;session=sess_9xK2"
USERINFO = "https://admin:Pa55w0rd!@intranet.example.com/backup.tar"
CAPABILITY = "https://docs.example.com/d/1aB3cD5eF7gH9iJ1kL3mN5oP7qR9sT1uV/edit"
JWT_PATH = "https://example.com/dl/eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJtaW5qaSJ9.SflKxwRJSMeKKF2QT4fw"
TELEGRAM = "https://api.telegram.org/bot7123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage"
ENCODED = "https%3A%2F%2Fhooks.slack.com%2Fservices%2FT0A1B2C3D%2FB0E4F5G6H%2FZk3pQ9xW2mLr7Tn5"

# (case -> (the answer, substrings that must not reach the model))
CASES: dict[str, tuple[Callable[[], Result], tuple[str, ...]]] = {
    # --- URLs that may carry a secret, in every place a result has ------------------
    "url_slack_text": (lambda: text(f"Posted to {SLACK} ok"), ("Zk3pQ9xW2mLr7Tn5Vb8Yc1Ds", "hooks.slack.com")),
    "url_discord_structured": (lambda: text("ok", structured={"hook": DISCORD}), ("Qx7_kP2", "112233445566778899")),
    "url_teams_key": (lambda: text("ok", structured={TEAMS: "active"}), ("9c8b7a6f5e4d", "7f3c9a2e")),
    "url_s3_link": (lambda: link(S3, "report"), ("9f8e7d6c5b4a", "AKIAEXAMPLEKEY")),
    "url_azure_resource": (lambda: resource(AZURE, "a,b"), ("Qm9ndXNTaWduYXR1cmU",)),
    "url_cloudfront_text": (lambda: text(f"video: {CLOUDFRONT}."), ("Zm9vYmFyYmF6cXV4", "K2JCJMDEHXQW5F")),
    "url_gcs_nested": (lambda: text("ok", structured={"a": [{"b": [GCS]}]}), ("c2lnbmVk", "svc@p.iam")),
    "url_fragment_text": (lambda: text(f"signed in: {FRAGMENT}"), ("ya29.a0AfH6SMBx",)),
    "url_fragment_link": (lambda: link(FRAGMENT), ("ya29.a0AfH6SMBx",)),
    "url_refresh_token": (lambda: text(REFRESH), ("0gLx9rT2",)),
    "url_client_secret": (lambda: text("ok", structured={"next": CLIENT_SECRET}), ("s3cr3t-Cl13nt",)),
    "url_html_escaped": (lambda: text(f'<a href="{ESCAPED}">file</a>'), ("tk_live_51Hx",)),
    "url_html_entity": (lambda: text(f"<a href='{ENTITY}'>file</a>"), ("sess_9xK2",)),
    "url_userinfo": (lambda: text(f"backup at {USERINFO}"), ("Pa55w0rd",)),
    "url_capability_path": (lambda: text(f"shared: {CAPABILITY}"), ("1aB3cD5eF7gH9iJ1kL3mN5oP7qR9sT1uV",)),
    "url_jwt_path": (lambda: link(JWT_PATH, "download"), ("SflKxwRJSMeKKF2QT4fw", "eyJzdWIiOiJtaW5qaSJ9")),
    "url_telegram_bot": (lambda: text(f"bot: {TELEGRAM}"), ("AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",)),
    "url_percent_encoded": (lambda: text(f"redirect={ENCODED}"), ("Zk3pQ9xW2mLr7Tn5",)),
    "url_no_scheme": (lambda: text("hook: hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/Zk3pQ9xW2mLr7Tn5"), ("Zk3pQ9",)),
    "url_json_escaped_slashes": (lambda: text(json.dumps({"u": SLACK}).replace("/", "\\/")), ("Zk3pQ9xW2mLr7Tn5",)),
    "url_in_link_name": (lambda: link("https://example.com/ok", name=f"see {DISCORD}"), ("Qx7_kP2",)),
    "url_resource_uri_secret": (lambda: resource(CLIENT_SECRET, "body"), ("s3cr3t-Cl13nt",)),
    "url_relative_path_field": (
        lambda: text("ok", structured={"host": "hooks.slack.com", "webhook_path": SLACK.split(".com", 1)[1]}),
        ("Zk3pQ9xW2mLr7Tn5Vb8Yc1Ds",),
    ),
    "url_relative_query_field": (
        lambda: text("ok", structured={"nextUrl": "?page=2&session=sess_9xK2"}),
        ("sess_9xK2",),
    ),
    "url_double_encoded_json": (lambda: text(json.dumps(json.dumps({"hook": SLACK}))), ("Zk3pQ9xW2mLr7Tn5",)),
    # --- numbers of any JSON type ----------------------------------------------------
    "number_phone_float": (lambda: text("ok", structured={"phone": 1098765432.0}), (PHONE_DIGITS,)),
    "number_phone_international_float": (lambda: text("ok", structured={"phone": 821098765432.0}), ("821098765432",)),
    "number_phone_international_int": (lambda: text("ok", structured={"tel": [821098765432]}), ("821098765432",)),
    "number_rrn_float": (lambda: text("ok", structured={"id": 9001012345678.0}), ("9001012345678",)),
    "number_phone_exponent_text": (lambda: text('{"phone": 1.098765432e9}'), (PHONE_DIGITS, "1.098765432e9")),
    "number_phone_float_in_json_text": (lambda: text(json.dumps({"rows": [[1, 1098765432.0]]})), (PHONE_DIGITS,)),
    "number_phone_float_in_resource": (lambda: resource("crm://rows", json.dumps([821098765432.0])), ("821098765432",)),
    "number_dataframe_records": (
        lambda: text(json.dumps({"columns": ["name", "tel"], "data": [["a", 1098765432.0], ["b", 1012345678.0]]})),
        (PHONE_DIGITS, "1012345678"),
    ),
    "number_csv_text": (
        lambda: text(f"name,phone\n{NAME},1098765432.0\n{OTHER_NAME},821012345678.0\n"),
        (PHONE_DIGITS, "821012345678", NAME, OTHER_NAME),
    ),
    "number_exponent_prose": (lambda: text("tel 8.21098765432E11 (mobile)"), ("821098765432", "8.21098765432E11")),
    # --- spellings of vault values --------------------------------------------------
    "known_nfd_text": (lambda: text(f"담당자: {nfd(NAME)}"), (NAME, nfd(NAME))),
    "known_nfd_structured_key": (lambda: text("ok", structured={nfd(NAME): {"team": "sales"}}), (NAME, nfd(NAME))),
    "known_nfd_file_name": (lambda: link("file:///Users/me/report.pdf", name=f"{nfd(NAME)}_계약서.pdf"), (NAME,)),
    "known_json_escapes": (lambda: text(json.dumps({"owner": NAME, "other": OTHER_NAME})), (NAME, OTHER_NAME)),
    "known_json_escapes_in_prose": (
        lambda: text("log line: " + json.dumps({"owner": NAME}) + " (truncated"),
        (NAME, json.dumps(NAME)[1:-1]),
    ),
    "known_json_escapes_resource": (lambda: resource("crm://c/1", json.dumps({"n": NAME})), (NAME,)),
    "known_zero_width": (lambda: text(f"고객 {NAME[0]}\u200b{NAME[1:]} 확인"), (NAME,)),
    "known_full_width_email": (lambda: text("메일 ｍｉｎｊｉ.ｋｉｍ＠ｅｘａｍｐｌｅ.ｃｏｍ"), (EMAIL, "minji.kim")),
    "known_soft_hyphen": (lambda: text(f"{NAME[:2]}\u00ad{NAME[2:]}님"), (NAME,)),
    "known_nfd_double_encoded": (lambda: text(json.dumps(json.dumps({"n": nfd(NAME)}))), (NAME,)),
    # --- e-mails inside links ----------------------------------------------------------
    "email_percent_link": (lambda: link("crm://people/minji.kim%40example.com", "card"), (EMAIL, "minji.kim")),
    "email_percent_query": (lambda: text("https://crm.example.com/find?q=minji.kim%40example.com"), ("minji.kim",)),
    "email_percent_resource_uri": (lambda: resource("mailto:minji.kim%40example.com", "x"), ("minji.kim",)),
    "email_plain_link_path": (lambda: link("https://crm.example.com/people/minji.kim@example.com"), ("minji.kim",)),
}

# Results whose size the shaping stage must bound (tests read the preview).
HUGE = {
    "huge_single_block": lambda: text("가" * HUGE_CHARS),
    "huge_block_then_small": lambda: text("x" * HUGE_CHARS, "small tail"),
    "huge_structured": lambda: text("ok", structured={"blob": "y" * HUGE_CHARS, "rows": list(range(200_000))}),
    "huge_resource": lambda: resource("crm://dump", "z" * HUGE_CHARS),
    "huge_block_with_email_at_the_end": lambda: text("w" * HUGE_CHARS + f" {EMAIL}"),
}

# A signed link in every row of a result.
MANY_LINKS = 300


def many_links() -> Result:
    rows = [
        {"id": n, "link": f"https://share.example.com/s/{n:04d}f{n * 7919:08x}c0ffee{n:04d}"} for n in range(MANY_LINKS)
    ]
    return text("ok", structured={"rows": rows})


# Results that carry no secret: the model must get them as they are.
PLAIN = {
    "many_links": many_links,
    "plain_links": lambda: text(
        "docs https://docs.example.com/guide/getting-started?page=2&lang=ko",
        structured={"amount": 1234567.5, "count": 3, "total": 2500000.0, "path": "/docs/guide"},
    ),
}

server = MCPServer("leaky", log_level="WARNING")


@server.tool(description="Answers with the named test case's result.")
def emit(case: str) -> Result:
    if case in CASES:
        return CASES[case][0]()
    return {**HUGE, **PLAIN}[case]()


if __name__ == "__main__":
    serve(server, arguments())
