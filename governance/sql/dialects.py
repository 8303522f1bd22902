"""The SQL dialects OwlAI reads customer SQL in: the one list, and how each
maps to a connection engine and to its default schemas.

Every module that takes a dialect (guard, lineage, table grants, function
allowlists, the `sql_check` command) uses these names; tests/test_vocabulary.py
ties them together.
"""

from __future__ import annotations

import functools
from copy import deepcopy
from typing import NamedTuple

# sqlglot's names for the dialects of the supported engines.
POSTGRES = "postgres"
MYSQL = "mysql"
SQLITE = "sqlite"
SUPPORTED_DIALECTS: tuple[str, ...] = (POSTGRES, MYSQL, SQLITE)

# Connection engine (governance.models.DbEngine values) -> dialect. Callers
# may also pass an engine name where a dialect is expected: `dialect_of`
# accepts both.
DIALECT_BY_ENGINE: dict[str, str] = {"postgresql": POSTGRES, "mysql": MYSQL, "sqlite": SQLITE}
_ALIASES = {**DIALECT_BY_ENGINE, "mariadb": MYSQL, "sqlite3": SQLITE, **{d: d for d in SUPPORTED_DIALECTS}}

# The schemas a bare table name resolves to, per dialect. A reference
# qualified with one of these is the same table as the bare name. MySQL's
# default "schema" is the connection's database, which has no fixed name.
DEFAULT_SCHEMAS: dict[str, frozenset[str]] = {
    POSTGRES: frozenset({"public"}),
    SQLITE: frozenset({"main"}),
    MYSQL: frozenset(),
}


def dialect_of(name: str) -> str:
    """The dialect for a dialect or engine name; ValueError for anything else."""
    dialect = _ALIASES.get(str(name).lower())
    if dialect is None:
        raise ValueError(f"unsupported SQL dialect {name!r}; expected one of {SUPPORTED_DIALECTS}")
    return dialect


# Schemas that hold the server's own catalogs, statistics and activity views,
# never company data: a whole-database grant never covers them, even if an
# admin lists one as a connection schema. PostgreSQL reserves every schema
# name starting with "pg_" (pg_catalog, pg_toast, pg_temp_N, ...).
SYSTEM_SCHEMAS: dict[str, frozenset[str]] = {
    POSTGRES: frozenset({"information_schema"}),
    MYSQL: frozenset({"mysql", "information_schema", "performance_schema", "sys"}),
    SQLITE: frozenset({"temp"}),
}
SYSTEM_SCHEMA_PREFIXES: dict[str, tuple[str, ...]] = {POSTGRES: ("pg_",), MYSQL: (), SQLITE: ()}


def is_system_schema(name: str, dialect: str) -> bool:
    name = name.lower()
    return name in SYSTEM_SCHEMAS[dialect] or name.startswith(SYSTEM_SCHEMA_PREFIXES[dialect])


def configured_schemas(dialect: str, configured: object) -> tuple[str, ...]:
    """The schemas a whole-database grant covers on a connection: the
    connection's configured list (DbConnection.schemas) in order, without
    blanks, duplicates and system schemas; blank means the dialect default
    (`public`, `main`; none for MySQL, where only unqualified names, i.e. the
    DSN's database, are covered). Names keep their spelling: PostgreSQL's
    search_path needs it; the grant layer compares them case-insensitively.

    The execution layer pins PostgreSQL's search_path to exactly these, so an
    unqualified name that is not pg_* is a table in one of them."""
    names = [n.strip() for n in configured if isinstance(n, str)] if isinstance(configured, (list, tuple)) else []
    names = [n for n in names if n]
    result: list[str] = []
    for name in names:
        if not is_system_schema(name, dialect) and name.lower() not in {r.lower() for r in result}:
            result.append(name)
    if not names:  # blank: the default (a list of only system schemas stays empty)
        return tuple(sorted(DEFAULT_SCHEMAS[dialect]))
    return tuple(result)


# --------------------------------------------------------------------------
# Parsing: sqlglot's dialects with OwlAI's fixes
# --------------------------------------------------------------------------

# sqlglot reads `f(x -> 'a', ...)` (a bare name, then `->`, as a function's
# argument) as a lambda in every dialect, where PostgreSQL, MySQL and SQLite
# read the JSON arrow: COALESCE(j -> 'a', '{}') was denied as a lambda, and a
# chain `lower(j -> 'a' ->> 'b')` came out right-associated. Not reported
# upstream (lambdas are a feature of other dialects); fixed here by reading
# such an argument as `(name -> ...)` before the parser sees it, which the
# servers read the same way. The compiled parser (sqlglotc) cannot be
# subclassed, so the fix is on the token list.


# True once governance/pii (lineage, re-identification) parse with parse_sql.
# Until then they still read such an argument as a lambda, whose name is no
# column to them (its personal data would go unmasked), so the guard refuses
# a statement the fix changes and names the parenthesised form, which every
# reading agrees on.
JSON_ARROW_FIX_EVERYWHERE = True


def lambda_free(tokens: list) -> list:
    """`tokens` with every `name -> ...` function argument parenthesised (the
    same list object when there is none)."""
    from sqlglot.tokens import Token, TokenType

    arrow = TokenType.ARROW
    if not any(token.token_type == arrow for token in tokens):
        return tokens  # the common case: one pass, nothing to fix
    count = len(tokens)
    argument_starts = _call_argument_starts(tokens)
    closes_before: dict[int, int] = {}  # token index -> parentheses to insert before it
    opens_before: set[int] = set()
    for i, token in enumerate(tokens):
        if not (
            0 < i < count - 1
            and tokens[i + 1].token_type == TokenType.ARROW
            and token.token_type not in (TokenType.STRING, TokenType.NUMBER, TokenType.R_PAREN)
            and i in argument_starts
        ):
            continue
        end, depth = i + 1, 0
        while end < count:  # the end of this argument: `,` or `)` at its depth
            kind = tokens[end].token_type
            if kind in (TokenType.L_PAREN, TokenType.L_BRACKET):
                depth += 1
            elif kind in (TokenType.R_PAREN, TokenType.R_BRACKET):
                if depth == 0:
                    break
                depth -= 1
            elif kind == TokenType.COMMA and depth == 0:
                break
            end += 1
        opens_before.add(i)
        closes_before[end] = closes_before.get(end, 0) + 1
    if not opens_before:
        return tokens
    fixed = []
    for i, token in enumerate(tokens):
        for _ in range(closes_before.get(i, 0)):
            last = fixed[-1]
            fixed.append(Token(TokenType.R_PAREN, ")", last.line, last.col, last.end + 1, last.end))
        if i in opens_before:
            fixed.append(Token(TokenType.L_PAREN, "(", token.line, token.col, token.start, token.start - 1))
        fixed.append(token)
    for _ in range(closes_before.get(count, 0)):
        last = fixed[-1]
        fixed.append(Token(TokenType.R_PAREN, ")", last.line, last.col, last.end + 1, last.end))
    return fixed


def _call_argument_starts(tokens: list) -> set[int]:
    """Indexes of the tokens that start a function call's argument: right
    after `f(` or after a `,` directly inside one. A grouping `(` or a select
    list's `,` is no call (`((x -> 'a'))`, `SELECT j -> 'a', ...` already
    read as the arrow). A function's name is a plain or quoted name, not a
    keyword; a keyword-named one (LEFT) keeps the lambda reading, which the
    guard denies."""
    from sqlglot.tokens import TokenType

    names = (TokenType.VAR, TokenType.IDENTIFIER)
    starts: set[int] = set()
    stack: list[bool] = []  # per open parenthesis: is it a call's?
    for i, token in enumerate(tokens):
        kind = token.token_type
        if kind == TokenType.L_PAREN:
            is_call = i > 0 and tokens[i - 1].token_type in names
            stack.append(is_call)
            if is_call:
                starts.add(i + 1)
        elif kind == TokenType.R_PAREN:
            if stack:
                stack.pop()
        elif kind == TokenType.COMMA and stack and stack[-1]:
            starts.add(i + 1)
    return starts


def parse_tokens(dialect: str, tokens: list, sql: str) -> list:
    """Parse an already tokenized statement the way every OwlAI check reads
    SQL (sqlglot plus the fixes above)."""
    return sql_dialect(dialect).parser().parse(lambda_free(tokens), sql)


def parse_sql(dialect: str, sql: str) -> list:
    """Tokenize and parse `sql`; what the guard, the binder, lineage and
    re-identification must all use, so that they read the same tree.

    Every caller gets a tree of its own (lineage's qualify rewrites the one
    it is given), copied from the one parse the guard reads (`parsed`): a
    call's statement is also read by the binder, and by lineage for its
    outputs, its literals and its row count."""
    return [copy_tree(statement) if statement is not None else None for statement in parsed(dialect, sql).statements]


class Parsed(NamedTuple):
    """One statement text as tokenized and parsed. Shared by every reader of
    that text in the process: read it, never change it (the tokens, the
    trees, their nodes); `parse_sql` hands out trees to change."""

    tokens: list  # as tokenized, before lambda_free
    rewritten: bool  # lambda_free changed them: the parser read a fixed list
    statements: tuple  # the parser's output (None for an empty chunk)


@functools.lru_cache(maxsize=256)
def parsed(dialect: str, sql: str) -> Parsed:
    """`sql` tokenized and parsed once per process (ValueError for an
    unsupported dialect; sqlglot's ParseError / TokenError, never cached, for
    text it cannot read). The guard reads it as it is, without a copy."""
    tokens = sql_dialect(dialect).tokenize(sql)
    fixed = lambda_free(tokens)
    statements = tuple(sql_dialect(dialect).parser().parse(fixed, sql))
    return Parsed(tokens, fixed is not tokens, statements)


_PLAIN_META = (int, str, bool, float, type(None))


def copy_tree(root):
    """A deep copy of a sqlglot tree, equal to `root.copy()`. sqlglot's copy
    deep-copies each node's position dict (`meta`) through the copy module,
    most of a copy's time; a parsed tree's positions are numbers, so those
    dicts are copied flat (anything else in one is still deep-copied)."""
    from sqlglot import exp

    expression = exp.Expr
    copy = root.__class__()
    stack = [(root, copy)]
    while stack:
        node, into = stack.pop()
        if node.comments is not None:
            into.comments = list(node.comments)  # strings
        if node._type is not None:
            into._type = deepcopy(node._type)
        meta = node._meta
        if meta is not None:
            into._meta = dict(meta) if all(type(value) in _PLAIN_META for value in meta.values()) else deepcopy(meta)
        if node._hash is not None:
            into._hash = node._hash
        args = into.args
        for key, value in node.args.items():
            if isinstance(value, expression):
                child = value.__class__()
                stack.append((value, child))
                into.set(key, child)
            elif type(value) is list:
                args[key] = []
                for item in value:
                    if isinstance(item, expression):
                        child = item.__class__()
                        stack.append((item, child))
                        into.append(key, child)
                    else:
                        into.append(key, item)
            else:
                args[key] = value
    return copy


def sql_dialect(dialect: str):
    """sqlglot's Dialect object for one of SUPPORTED_DIALECTS."""
    if dialect not in SUPPORTED_DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r}")
    return _dialect(dialect)


@functools.lru_cache(maxsize=len(SUPPORTED_DIALECTS))
def _dialect(dialect: str):
    # One instance per dialect, as the guard keeps them (sqlglot builds a new
    # one per lookup; its settings never change after construction).
    from sqlglot.dialects.dialect import Dialect

    return Dialect.get_or_raise(dialect)
