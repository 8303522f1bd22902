"""Re-identification: tokens in SQL string literals become originals again,
just before the query runs. The model writes `WHERE phone = '[전화번호-3]'`;
the database receives the real number.

The checked statement is the executed statement. The tokens are replaced in
the PARSED TREE, in plain string-literal nodes only, and the tree is rendered
once by the same parser's generator in the connection's dialect; the caller
then runs the guard again on that rendered text, and that text is what runs.
Splicing originals into the model's text instead would let a value change how
the text around it is read (an original ending in a backslash closes no
literal under some server settings); re-parsing the rendering and comparing
trees proves the values stayed values.

Only tokens of this conversation's vault are replaced; tokens in identifiers,
comments, E'', N'', dollar-quoted and other special strings, and unknown
tokens stay as written. Which originals went in is reported, so lineage can
taint every output that carries one and the known-value pass can find them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from governance.pii.masking import KIND_BY_LABEL, TOKEN_PATTERN
from governance.sql.dialects import parse_sql


class ReidentifyError(Exception):
    """The statement could not be re-identified faithfully; it must not run."""


@dataclass(frozen=True)
class Reidentified:
    sql: str  # what runs: the model's text when nothing was replaced, else the rendering
    substituted: dict[str, str] = field(default_factory=dict)  # original -> personal-data kind

    @property
    def changed(self) -> bool:
        return bool(self.substituted)


def reidentify_sql(sql: str, dialect: str, original_for: Callable[[str, int], str | None]) -> Reidentified:
    """Replace this conversation's tokens in string literals of `sql`.

    Raises ReidentifyError when the statement cannot be parsed as one
    statement, or its rendering does not parse back to the same tree."""
    if not TOKEN_PATTERN.search(sql):
        return Reidentified(sql)
    parser = Dialect.get_or_raise(dialect)
    try:
        statements = [s for s in parse_sql(dialect, sql) if s is not None and not isinstance(s, exp.Semicolon)]
    except Exception as error:
        raise ReidentifyError("the statement could not be parsed for re-identification") from error
    if len(statements) != 1:
        raise ReidentifyError("re-identification needs exactly one statement")
    tree = statements[0]
    substituted: dict[str, str] = {}

    def swap(match) -> str:
        kind = KIND_BY_LABEL[match.group(1)]
        original = original_for(kind, int(match.group(2)))
        if original is None:
            return match.group(0)
        substituted[original] = kind
        return original

    for literal in tree.find_all(exp.Literal):
        # exp.Literal with is_string is a plain '...' string in every
        # supported dialect; National, RawString, ByteString etc. are other
        # node types and keep their tokens.
        if type(literal) is not exp.Literal or not literal.is_string:
            continue
        text = literal.this
        if not isinstance(text, str) or not TOKEN_PATTERN.search(text):
            continue
        replaced = TOKEN_PATTERN.sub(swap, text)
        if replaced != text:
            literal.set("this", replaced)
    if not substituted:
        return Reidentified(sql)
    try:
        rendered = tree.sql(dialect=parser)
        reparsed = [s for s in parse_sql(dialect, rendered) if s is not None and not isinstance(s, exp.Semicolon)]
    except Exception as error:
        raise ReidentifyError("the re-identified statement could not be rendered") from error
    if len(reparsed) != 1 or reparsed[0] != tree:
        raise ReidentifyError("the re-identified statement does not read back as written")
    return Reidentified(rendered, substituted)
