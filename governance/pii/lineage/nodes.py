"""Lineage's vocabulary and its pure helpers over sqlglot trees."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from sqlglot import exp

from governance.pii.lineage.names import _DOUBT_KIND, _PURE_TABLE_FUNCTIONS, _SEVERITY, _SEVERITY_RANK, _function_names
from governance.sql.dialects import SUPPORTED_DIALECTS

Source = tuple[str, str]  # (schema key, lowercased column)
Taint = tuple[str, str]  # (kind, why): a personal-data source that is not a schema column
# What a walk found: real-table sources, other taints, labels of exemptions used ("count").
_Found = tuple[frozenset[Source], frozenset[Taint], frozenset[str]]
_NOTHING: _Found = (frozenset(), frozenset(), frozenset())


@dataclass(frozen=True)
class OutputColumn:
    index: int
    name: str  # output name as the DB will label it (alias or column name) - best effort
    pii_kind: str | None  # kind of the PII source (most severe if several); None if not derived from PII
    sources: tuple[tuple[str, str], ...]  # (table, column) sources read, PII ones first
    reason: str  # short: "derived from customers.phone", "count only", "lineage unresolved: ...; masked (doubt)"
    # Only the model's own literals (and known functions of them): nothing is
    # read and nothing re-identified, so the output says nothing the model
    # did not write (not matched against the vault: no membership oracle).
    literal: bool = False
    # The output is a schema column passed on unchanged (through derived
    # tables, CTEs and set operations that select it as is): each cell is a
    # value the database holds, never one the statement computed. Only such
    # a value may become a known value (searched for in later outputs) or
    # share its token with an equal value: a computed one (``ascii(name)``,
    # ``substr(phone, 5, 4)``, ``CASE WHEN ... THEN g END``) can be made to
    # equal any value the model chooses, and a token or a known-value match
    # shared with it would say which (a codebook).
    unchanged: bool = False


class _Unresolved(Exception):
    """Lineage cannot be decided positively; the message says why (short)."""


_NOT_LITERAL = (
    exp.Column,
    exp.TableColumn,
    exp.Star,
    exp.Query,
    exp.Anonymous,
    exp.Parameter,
    exp.Placeholder,
    exp.SessionParameter,
)


def _literal_items(query: exp.Expr) -> list[bool] | None:
    """Per output of `query` as written: is it made of literals only?"""
    if isinstance(query, exp.Subquery):
        return _literal_items(query.this)
    if isinstance(query, exp.SetOperation):
        left, right = _literal_items(query.this), _literal_items(query.expression)
        if left is None or right is None or len(left) != len(right):
            return None
        return [a and b for a, b in zip(left, right, strict=True)]
    if isinstance(query, exp.Values):
        rows = [row.expressions if isinstance(row, exp.Tuple) else [row] for row in query.expressions]
        width = len(rows[0]) if rows else 0
        if any(len(row) != width for row in rows):
            return None
        return [all(row[i].find(*_NOT_LITERAL) is None for row in rows) for i in range(width)]
    if isinstance(query, exp.Select):
        if query.args.get("with_") is not None:
            return None
        return [item.find(*_NOT_LITERAL) is None for item in query.selects]
    return None


_ROW_SHAPE_WORDS = re.compile(
    r"\b(?:recursive|limit|offset|fetch|top|group|distinct|union|intersect|except|minus|join|lateral|"
    r"unnest|values|having|connect|generate_series|generate_subscripts|json_\w+|jsonb_\w+|regexp_\w+|"
    r"string_to_table|\w*series\w*)\b",
    re.IGNORECASE,
)
_FROM_LIST = re.compile(r"\bfrom\b.*,|\bfrom\s+(?:[\w$\"`]+\s*\.\s*)?[\w$\"`]+\s*\(", re.IGNORECASE | re.DOTALL)


def _kind(value: object) -> str | None:
    """Schema values are kind ids ("phone"), possibly a str Enum; "" / None
    mean not personal data."""
    if not value:
        return None
    value = getattr(value, "value", value)
    return str(value) if value else None


def _severity(kind: str) -> int:
    return _SEVERITY_RANK.get(kind, len(_SEVERITY))


def _most_severe(kinds: Iterable[str]) -> str | None:
    return min(kinds, key=_severity, default=None)


def _merge(results: Iterable[_Found]) -> _Found:
    sources: set[Source] = set()
    taints: set[Taint] = set()
    labels: set[str] = set()
    for found_sources, found_taints, found_labels in results:
        sources |= found_sources
        taints |= found_taints
        labels |= found_labels
    return frozenset(sources), frozenset(taints), frozenset(labels)


@functools.cache
def _is_count_type(node_type: type[exp.Expr]) -> bool:
    return issubclass(node_type, exp.Count)


def _is_count(node: exp.Expr) -> bool:
    """COUNT(...), also under FILTER (WHERE ...): a number of rows."""
    if _is_count_type(type(node)):
        return True
    return type(node) is exp.Filter and isinstance(node.this, exp.Expr) and _is_count_type(type(node.this))


def _count_parts(node: exp.Expr) -> tuple[exp.Expr, exp.Expr | None, list[exp.Expr] | None]:
    """(the COUNT node, its FILTER condition or None, the counted expressions)
    of a node :func:`_is_count` accepts. The counted expressions are None for
    ``COUNT(*)`` and ``[x]`` / ``[x, y]`` for ``COUNT([DISTINCT] x[, y])``."""
    condition = None
    if type(node) is exp.Filter:
        where = node.expression
        condition = where.this if isinstance(where, exp.Where) else where
        node = node.this
    argument = node.this
    extra = _child_expressions(node.args.get("expressions"))
    if isinstance(argument, exp.Star) and not extra:
        return node, condition, None
    predicate = _case_filter(argument) if not extra and condition is None else None
    if predicate is not None:
        # count(CASE WHEN p THEN 1 END) is count(*) FILTER (WHERE p)
        return node, predicate, None
    if isinstance(argument, exp.Distinct):
        counted = _child_expressions(argument.args.get("expressions"))
        if argument.args.get("on") is not None:
            counted.append(argument.args["on"])
    else:
        counted = _child_expressions(argument)
    return node, condition, [*counted, *extra]


def _sort_key(key: exp.Expr) -> exp.Expr:
    """A sort / grouping key without ASC / DESC, parentheses or COLLATE,
    which order the same values differently but compute nothing from them."""
    while isinstance(key, (exp.Ordered, exp.Paren, exp.Collate)) and isinstance(key.this, exp.Expr):
        key = key.this
    return key


def _case_filter(node: object) -> exp.Expr | None:
    """``p`` when ``node`` is ``CASE WHEN p THEN <number> [ELSE NULL] END``
    or ``IF(p, <number>, NULL)``: counting it is counting the rows where
    ``p`` holds (a FILTER); else None."""
    if type(node) is exp.Case and not node.args.get("this") and len(node.args.get("ifs") or []) == 1:
        branch, otherwise = node.args["ifs"][0], node.args.get("default")
    elif type(node) is exp.If:
        branch, otherwise = node, node.args.get("false")
    else:
        return None
    predicate, value = branch.args.get("this"), branch.args.get("true")
    if otherwise is not None and type(otherwise) is not exp.Null:
        return None
    if type(value) is not exp.Literal or value.is_string or not isinstance(predicate, exp.Expr):
        return None
    return predicate


# Functions that return several rows from a SELECT list (PostgreSQL
# set-returning functions): in a row source that a count counts, they
# multiply its rows by whatever their arguments read.
_SET_RETURNING_TYPES: tuple[type[exp.Expr], ...] = (exp.UDTF, exp.GenerateSeries)


@functools.cache
def _known_scalar_functions() -> frozenset[str]:
    """Functions some dialect's guard allowlist admits that are not in
    _PURE_TABLE_FUNCTIONS: scalar by review (tests/test_sql_allowlist.py
    checks every PostgreSQL entry that returns a set is listed there)."""
    from governance.sql.functions import allowed_functions

    names: set[str] = set()
    for dialect in SUPPORTED_DIALECTS:
        names |= allowed_functions(dialect)
    return frozenset(names - _PURE_TABLE_FUNCTIONS)


def _is_set_returning(node: exp.Expr) -> bool:
    """A function that may return several rows. A function sqlglot does not
    know (exp.Anonymous) may, unless the allowlists know it as scalar."""
    if isinstance(node, _SET_RETURNING_TYPES):
        return True
    if isinstance(node, exp.Anonymous) and node.name.lower() not in _known_scalar_functions():
        return True
    return bool(_function_names(node) & _PURE_TABLE_FUNCTIONS)


def _order_and_distinct_on_keys(select: exp.Expr) -> list[exp.Expr]:
    """The ORDER BY keys and the DISTINCT ON expression of a SELECT: what
    chooses which rows it returns, in what order."""
    keys: list[exp.Expr] = []
    order = select.args.get("order")
    if order is not None:
        keys.extend(order.expressions)
    distinct = select.args.get("distinct")
    on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
    if isinstance(on, exp.Expr):
        keys.append(on)
    return keys


def _is_count_query(query: exp.Expr) -> bool:
    """A SELECT whose single output is a count (``SELECT count(*) FROM ...``)."""
    if not isinstance(query, exp.Select):
        return False
    selects = query.selects
    if len(selects) != 1:
        return False
    only = selects[0]
    if isinstance(only, exp.Alias):
        only = only.this
    return isinstance(only, exp.Expr) and _is_count(only)


def _unwrap(node: exp.Expr) -> exp.Expr:
    """(SELECT ...) -> SELECT ...: a parenthesised root has the same outputs.
    Not when the parentheses carry their own LIMIT / ORDER BY / ...: those
    would be lost (``(... UNION ...) LIMIT (SELECT length(name) ...)``)."""
    while (
        isinstance(node, exp.Subquery)
        and isinstance(node.this, exp.Query)
        and not any(value for key, value in node.args.items() if key != "this")
    ):
        node = node.this
    return node


def _catalog_unqualified(root: exp.Expr, dialect: str) -> exp.Expr:
    """`pg_catalog.count(*)` read as `count(*)`: the executor may bind every
    function of a PostgreSQL statement to the catalog, and sqlglot reads a
    schema-qualified call as an unknown function under a dot; the catalog's
    own function is the one lineage knows (counts stay exempt). Deepest
    first, so a qualified call inside another is unqualified before its
    caller is read again; a call that does not read back stays as it is
    (an unknown function: masks more). Changes `root` in place."""
    if not _catalog_qualified_calls(root, dialect):
        return root  # nothing to change (read without walking twice)
    for node in reversed(list(root.walk())):
        call = _catalog_call(node)
        if call is None:
            continue
        try:
            plain = exp.maybe_parse(call.sql(dialect=dialect), dialect=dialect)
        except Exception:
            continue
        if node is root:
            return plain
        node.replace(plain)
    return root


def _catalog_qualified_calls(root: exp.Expr, dialect: str) -> bool:
    """Would `_catalog_unqualified` change `root`? Reads it only (lineage
    reads the shared parse as it is when nothing would change)."""
    if dialect not in ("postgres", "postgresql"):
        return False
    return any(_catalog_call(node) is not None for node in root.find_all(exp.Dot, exp.Column))


def _catalog_call(node: exp.Expr) -> exp.Expr | None:
    """The call of a `pg_catalog.f(...)` node, else None. sqlglot reads
    `pg_catalog.f(...)` as Dot(pg_catalog, f(...)), and `pg_catalog.f(...)
    FILTER / WITHIN GROUP (...)` as a Column of table pg_catalog whose
    "name" is the whole call."""
    if isinstance(node, exp.Dot):
        qualifier, call = node.this, node.expression
        qualified = isinstance(qualifier, exp.Identifier) and type(call) is exp.Anonymous
    elif type(node) is exp.Column:
        qualifier, call = node.args.get("table"), node.this
        qualified = isinstance(qualifier, exp.Identifier) and isinstance(call, exp.Expr)
        qualified = qualified and not isinstance(call, (exp.Identifier, exp.Star))
    else:
        return None
    if not qualified or qualifier.name.lower() != "pg_catalog" or node.args.get("db") or node.args.get("catalog"):
        return None
    return call


def _leftmost_select(node: exp.Expr) -> exp.Expr:
    """The branch that names a set operation's outputs."""
    node = _unwrap(node)
    while isinstance(node, exp.SetOperation):
        node = _unwrap(node.this)
    return node


def _is_star(node: exp.Expr) -> bool:
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


def _string_value(node: exp.Expr) -> str | None:
    """The text of a string literal node ('..', N'..', E'..', $$..$$), else None."""
    node_type = type(node)
    if node_type is exp.Literal:
        return node.this if node.is_string and isinstance(node.this, str) else None
    if node_type in (exp.National, exp.RawString, exp.UnicodeString):
        return node.this if isinstance(node.this, str) else None
    return None


def _display_identifier(identifier: exp.Expr | None, dialect: str) -> str:
    if not isinstance(identifier, exp.Identifier):
        return identifier.name if isinstance(identifier, exp.Expr) else ""
    if dialect == "postgres" and not identifier.quoted:
        return identifier.name.lower()  # PostgreSQL folds unquoted names
    return identifier.name


def _display_name(select: exp.Expr, dialect: str) -> str:
    """Best-effort label the server gives an output column."""
    if isinstance(select, exp.Alias):
        return _display_identifier(select.args.get("alias"), dialect)
    if isinstance(select, exp.Column):
        return _display_identifier(select.this, dialect)
    if dialect == "postgres":
        # PostgreSQL labels a function call by the function's name and a cast
        # by what is cast; anything else is "?column?".
        while isinstance(select, (exp.Window, exp.Filter, exp.Cast)):
            select = select.this
            if isinstance(select, exp.Column):
                return _display_identifier(select.this, dialect)
        if isinstance(select, exp.Func):
            name = select.sql(dialect).split("(", 1)[0].strip().lower()
            return name if _PLAIN_NAME.fullmatch(name) else "?column?"
        return "?column?"
    return select.sql(dialect)  # MySQL / SQLite label an expression by its text


_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_$]*")


def _values_width(values: exp.Values) -> int:
    rows = values.expressions
    return len(rows[0].expressions) if rows and isinstance(rows[0], exp.Tuple) else 1


def _source_text(source: Source) -> str:
    return f"{source[0]}.{source[1]}"


_CONNECTIVES = (exp.And, exp.Or, exp.Xor, exp.Not, exp.Paren, exp.Where, exp.Having, exp.Qualify)


def _atoms(condition: object) -> list[exp.Expr]:
    """The smallest predicates of a condition: split on AND / OR / NOT and
    parentheses. ``c.name = 'x' OR c.id = 1`` has two atoms, ``g =
    ascii(c.name)`` one."""
    atoms: list[exp.Expr] = []
    stack = _child_expressions(condition)
    while stack:
        node = stack.pop()
        if isinstance(node, _CONNECTIVES):
            stack.extend(node.iter_expressions())
        else:
            atoms.append(node)
    return atoms


def _conditions(query: exp.Expr) -> list[exp.Expr]:
    """The row filters of a SELECT: WHERE, HAVING, QUALIFY, every JOIN ... ON."""
    if not isinstance(query, exp.Select):
        return []
    conditions = [query.args.get(key) for key in ("where", "having", "qualify")]
    conditions.extend(join.args.get("on") for join in query.args.get("joins") or [])
    return [condition for condition in conditions if isinstance(condition, exp.Expr)]


def _child_expressions(value: object) -> list[exp.Expr]:
    if isinstance(value, exp.Expr):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, exp.Expr)]
    return []


def _plain_limit(node: object) -> bool:
    """A LIMIT / OFFSET / FETCH that is absent or a plain number (no WITH TIES)."""
    if not isinstance(node, exp.Expr):
        return True
    for part in node.walk():
        if isinstance(part, (exp.Limit, exp.Offset, exp.Fetch, exp.Var)):
            continue
        if isinstance(part, exp.LimitOptions):
            if part.args.get("with_ties") or part.args.get("percent"):
                return False
            continue
        if not (isinstance(part, exp.Literal) and not part.is_string):
            return False
    return True


def _order_sets_count(query: exp.Expr) -> bool:
    """Can a query's own ORDER BY change how many rows it returns? Only
    through FETCH ... WITH TIES or a set-returning function in a key
    (PostgreSQL runs ``ORDER BY generate_series(1, 3)``): otherwise ordering
    rows never adds or removes one."""
    order = query.args.get("order")
    if order is None:
        return False
    limit = query.args.get("limit")
    if isinstance(limit, exp.Expr) and any(
        options.args.get("with_ties") or options.args.get("percent") for options in limit.find_all(exp.LimitOptions)
    ):
        return True
    return any(_is_set_returning(node) for node in order.walk())


def _is_aggregate_select(query: exp.Expr) -> bool:
    """A SELECT without GROUP BY that aggregates (in its outputs or HAVING):
    it returns one row, or none under HAVING, whatever rows it reads."""
    if not isinstance(query, exp.Select) or query.args.get("group") is not None:
        return False
    parts = [*query.selects, *_child_expressions(query.args.get("having"))]
    for part in parts:
        for node in part.walk():
            if isinstance(node, exp.AggFunc) and node.find_ancestor(exp.Select) is query:
                if not isinstance(node.parent, exp.Window) and not (
                    isinstance(node.parent, exp.Filter) and isinstance(node.parent.parent, exp.Window)
                ):
                    return True
    return False


def _last_resort(schema: object, n_columns: int | None, why: str) -> list[OutputColumn]:
    """Mask every output if the schema has any PII column at all. Without
    ``n_columns`` there is no index to mask, hence an empty list."""
    try:
        kinds = [_kind(kind) for columns in schema.values() for kind in columns.values()]  # type: ignore[attr-defined]
        kind = _most_severe(k for k in kinds if k)
    except Exception:
        kind = _DOUBT_KIND  # schema unreadable: assume the worst
    count = n_columns if isinstance(n_columns, int) and n_columns > 0 else 0
    if kind is None:
        return [OutputColumn(i, "", None, (), f"{why}; no personal data in schema") for i in range(count)]
    return [OutputColumn(i, "", kind, (), f"{why}; masked (doubt)") for i in range(count)]
