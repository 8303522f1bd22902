"""Tokens in SQL string literals become originals in the parsed tree; the
rendering is what runs, and it reads back as the same tree."""

from __future__ import annotations

import pytest

from governance.pii.masking import InMemoryVault
from governance.pii.reidentify import ReidentifyError, reidentify_sql
from governance.sql.guard import analyse_sql


@pytest.fixture
def vault():
    vault = InMemoryVault()
    assert vault.token_for("phone", "010-1234-5678") == "[전화번호-1]"
    assert vault.token_for("name", "O'Brien") == "[이름-1]"
    assert vault.token_for("name", "back\\slash") == "[이름-2]"
    assert vault.token_for("name", "ends with\\") == "[이름-3]"
    assert vault.token_for("name", "x'); DROP TABLE c; --") == "[이름-4]"
    return vault


@pytest.mark.parametrize(
    ("dialect", "sql", "expected"),
    [
        ("postgres", "SELECT * FROM c WHERE phone = '[전화번호-1]'", "SELECT * FROM c WHERE phone = '010-1234-5678'"),
        ("postgres", "SELECT * FROM c WHERE name = '[이름-1]'", "SELECT * FROM c WHERE name = 'O''Brien'"),
        ("mysql", "SELECT * FROM c WHERE name = '[이름-2]'", "SELECT * FROM c WHERE name = 'back\\\\slash'"),
        ("sqlite", "SELECT '[전화번호-1] and [전화번호-7]'", "SELECT '010-1234-5678 and [전화번호-7]'"),
        ("sqlite", "SELECT * FROM c WHERE name = '[이름-4]'", "SELECT * FROM c WHERE name = 'x''); DROP TABLE c; --'"),
    ],
)
def test_reidentify_renders_the_tree(vault, dialect, sql, expected):
    result = reidentify_sql(sql, dialect, vault.original_for)
    assert result.sql == expected
    assert result.changed


@pytest.mark.parametrize(
    ("dialect", "sql"),
    [
        # Not in a plain literal: a comment, an identifier, special strings keep the token.
        ("postgres", "SELECT 1 /* [전화번호-1] */"),
        ("postgres", 'SELECT "[전화번호-1]" FROM t'),
        ("postgres", "SELECT $$[전화번호-1]$$"),
        ("postgres", "SELECT N'[전화번호-1]'"),
        # Unknown to this vault: stays, and the text is not re-rendered.
        ("postgres", "SELECT * FROM c WHERE phone = '[전화번호-2]'"),
        ("postgres", "select   1"),
    ],
)
def test_nothing_replaced_runs_the_text_as_written(vault, dialect, sql):
    result = reidentify_sql(sql, dialect, vault.original_for)
    assert result.sql == sql and not result.changed and result.substituted == {}


def test_substituted_originals_are_reported_with_their_kind(vault):
    result = reidentify_sql(
        "SELECT upper('[이름-1]') FROM c WHERE phone IN ('[전화번호-1]', '[전화번호-9]')",
        "postgres",
        vault.original_for,
    )
    assert result.substituted == {"O'Brien": "name", "010-1234-5678": "phone"}


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_an_original_ending_in_a_backslash_stays_a_value(vault, dialect):
    """The rendering quotes the value for the dialect; read back it is the
    same one literal, so nothing after it turns into code."""
    sql = "SELECT id FROM c WHERE name = '[이름-3]' OR name = 'x'"
    result = reidentify_sql(sql, dialect, vault.original_for)
    verdict = analyse_sql(result.sql, dialect)
    # Either the guard accepts the rendering as the same two-literal query,
    # or it refuses it as ambiguous; it never reads a different statement.
    if verdict.allowed:
        assert verdict.tables == ("c",)
        assert result.sql.count("OR") == 1


def test_multiple_statements_are_refused(vault):
    with pytest.raises(ReidentifyError):
        reidentify_sql("SELECT '[이름-1]'; SELECT 2", "postgres", vault.original_for)


def test_another_conversations_token_is_not_reidentified(vault):
    other = InMemoryVault()
    sql = "SELECT * FROM c WHERE phone = '[전화번호-1]'"
    assert reidentify_sql(sql, "postgres", other.original_for).sql == sql
