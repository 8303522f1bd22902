"""Tokens in SQL string literals become originals; nothing else does."""

from __future__ import annotations

import pytest

from governance.pii.masking import InMemoryVault
from governance.pii.reidentify import reidentify_sql


@pytest.fixture
def vault():
    vault = InMemoryVault()
    assert vault.token_for("phone", "010-1234-5678") == "[전화번호-1]"
    assert vault.token_for("name", "O'Brien") == "[이름-1]"
    assert vault.token_for("name", "back\\slash") == "[이름-2]"
    return vault


@pytest.mark.parametrize(
    ("dialect", "sql", "expected"),
    [
        ("postgres", "SELECT * FROM c WHERE phone = '[전화번호-1]'", "SELECT * FROM c WHERE phone = '010-1234-5678'"),
        ("postgres", "SELECT * FROM c WHERE name = '[이름-1]'", "SELECT * FROM c WHERE name = 'O''Brien'"),
        ("mysql", "SELECT * FROM c WHERE name = '[이름-2]'", "SELECT * FROM c WHERE name = 'back\\\\slash'"),
        ("sqlite", "SELECT '[전화번호-1] and [전화번호-7]'", "SELECT '010-1234-5678 and [전화번호-7]'"),
        # Not in a literal: a comment and an identifier keep the token.
        ("postgres", "SELECT 1 /* [전화번호-1] */", "SELECT 1 /* [전화번호-1] */"),
        ("postgres", 'SELECT "[전화번호-1]" FROM t', 'SELECT "[전화번호-1]" FROM t'),
        # Unknown to this vault: stays.
        ("postgres", "SELECT * FROM c WHERE phone = '[전화번호-2]'", "SELECT * FROM c WHERE phone = '[전화번호-2]'"),
        ("postgres", "SELECT 1", "SELECT 1"),
    ],
)
def test_reidentify(vault, dialect, sql, expected):
    assert reidentify_sql(sql, dialect, vault.original_for) == expected


def test_another_conversations_token_is_not_reidentified(vault):
    other = InMemoryVault()
    sql = "SELECT * FROM c WHERE phone = '[전화번호-1]'"
    assert reidentify_sql(sql, "postgres", other.original_for) == sql
