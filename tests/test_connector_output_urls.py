"""Which URLs a tool's output may show as they are (chat.url_references):
an allowlist, so a URL is shown only when nothing in it can be a secret;
every shape below that may carry one becomes a reference."""

from __future__ import annotations

import pytest

from chat.url_references import references_in_text, url_is_plain

PLAIN = [
    "https://example.com/ok",
    "https://en.wikipedia.org/wiki/Python_(programming_language)",
    "https://github.com/owner/repo/issues/19",
    "https://www.example.com/docs/getting-started?page=2&lang=ko",
    "https://ko.wikipedia.org/wiki/%EC%84%9C%EC%9A%B8",
    "http://127.0.0.1:8000/api/v2/items",
    "https://example.com/search?q=quarterly+report&sort=-created_at",
    "https://docs.python.org/3/library/urllib.parse.html",
    "example.com/path/to/page",
    "https://news.ycombinator.com/item?id=1",
    "https://example.com/2024/03/report-q3.pdf",
    "https://example.com/api/getElementById",
    "https://wiki.example.com/display/SALES/Quarterly+Review",
    "https://example.com/files/My%20Report%202024.pdf",
    "https://jira.example.com/browse/PROJ-123",
    "https://bucket.s3.amazonaws.com/reports/2024/q3.pdf",
]

SECRET = [
    # webhook secrets in the path
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "https://discord.com/api/webhooks/123456789012345678/abcDEF_ghiJKL-mnoPQR",
    "https://discordapp.com/api/webhooks/1/t0k3n",
    "https://abc.webhook.office.com/webhookb2/a@b/IncomingWebhook/c/d",
    "https://maker.ifttt.com/trigger/e/with/key/dXyZabc",
    "https://hooks.zapier.com/hooks/catch/123456/abcdef/",
    "https://api.telegram.org/bot123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11/sendMessage",
    # random path segments: keys, hashes, UUIDs, JWTs, base64
    "https://example.com/download/eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc",
    "https://example.com/share/550e8400-e29b-41d4-a716-446655440000",
    "https://example.com/files/5f2b9c1e8d7a6b5c4d3e2f1a0b9c8d7e",
    "https://example.com/p/kqzmxvbnwplrtysdfghjq",
    "https://example.com/p/XyZqWeRtYuIoPaSdFgH",
    "https://example.com/s/AbCdEf12",
    "https://example.com/reset/abc",
    "https://d111111abcdef8.cloudfront.net/i.jpg",
    # fragments
    "https://x.com/a#access_token=abc",
    "https://x.com/#",
    "https://app.example.com/#/invite/xyz",
    # signatures and tokens in the query, any provider, any name
    "https://bucket.s3.amazonaws.com/f.pdf?X-Amz-Signature=abc&X-Amz-Credential=AKIA",
    "https://acct.blob.core.windows.net/c/f?sv=2020-08-04&se=2024-01-01&sig=abc",
    "https://d1.cloudfront.net/i.jpg?Expires=1700000000&Signature=x&Key-Pair-Id=K2",
    "https://storage.googleapis.com/b/o?GoogleAccessId=x&Expires=1&Signature=y",
    "https://oauth.example.com/cb?refresh_token=r",
    "https://oauth.example.com/cb?client_secret=s",
    "https://example.com/?auth=x",
    "https://example.com/?code=4/0AX4",
    "https://example.com/?jwt=a.b.c",
    "https://example.com/?sessionid=abc",
    "https://example.com/p?page=1&x=1",
    # HTML-escaped and encoded separators
    "https://x.com/a?page=1&amp;token=abc",
    "https://x.com/a?page=1&#38;token=abc",
    "https://example.com/a?q=a%26token%3Dxyz",
    "https%3A%2F%2Fhooks.slack.com%2Fservices%2FT0%2FB0%2Fxyz",
    # user information, an allowlisted name with a random value
    "https://u:p@example.com/",
    "https://key@o123.ingest.sentry.io/1",
    "https://example.com/a?q=kqzmxvbnwplrtysdfghj",
    "crm://people/minji.kim%40example.com",
    "https://example.com/a?page=1%00",
    "https://example.com/a/%ff",
    "https://example.com/p/abc+def+XyZqWeRtYuIoPaSd",
    "https://www.youtube.com/watch?v=dQw4w9WgXcQ",
    "https://www.notion.so/acme/Plan-0123456789abcdef0123456789abcdef",
]


@pytest.mark.parametrize("url", PLAIN)
def test_plain_urls_are_shown(url):
    assert url_is_plain(url)
    assert "[URL]" not in references_in_text(f"see {url} now", lambda u: "[URL]")


@pytest.mark.parametrize("url", SECRET)
def test_urls_that_may_carry_a_secret_become_references(url):
    assert not url_is_plain(url)
    seen: list[str] = []
    shown = references_in_text(f"see {url} now", lambda u: seen.append(u) or "[URL]")
    assert shown == "see [URL] now" and seen == [url]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(https://en.wikipedia.org/wiki/Seoul).", "(https://en.wikipedia.org/wiki/Seoul)."),
        ('{"u": "https://x.com/a?token=1"}', '{"u": "[URL]"}'),
        ("<https://x.com/a?token=1>", "<[URL]>"),
        ("https://example.com/a?q=%EA%B9%80", "https://example.com/a?q=김"),  # shown decoded
        ("hooks.slack.com/services/T0/B0/abc", "[URL]"),  # no scheme
        ("admin:hunter2@intranet.example.com/backup", "[URL]"),  # no scheme, user information
        ("_https://x.example/?token=1", "_[URL]"),  # glued to a word
        ("1https://x.example/?token=1", "1[URL]"),
        ("[doc](https://x.example/a?token=1)", "[doc]([URL])"),  # markdown
        ("HTTPS://X.EXAMPLE/A?TOKEN=1", "[URL]"),
        ("see https://x.example/it's?token=1 now", "see [URL] now"),  # an apostrophe inside
        (
            "{'u': 'https://x.example/ok', 'v': 'https://x.example/a?token=1'}",
            "{'u': 'https://x.example/ok', 'v': '[URL]'}",
        ),
    ],
)
def test_where_a_url_ends_and_how_a_plain_one_is_shown(text, expected):
    assert references_in_text(text, lambda u: "[URL]") == expected


@pytest.mark.parametrize(
    "uri", ["mailto:minji.kim%40example.com", "tel:+821098765432", "data:text/plain;base64,c2VjcmV0", "urn:x:abc"]
)
def test_opaque_uris_are_references(uri):
    assert references_in_text(f"at {uri}", lambda u: "[URL]") == "at [URL]"
