"""Verification of a bound PostgreSQL statement, on its tokens.

Independent of how the rewrite in binding.py went: every operator token sits
inside OPERATOR(pg_catalog.…), every word before "(" is qualified with
pg_catalog or is grammar syntax, and no implicit-operator keyword (IN, LIKE,
BETWEEN, IS DISTINCT FROM, USING, NATURAL, CASE x WHEN) is left. Anything
else is refused: a construct the binder does not know fails closed.
"""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from governance.sql.dialects import POSTGRES

_PG = Dialect.get_or_raise(POSTGRES)
_CATALOG = "pg_catalog"

# The operators the binder writes; the guard accepts OPERATOR(pg_catalog.op)
# for exactly these. tests/test_sql_binding.py ties them to binding.OPERATORS.
BOUND_OPERATORS: frozenset[str] = frozenset(
    f"{_CATALOG}.{op}"
    for op in (
        "=",
        "<>",
        ">",
        ">=",
        "<",
        "<=",
        "+",
        "-",
        "*",
        "/",
        "%",
        "||",
        "&",
        "|",
        "#",
        "<<",
        ">>",
        "~~",
        "~~*",
        "~",
        "~*",
        "->",
        "->>",
        "#>",
        "#>>",
        "?",
        "?|",
        "?&",
        "@>",
        "<@",
        "&&",
        "@@",
    )
)

_T = TokenType
# Tokens that are (or may be) operators PostgreSQL looks up by name.
_OPERATOR_TOKENS = {
    getattr(_T, name)
    for name in (
        "EQ",
        "NEQ",
        "GT",
        "GTE",
        "LT",
        "LTE",
        "PLUS",
        "DASH",
        "STAR",
        "SLASH",
        "MOD",
        "CARET",
        "DPIPE",
        "AMP",
        "PIPE",
        "TILDA",
        "HASH",
        "LT_AT",
        "AT_GT",
        "ARROW",
        "DARROW",
        "HASH_ARROW",
        "DHASH_ARROW",
        "LR_ARROW",
        "PLACEHOLDER",
        "DAT",
        "NULLSAFE_EQ",
        "IRLIKE",
        "RLIKE",
        "NOT_RLIKE",
        "QMARK_AMP",
        "QMARK_PIPE",
        "DQMARK",
        "CARET_AT",
        "LT_LT",
        "GT_GT",
        "AMP_AMP",
        "PIPE_SLASH",
        "DPIPE_SLASH",
        "SLASH_SLASH",
        "EXCLAMATION",
        "DOLLAR",
    )
    if hasattr(_T, name)
}
# Keywords that make the server look an operator up implicitly.
_IMPLICIT_OPERATOR_KEYWORDS = {
    getattr(_T, name): word
    for name, word in (
        ("IN", "IN"),
        ("LIKE", "LIKE"),
        ("ILIKE", "ILIKE"),
        ("SIMILAR_TO", "SIMILAR TO"),
        ("BETWEEN", "BETWEEN"),
        ("USING", "USING"),
        ("NATURAL", "NATURAL"),
        ("IS", "IS"),
        ("LIKE_ANY", "LIKE ANY"),
        ("ILIKE_ANY", "ILIKE ANY"),
        ("GLOB", "GLOB"),
    )
    if hasattr(_T, name)
}
# Words PostgreSQL's grammar reads before "(" without a function lookup, or
# binds to pg_catalog itself.
_SYNTAX_CALLS = frozenset(
    {
        "cast",
        "coalesce",
        "greatest",
        "least",
        "extract",
        "substring",
        "position",
        "overlay",
        "trim",
        "exists",
        "array",
        "any",
        "all",
        "some",
        "over",
        "filter",
        "group",
        "grouping",
        "row",
        "values",
        "as",
        "from",
        "join",
        "lateral",
        "on",
        "select",
        "and",
        "or",
        "not",
        "when",
        "then",
        "else",
        "by",
        "with",
        "cube",
        "rollup",
        "sets",
        "distinct",
        "union",
        "intersect",
        "except",
        "materialized",
        "operator",
        "where",
        "having",
        "limit",
        "offset",
        "only",
        "first",
        "next",
        "rows",
        "range",
        "groups",
        "preceding",
        "following",
        "tablesample",
        "repeatable",
        "overlaps",
        "window",
        "partition",
        "grouping sets",
        "xmlelement",
        "xmlforest",
        "xmlconcat",
        "xmlpi",
        "xmlroot",
    }
)


_FRAME_WORDS = frozenset({"ROWS", "RANGE", "GROUPS"})


def unbound_reason(rendered: str) -> str | None:
    """Why the rendered statement still lets the server choose a function or
    operator by search path, or None when everything is bound."""
    tokens = _PG.tokenize(rendered)
    type_tokens = _PG.parser_class.TYPE_TOKENS
    count = len(tokens)
    bound_operator_at: set[int] = set()
    aliases = _alias_positions(tokens)
    for i, token in enumerate(tokens):
        kind = token.token_type
        if _is_operator_call(tokens, i):
            bound_operator_at.update(range(i, i + 6))
            continue
        if i in bound_operator_at:
            continue
        if kind in _IMPLICIT_OPERATOR_KEYWORDS:
            if kind == _T.BETWEEN and i and tokens[i - 1].text.upper() in _FRAME_WORDS:
                continue  # ROWS BETWEEN ... AND ...: a window frame, no operator
            if kind == _T.IS and _next_text(tokens, i, skip_not=True) != "distinct":
                continue  # IS [NOT] NULL / TRUE / FALSE / UNKNOWN: no operator
            if kind == _T.IN and _inside(tokens, i, "position"):
                continue
            return f"cannot bind {_IMPLICIT_OPERATOR_KEYWORDS[kind]} to pg_catalog"
        if kind == _T.CASE and (i + 1 >= count or tokens[i + 1].token_type != _T.WHEN):
            return "cannot bind CASE x WHEN to pg_catalog"
        if kind in _OPERATOR_TOKENS and not _harmless_symbol(tokens, i, bound_operator_at):
            return f"operator not bound to pg_catalog: {token.text}"
        if i + 1 < count and tokens[i + 1].token_type == _T.L_PAREN and i not in aliases:
            word = token.text.lower()
            qualified = i >= 2 and tokens[i - 1].token_type == _T.DOT and _is_catalog(tokens[i - 2])
            if qualified or (token.token_type != _T.IDENTIFIER and (word in _SYNTAX_CALLS or kind in type_tokens)):
                continue
            if " " in word and token.token_type != _T.IDENTIFIER:
                continue  # GROUP BY (, ORDER BY (, PARTITION BY (: a keyword of two words, never a name
            if i and tokens[i - 1].token_type == _T.TABLE_SAMPLE and word in ("system", "bernoulli"):
                continue  # the built-in sampling methods (the guard allows no other)
            if kind in (_T.L_PAREN, _T.R_PAREN, _T.COMMA, _T.L_BRACKET, _T.R_BRACKET):
                continue
            return f"function not bound to pg_catalog: {word}"
    return None


def _is_catalog(token: Token) -> bool:
    # A quoted name is compared exactly: "PG_CATALOG" is another schema.
    text = token.text if token.token_type == _T.IDENTIFIER else token.text.lower()
    return text == _CATALOG


def _is_operator_call(tokens: list[Token], i: int) -> bool:
    # OPERATOR ( pg_catalog . op )
    if tokens[i].text.upper() != "OPERATOR" or i + 5 >= len(tokens):
        return False
    return (
        tokens[i + 1].token_type == _T.L_PAREN
        and _is_catalog(tokens[i + 2])
        and tokens[i + 3].token_type == _T.DOT
        and tokens[i + 5].token_type == _T.R_PAREN
        and f"{_CATALOG}.{tokens[i + 4].text}" in BOUND_OPERATORS
    )


# Tokens after which a minus sign starts an operand (a negative number),
# never ends one: an allowlist, since many keywords end operands (END,
# CURRENT_DATE, NULL) and a minus after them would be an unbound operator.
_BEFORE_A_SIGN = frozenset(
    {_T.L_PAREN, _T.COMMA, _T.L_BRACKET, _T.SELECT, _T.THEN, _T.ELSE, _T.WHEN, _T.AND, _T.OR, _T.NOT, _T.FARROW}
)


def _harmless_symbol(tokens: list[Token], i: int, bound_at: set[int]) -> bool:
    kind = tokens[i].token_type
    following = tokens[i + 1] if i + 1 < len(tokens) else None
    previous = tokens[i - 1] if i else None
    if kind == _T.STAR:
        # SELECT *, t.*, count(*): never between two operands.
        return following is None or following.token_type in (_T.R_PAREN, _T.COMMA, _T.FROM)
    if kind == _T.DASH:
        # A minus sign on a number literal folds into the constant.
        if following is None or following.token_type != _T.NUMBER or previous is None:
            return False
        return (i - 1) in bound_at or previous.token_type in _BEFORE_A_SIGN
    return False


def _next_text(tokens: list[Token], i: int, skip_not: bool = False) -> str:
    j = i + 1
    if skip_not and j < len(tokens) and tokens[j].token_type == _T.NOT:
        j += 1
    return tokens[j].text.lower() if j < len(tokens) else ""


def _inside(tokens: list[Token], i: int, word: str) -> bool:
    """Whether token i sits directly inside `word(...)`."""
    depth = 0
    for j in range(i - 1, 0, -1):
        kind = tokens[j].token_type
        if kind == _T.R_PAREN:
            depth += 1
        elif kind == _T.L_PAREN:
            if depth == 0:
                return tokens[j - 1].text.lower() == word
            depth -= 1
    return False


def _alias_positions(tokens: list[Token]) -> set[int]:
    """Words before "(" that name an alias column list, not a call: `AS g(n)`
    and a CTE name `WITH r(n) AS` / `, r(n) AS`."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for j, token in enumerate(tokens):
        if token.token_type == _T.L_PAREN:
            stack.append(j)
        elif token.token_type == _T.R_PAREN and stack:
            closing[stack.pop()] = j
    positions = set()
    for i in range(1, len(tokens) - 1):
        if tokens[i + 1].token_type != _T.L_PAREN:
            continue
        before = tokens[i - 1].token_type
        if before == _T.ALIAS:
            positions.add(i)
            continue
        end = closing.get(i + 1)
        after_list = tokens[end + 1].token_type if end is not None and end + 1 < len(tokens) else None
        if after_list == _T.ALIAS and before in (_T.WITH, _T.COMMA, _T.RECURSIVE):
            positions.add(i)  # name ( columns ) AS ( ...: a CTE with a column list
    return positions
