"""Found by adversarial review: PostgreSQL error messages print values UNQUOTED, and
`execute.scrub_error_message` only elides quoted parts.

Class: VALUE-FREE ERRORS (governance/sql/execute.py: scrub_error_message).
`make_date(2020, m, 1)` fails with "date field value out of range:
2020-<m>-01", `make_time(h, 0, 0)` with "time field value out of range:
<h>:00:00", `regexp_instr(s, p, -n)` with 'invalid value for parameter
"start": -<n>'. Any integer computed from a personal column (a character
code, or the phone's digits in one go) is echoed to the model AND into the
audit row's reason. It works on re-identified tokens too: the model recovers
the original behind a token it was given. Each test failed before the fix.
"""

from __future__ import annotations

import json

import pytest

from tests.support.governed import governed_connection

pytestmark = [pytest.mark.django_db, pytest.mark.services]

NAME = "김민준"
PHONE = "010-1234-5678"
PHONE_DIGITS = "1012345678"  # the phone as an integer: its digits without the leading 0


def _text(*things) -> str:
    return json.dumps(things, ensure_ascii=False, default=str)


def _audit_reasons(governed) -> str:
    return _text([row.reason for row in governed.audit_rows()])


@pytest.fixture
def governed(pg_customer_db, django_user_model):
    return governed_connection(pg_customer_db, django_user_model)


def test_make_date_error_prints_the_phone_digits(governed):
    # Class: VALUE-FREE ERRORS - unquoted number in a PostgreSQL error.
    payload, outcome = governed.run(
        "SELECT make_date(2020, replace(phone, '-', '')::int, 1) FROM customers WHERE id = 1"
    )
    assert outcome in ("failed", "denied"), payload
    assert PHONE_DIGITS not in _text(payload), payload  # "date field value out of range: 2020-1012345678-01"
    assert PHONE_DIGITS not in _audit_reasons(governed)  # guarantee 3: same text in ToolCallAudit.reason


def test_make_time_error_spells_the_name(governed):
    # Class: VALUE-FREE ERRORS - one character code per failed query.
    spelled = []
    for k in range(1, len(NAME) + 1):
        payload, outcome = governed.run(
            f"SELECT make_time(ascii(substr(name, {k}, 1)), 0, 0) FROM customers WHERE id = 1"
        )
        assert outcome in ("failed", "denied"), payload
        digits = payload["error"].rsplit(": ", 1)[-1].split(":", 1)[0]
        spelled.append(chr(int(digits)) if digits.isdigit() else "?")
    assert "".join(spelled) != NAME, payload


def test_regexp_instr_error_prints_a_character_code(governed):
    # Class: VALUE-FREE ERRORS - 'invalid value for parameter "start": -44608'.
    payload, outcome = governed.run(
        "SELECT regexp_instr('a', 'a', -ascii(substr(name, 1, 1))) FROM customers WHERE id = 1"
    )
    assert outcome in ("failed", "denied"), payload
    assert str(ord(NAME[0])) not in _text(payload), payload


def test_error_reveals_the_original_behind_a_token(governed):
    # Class: VALUE-FREE ERRORS + RE-IDENTIFICATION: the model holds only the
    # token; the substituted original comes back through the error text.
    token = governed.tokenise("phone", PHONE)
    payload, outcome = governed.run(f"SELECT make_date(2020, replace('{token}', '-', '')::int, 1)")
    assert outcome in ("failed", "denied"), payload
    assert PHONE_DIGITS not in _text(payload), payload
    assert PHONE_DIGITS not in _audit_reasons(governed)


def test_audit_reason_holds_the_phone_digits(governed):
    # Class: AUDIT TRAIL holds a result-derived value (the FAILED reason is the
    # scrubbed error text, chat/executor.py:_run_sql -> _audit_sql).
    governed.run("SELECT make_date(2020, replace(phone, '-', '')::int, 1) FROM customers WHERE id = 1")
    assert PHONE_DIGITS not in _audit_reasons(governed), _audit_reasons(governed)
