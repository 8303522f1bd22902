"""Re-identification: tokens in SQL string literals become originals again,
just before the query runs (seed 000). The model writes
`WHERE phone = '[전화번호-3]'`; the database receives the real number.

Only tokens of this conversation's vault, and only inside plain string
literals, are replaced; tokens anywhere else (identifiers, comments) and
unknown tokens stay as written. The value is re-quoted as a literal with the
dialect's escaping, so an original containing a quote cannot break out.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from governance.pii.masking import TOKEN_PATTERN, replace_tokens


def _quote(value: str, dialect: str) -> str:
    if dialect == "mysql":
        # MySQL treats backslash as an escape character inside literals.
        value = value.replace("\\", "\\\\")
    return "'" + value.replace("'", "''") + "'"


def reidentify_sql(sql: str, dialect: str, original_for: Callable[[str, int], str | None]) -> str:
    if not TOKEN_PATTERN.search(sql):
        return sql
    pieces: list[str] = []
    position = 0
    for token in Dialect.get_or_raise(dialect).tokenize(sql):
        if token.token_type != TokenType.STRING or not TOKEN_PATTERN.search(token.text):
            continue
        source = sql[token.start : token.end + 1]
        if not source.startswith("'"):
            continue  # E'..', N'..', dollar quotes: leave the token as written
        replaced = replace_tokens(token.text, original_for)
        if replaced == token.text:
            continue
        pieces.append(sql[position : token.start])
        pieces.append(_quote(replaced, dialect))
        position = token.end + 1
    pieces.append(sql[position:])
    return "".join(pieces)
