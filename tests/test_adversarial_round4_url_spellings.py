"""Found by adversarial review (round 4): a secret-bearing URL in another
SPELLING of its separators reached the model in clear.

Class: URL REFERENCES / SPELLINGS. chat.url_references finds URLs by their
ASCII separators (``://``, ``/``, ``?``). Written with JSON-escaped slashes
(``https:\\/\\/hooks.slack.com\\/services\\/…``: PHP's json_encode writes
every slash that way, and such text sits in database columns and documents
as it is), ``\\u002f`` escapes, HTML character references, full-width forms or
look-alike slashes, the webhook URL matched nothing and was shown as
written; a reader (the model) takes it for the URL. The connector client
already spells its output one way (governance.connectors.spelling), SQL
cells and document hits did not.

Fix: references_in_text also reads the text in that spelling (JSON escapes,
NFKC, HTML references, look-alike slashes); a URL that is not plain there is
a reference, and the text is shown in that spelling. Each test failed
before the fix.
"""

from __future__ import annotations

import json

import pytest

from chat.url_references import references_in_text
from tests.support.governed import governed_connection

SECRET = "XXXXXXXXXXXXXXXXXXXXXXXX"


def assert_shown_as_reference(text: str, secret: str) -> None:
    """`secret` is gone from what the model is shown, behind a reference,
    and every reference made holds it (none is made for nothing)."""
    seen: list[str] = []
    shown = references_in_text(text, lambda url: seen.append(url) or "[URL-1]")
    assert secret not in shown and "[URL-1]" in shown, shown
    assert seen and all(secret in url for url in seen), seen


RESPELLED = [
    '{"hook":"https:\\/\\/hooks.slack.com\\/services\\/T000\\/B000\\/' + SECRET + '"}',
    "https:\\\\/\\\\/hooks.slack.com\\\\/services\\\\/T0\\\\/B0\\\\/" + SECRET,
    "https\\u003a\\u002f\\u002fhooks.slack.com\\u002fservices\\u002fT0\\u002fB0\\u002f" + SECRET,
    "https&#58;&#47;&#47;hooks&#46;slack&#46;com&#47;services&#47;T0&#47;B0&#47;" + SECRET,
    "https:&sol;&sol;hooks.slack.com&sol;services&sol;T0&sol;B0&sol;" + SECRET,
    "https:\u2215\u2215hooks.slack.com\u2215services\u2215T0\u2215B0\u2215" + SECRET,
    "ｈｔｔｐｓ：／／hooks.slack.com／services／T0／B0／" + SECRET,
    "https:\\/\\/deploy:" + SECRET + "@git.example.com\\/repo.git",
]


@pytest.mark.parametrize("text", RESPELLED)
def test_a_respelled_secret_url_becomes_a_reference(text):
    assert_shown_as_reference(text, SECRET)


@pytest.mark.parametrize(
    "text",
    [
        "https:\\/\\/en.wikipedia.org\\/wiki\\/Seoul",  # a plain URL stays as written
        "a\\/b and c&amp;d",
        "고객 메모: 배송 전 연락",
        "ｆｕｌｌ ｗｉｄｔｈ ｔｅｘｔ",
    ],
)
def test_text_without_a_secret_url_stays_as_written(text):
    assert references_in_text(text, lambda url: "[URL-1]") == text


@pytest.mark.django_db
@pytest.mark.services
def test_pg_a_json_escaped_webhook_in_a_cell_becomes_a_reference(pg_customer_db, django_user_model):
    governed = governed_connection(pg_customer_db, django_user_model)
    payload, outcome = governed.run(
        "SELECT o.id, 'https:\\/\\/hooks.slack.com\\/services\\/T000\\/B000\\/' || o.id || 'XXXXXXXXXXXXXXXX' "
        "FROM orders o WHERE o.id = 1"
    )
    assert outcome == "success", payload
    shown = json.dumps(payload)
    assert "XXXXXXXXXXXXXXXX" not in shown and "[URL-" in shown, shown


# A password in an authority with nothing after it (a DSN without its
# scheme) matched no URL shape (they need a scheme or a path) and stayed in
# clear. Failed before the fix.
@pytest.mark.parametrize(
    "text",
    [
        "admin:" + SECRET + "@db.internal",
        "접속 정보 app:" + SECRET + "@10.0.0.5:5432 입니다",
        "(svc_user:" + SECRET + "@db-primary)",
    ],
)
def test_a_password_in_a_bare_authority_becomes_a_reference(text):
    assert_shown_as_reference(text, SECRET)


@pytest.mark.parametrize(
    "text",
    ["이메일:kim@example.com", "회의 10:30 kim@example.com", "비율 3:1@ 기준", "kim@example.com"],
)
def test_a_label_or_a_time_before_an_email_is_not_an_authority(text):
    assert references_in_text(text, lambda url: "[URL-1]") == text


# A secret-named parameter cut off its URL (here by an ideographic space:
# the URL ends at a blank) or written on its own stayed in clear. Failed
# before the fix.
@pytest.mark.parametrize(
    "text, secret",
    [
        ("https://x.example/a?page=1\u3000token=" + SECRET, SECRET),
        ("https://x.example/a?page=1\u00a0&access_token=" + SECRET, SECRET),
        ("재발급 refresh_token=" + SECRET + " 사용", SECRET),
        ("X-Amz-Signature=" + SECRET, SECRET),
        ("mytoken=" + SECRET + ";", SECRET),
        ("client_secret=" + SECRET, SECRET),
    ],
)
def test_a_secret_named_parameter_outside_a_url_becomes_a_reference(text, secret):
    assert_shown_as_reference(text, secret)


@pytest.mark.parametrize(
    "text",
    ["keyword=매출&lang=ko", "passwordless=yes", "a=1, b=22", "WHERE sig=1", "token=ab", "x == y"],
)
def test_other_parameters_and_equations_stay_as_written(text):
    assert references_in_text(text, lambda url: "[URL-1]") == text
