"""Binding: the statement PostgreSQL runs names the platform's own functions.

PostgreSQL resolves a function, aggregate or operator by its argument types
across the whole search_path: an overload with the exact argument types in the
connection's schema (`public.lower(text)`, `public.||(text, text)`,
`public.sum(int4)`) wins over pg_catalog's coercible one, so an allowlisted
NAME is not enough. A customer database that already has such objects is
normal (extensions, old migrations), and whatever they do runs with the
reader's rights.

So the checked tree is rewritten before it runs (:func:`bind_postgres`):

* every call is written `pg_catalog.f(...)` (table functions in FROM too);
* every operator is written `OPERATOR(pg_catalog.op)`, operands in
  parentheses (all OPERATOR() forms share one precedence);
* the constructs whose operator the server looks up implicitly are spelled
  out with bound operators: IN lists (OR of =), IN (subquery) (= ANY),
  BETWEEN (>= AND <=), LIKE / ILIKE (~~ / ~~*, ESCAPE through
  pg_catalog.like_escape), SIMILAR TO, simple CASE, NULLIF, IS [NOT] DISTINCT
  FROM, unary minus and bitwise NOT on non-literals;
* what cannot be spelled out is refused: JOIN ... USING and NATURAL joins,
  BETWEEN SYMMETRIC, casts to types that are not built in.

The grammar's own keyword forms already call pg_catalog (SUBSTRING(x FROM a),
POSITION(a IN b), OVERLAY, EXTRACT, TRIM, AT TIME ZONE, OVERLAPS, CAST;
COALESCE / GREATEST / LEAST use the type's default operator class, which only
a superuser can create), so they stay.

The rendering is then verified on its TOKENS, independently of how the
rewrite went (:func:`unbound_reason`): every operator token sits inside
OPERATOR(pg_catalog.…), every word before "(" is qualified with pg_catalog or
is grammar syntax, and no implicit-operator keyword is left. Anything else is
refused: a construct the binder does not know fails closed.

What the rendering cannot show (casts from user-defined types, a function
called in attribute notation `t.f`) depends on the database's catalog and is
checked by the executor in the same transaction (catalog_check.py).
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from governance.sql.binding_verify import BOUND_OPERATORS, unbound_reason
from governance.sql.catalog_check import cast_candidates, references
from governance.sql.dialects import POSTGRES, parse_sql
from governance.sql.functions import allowed_functions


class BindError(ValueError):
    """The statement cannot be bound to pg_catalog; it must not run."""


# sqlglot class -> the PostgreSQL operator it stands for.
OPERATORS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
    exp.DPipe: "||",
    exp.BitwiseAnd: "&",
    exp.BitwiseOr: "|",
    exp.BitwiseXor: "#",
    exp.BitwiseLeftShift: "<<",
    exp.BitwiseRightShift: ">>",
    exp.Like: "~~",
    exp.ILike: "~~*",
    exp.RegexpLike: "~",
    exp.RegexpILike: "~*",
    exp.JSONExtract: "->",
    exp.JSONExtractScalar: "->>",
    exp.JSONBExtract: "#>",
    exp.JSONBExtractScalar: "#>>",
    exp.JSONBContainsTopKey: "?",
    exp.JSONBContainsAnyTopKeys: "?|",
    exp.JSONBContainsAllTopKeys: "?&",
    exp.JSONBContains: "@>",
    exp.ArrayContainsAll: "@>",
    exp.ArrayContains: "@>",
    exp.ArrayContainedBy: "<@",
    exp.ArrayOverlaps: "&&",
}

# Function-like classes PostgreSQL's grammar binds itself (or that are not
# functions at all): never qualified.
_GRAMMAR_BOUND = (
    exp.Cast,
    exp.Coalesce,
    exp.Greatest,
    exp.Least,
    exp.Extract,
    exp.Substring,
    exp.StrPosition,
    exp.Overlay,
    exp.Trim,
    exp.Case,
    exp.If,
    exp.Array,
    exp.Exists,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.CurrentTimestamp,
    exp.Localtime,
    exp.Localtimestamp,
    exp.Overlaps,
    exp.Any,
    exp.All,
    exp.Grouping,
    exp.XMLElement,
)
# Operands that need no parentheses around them next to OPERATOR().
_ATOMIC = (
    exp.Column,
    exp.Literal,
    exp.Paren,
    exp.Tuple,
    exp.Subquery,
    exp.Null,
    exp.Boolean,
    exp.Any,
    exp.All,
    exp.Func,
    exp.Dot,
)

_PG = Dialect.get_or_raise(POSTGRES)
# The statement being bound, for the names as written (see _as_written).
_SOURCE: ContextVar[str] = ContextVar("binding_source", default="")
_CATALOG = "pg_catalog"


def _catalog() -> exp.Identifier:
    return exp.to_identifier(_CATALOG)


def _operand(node: exp.Expr) -> exp.Expr:
    if isinstance(node, _ATOMIC) and not isinstance(node, exp.Neg):
        return node
    return exp.Paren(this=node)


def bound_operator(left: exp.Expr, op: str, right: exp.Expr) -> exp.Expr:
    """(left OPERATOR(pg_catalog.op) right)."""
    return exp.Paren(this=exp.Operator(this=_operand(left), operator=f"{_CATALOG}.{op}", expression=_operand(right)))


def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Dot(this=_catalog(), expression=exp.Anonymous(this=name, expressions=list(args)))


def _is_number(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string


def _json_rhs(node: exp.Expr) -> exp.Expr:
    # sqlglot keeps `j -> 'a'` as a JSONPath; its PostgreSQL rendering is the
    # literal the model wrote, which is what the operator takes.
    probe_node = node.copy()
    probe_node.set("this", exp.column("x"))
    probe = probe_node.sql(dialect=_PG)
    head, _, tail = probe.partition(" ")
    _, _, rhs = tail.partition(" ")
    if head != "x" or not rhs:
        raise BindError(f"cannot bind operator: {type(node).__name__}")
    return exp.maybe_parse(rhs, dialect=_PG)


def _null_safe(node: exp.Expr, distinct: bool) -> exp.Expr:
    # a IS DISTINCT FROM b, with the bound <> / = between non-null sides.
    a, b = node.this, node.expression
    a_null = exp.Is(this=_operand(a.copy()), expression=exp.Null())
    b_null = exp.Is(this=_operand(b.copy()), expression=exp.Null())
    first = exp.Not(this=b_null.copy()) if distinct else b_null.copy()
    compare = bound_operator(a, "<>" if distinct else "=", b)
    case = exp.Case(
        ifs=[exp.If(this=a_null, true=first), exp.If(this=b_null, true=exp.Boolean(this=distinct))], default=compare
    )
    return exp.Paren(this=case)


def _bind_in(node: exp.In) -> exp.Expr:
    unexpected = {k for k, v in node.args.items() if v and k not in {"this", "expressions", "query"}}
    if unexpected:
        raise BindError("cannot bind IN: " + ", ".join(sorted(unexpected)))
    left = node.this
    query = node.args.get("query")
    if query is not None:
        return bound_operator(left, "=", exp.Any(this=query))
    items = node.expressions
    if not items:
        raise BindError("cannot bind an empty IN list")
    terms = [bound_operator(left.copy() if i else left, "=", item) for i, item in enumerate(items)]
    return exp.Paren(this=exp.or_(*terms, copy=False, wrap=False))


def _bind_like(node: exp.Expr, op: str) -> exp.Expr:
    pattern = node.expression
    escape = node.parent if isinstance(node.parent, exp.Escape) and node.arg_key == "this" else None
    if escape is not None:
        pattern = _call("like_escape", pattern, escape.expression)
    return bound_operator(node.this, op, pattern)


def _bind_case(node: exp.Case) -> exp.Expr:
    subject = node.this
    if subject is None:
        return node
    for index, branch in enumerate(node.args.get("ifs") or []):
        value = branch.this
        branch.set("this", bound_operator(subject.copy() if index else subject, "=", value))
    node.set("this", None)
    return node


# Arguments a rewritten node may carry besides its operands, with the values
# that mean nothing for PostgreSQL's reading (None: any value is handled).
# Any other argument set refuses the statement: a flag the rewrite does not
# know (NOT LIKE is Like(negate=True)) must not be dropped silently.
_OPERAND_KEYS = frozenset({"this", "expression"})
_KNOWN_FLAGS: dict[type[exp.Expr], dict[str, object]] = {
    exp.Div: {"typed": None, "safe": False},
    exp.DPipe: {"safe": None},
    exp.JSONExtract: {"only_json_types": None},
    exp.JSONExtractScalar: {"only_json_types": None},
    exp.Like: {"negate": None},
    exp.ILike: {"negate": None},
}


def _check_flags(node: exp.Expr) -> None:
    known = _KNOWN_FLAGS.get(type(node), {})
    for key, value in node.args.items():
        if key in _OPERAND_KEYS or value is None or value is False:
            continue
        if key not in known or (known[key] is not None and value != known[key]):
            raise BindError(f"cannot bind {type(node).__name__} with {key}")


def _bind_node(node: exp.Expr) -> exp.Expr | None:
    """The bound replacement of `node` (its children already bound), or None
    to keep it."""
    node_type = type(node)
    if node_type in OPERATORS:
        _check_flags(node)
        if node_type in (exp.Like, exp.ILike):
            bound = _bind_like(node, OPERATORS[node_type])
            return exp.Paren(this=exp.Not(this=bound)) if node.args.get("negate") else bound
        right = _json_rhs(node) if node_type in (exp.JSONExtract, exp.JSONExtractScalar) else node.expression
        return bound_operator(node.this, OPERATORS[node_type], right)
    if node_type in (exp.SimilarTo, exp.NullSafeEQ, exp.NullSafeNEQ, exp.Nullif, exp.Neg, exp.BitwiseNot):
        _check_flags(node)
    if node_type is exp.SimilarTo:
        escape = [node.parent.expression] if isinstance(node.parent, exp.Escape) else []
        return bound_operator(node.this, "~", _call("similar_to_escape", node.expression, *escape))
    if node_type is exp.Escape:
        return node.this  # folded into the LIKE / SIMILAR TO below it
    if node_type is exp.In:
        return _bind_in(node)
    if node_type is exp.Between:
        if node.args.get("symmetric"):
            raise BindError("BETWEEN SYMMETRIC cannot be bound; write the two comparisons")
        low = bound_operator(node.this.copy(), ">=", node.args["low"])
        high = bound_operator(node.this, "<=", node.args["high"])
        return exp.Paren(this=exp.and_(low, high, copy=False, wrap=False))
    if node_type is exp.NullSafeNEQ:
        return _null_safe(node, distinct=True)
    if node_type is exp.NullSafeEQ:
        return _null_safe(node, distinct=False)
    if node_type is exp.Nullif:
        a, b = node.this, node.expression
        case = exp.Case(ifs=[exp.If(this=bound_operator(a.copy(), "=", b), true=exp.Null())], default=a)
        return exp.Paren(this=case)
    if node_type is exp.Case:
        return _bind_case(node)
    if node_type is exp.Neg:
        if _is_number(node.this):
            return None  # -1 is a constant, no operator runs
        return bound_operator(node.this, "*", exp.Literal.number(-1))
    if node_type is exp.BitwiseNot:
        return bound_operator(node.this, "#", exp.Literal.number(-1))
    if node_type is exp.MatchAgainst:
        if len(node.expressions) != 1 or node.args.get("modifier"):
            raise BindError("cannot bind MATCH ... AGAINST")
        # sqlglot keeps `v @@ q` as MatchAgainst(this=q, expressions=[v]).
        return bound_operator(node.expressions[0], "@@", node.this)
    if node_type is exp.Join:
        if node.args.get("using") or str(node.args.get("method") or "").upper() == "NATURAL":
            raise BindError("JOIN ... USING and NATURAL JOIN compare with an implicit operator; write ON a.x = b.x")
        return None
    if node_type is exp.DataType:
        if node.this == exp.DataType.Type.USERDEFINED and _type_name(node) not in _CATALOG_TYPES_UNKNOWN_TO_SQLGLOT:
            raise BindError(f"cast to a type that is not built in: {node.sql(dialect=_PG)[:60]}")
        return None
    if _is_call(node):
        return _qualify_call(node)
    return None


# pg_catalog types sqlglot has no name for (it parses them as user-defined).
# A type name, unlike a function, is not chosen by argument types: the first
# schema on the path that has it wins, and pg_catalog is searched first unless
# named later; the catalog check refuses user casts from or to them.
_CATALOG_TYPES_UNKNOWN_TO_SQLGLOT = frozenset({"tsvector", "tsquery", "regconfig"})


def _type_name(node: exp.DataType) -> str:
    """The type's name as PostgreSQL reads it: unquoted folds to lower case,
    quoted is exact; a qualified name keeps its dot (never in the set)."""
    raw = str(node.args.get("kind") or node.sql(dialect=_PG))
    if raw.startswith('"') and raw.endswith('"') and raw.count('"') == 2:
        return raw[1:-1]
    return raw.lower()


# Words sqlglot keeps as an unknown call that are PostgreSQL syntax: x = ALL
# (array), and the XML constructors (XmlExpr nodes, no function lookup).
_SYNTAX_ANONYMOUS = frozenset({"all", "any", "some", "row", "xmlforest", "xmlconcat", "xmlelement", "xmlpi", "xmlroot"})


def _is_call(node: exp.Expr) -> bool:
    # sqlglot makes AND, OR, NOT and several operators Func subclasses too;
    # of the operator-shaped ones only POWER renders as a call.
    if not isinstance(node, exp.Func) or isinstance(node, _GRAMMAR_BOUND):
        return False
    if type(node) is exp.Anonymous and str(node.this).lower() in _SYNTAX_ANONYMOUS:
        return False
    return type(node) is exp.Pow or not isinstance(node, (exp.Binary, exp.Connector, exp.Unary, exp.Predicate))


_WRITTEN_NAME = re.compile(r'"?([A-Za-z_][A-Za-z0-9_$]*)')


def _as_written(node: exp.Func, sql: str) -> exp.Func:
    """The call as the model wrote it (the name the guard checked). sqlglot
    renders some calls under another name: to_hex(x) as HEX(x), which
    PostgreSQL lacks, char_length(x) as LENGTH(x). A call with a plain
    argument list becomes the written call again; another keeps sqlglot's
    rendering only if that name is on the allowlist too (else the statement
    would call a function nobody checked)."""
    if type(node) is exp.Anonymous:
        return node
    start = node.meta.get("start")
    match = _WRITTEN_NAME.match(sql, start) if isinstance(start, int) else None
    if match is None:
        return node
    written = match.group(1).lower()
    if written in {name.lower() for name in type(node).sql_names()}:
        return node
    rendered = _PG.generate(node, copy=True).split("(", 1)[0].strip().lower()
    if rendered == written:
        return node
    if not set(node.args) - {"this", "expressions"}:
        arguments = ([node.this] if isinstance(node.this, exp.Expr) else []) + list(node.expressions)
        return exp.Anonymous(this=written, expressions=arguments)
    if rendered in allowed_functions(POSTGRES):
        return node
    raise BindError(f"cannot bind {written}: it would be rendered as {rendered}")


def _qualify_call(node: exp.Func) -> exp.Expr | None:
    parent = node.parent
    if isinstance(parent, exp.Dot) and node.arg_key == "expression":
        return None  # already qualified; the verification checks with what
    if isinstance(parent, exp.Table) and node.arg_key == "this":
        if parent.args.get("db") is None and parent.args.get("catalog") is None:
            parent.set("db", _catalog())
        written = _as_written(node, _SOURCE.get())
        return written if written is not node else None
    return exp.Dot(this=_catalog(), expression=_as_written(node, _SOURCE.get()))


@dataclass(frozen=True)
class Bound:
    sql: str  # what runs
    tables: tuple[str, ...]  # relations named, quoted as written (to_regclass input)
    names: tuple[str, ...]  # column / field names referenced (attribute notation candidates)
    whole_row: bool = False  # a relation's name or alias is used as a value (its row type)
    # Columns used inside an expression (where a cast may be applied), or
    # None for "every column": with derived tables an alias hides its source.
    cast_names: tuple[str, ...] | None = None


def bind_postgres(sql: str) -> Bound:
    """The rendering of the one statement in `sql` with every function and
    operator bound to pg_catalog, and what the catalog check needs. Raises
    BindError when it cannot be bound."""
    try:
        statements = [s for s in parse_sql(POSTGRES, sql) if s is not None and not isinstance(s, exp.Semicolon)]
    except Exception as error:
        raise BindError("the statement could not be parsed for binding") from error
    if len(statements) != 1:
        raise BindError("binding needs exactly one statement")
    tree = statements[0]
    _SOURCE.set(sql)
    tables, names, whole_row = references(tree)
    cast_names = cast_candidates(tree)
    _keep_labels(tree, sql)
    # Children before parents (reverse breadth-first): a parent is rewritten
    # over its already bound operands. Replacements are set by the parent,
    # one assignment per argument (replacing list items one by one is
    # quadratic in sqlglot).
    replaced: dict[int, exp.Expr] = {}
    nodes = list(tree.walk(bfs=True))
    for node in reversed(nodes):
        _adopt(node, replaced)
        replacement = _bind_node(node)
        if replacement is not None and replacement is not node:
            replaced[id(node)] = replacement
    tree = replaced.get(id(tree), tree)
    rendered = _PG.generate(tree, copy=False)
    reason = unbound_reason(rendered)
    if reason:
        raise BindError(reason)
    return Bound(rendered, tables, names, whole_row, cast_names)


# Written names PostgreSQL labels an output column with, where sqlglot renders
# the call under another name or the binder rewrites it (nullif -> CASE).
_RENAMED_CALLS = frozenset({"nullif", "now", "date_part", "strpos", "substr", "variance", "pow", "mod", "char_length"})


def _keep_labels(tree: exp.Expr, sql: str) -> None:
    """An unaliased output column keeps the label the statement as written
    would get: the model reads results by these names."""
    query = tree
    while isinstance(query, exp.Subquery):
        query = query.this
    if not isinstance(query, exp.Select):
        return  # set operations take the first branch's labels; left as sqlglot renders them
    labelled, changed = [], False
    for expression in query.expressions:
        labelled.append(expression)
        if isinstance(expression, (exp.Alias, exp.Column, exp.Star)):
            continue
        label = None
        if isinstance(expression, (exp.NullSafeEQ, exp.NullSafeNEQ)):
            label = "?column?"
        elif isinstance(expression, exp.Func) and type(expression) is not exp.Anonymous:
            start = expression.meta.get("start")
            match = _WRITTEN_NAME.match(sql, start) if isinstance(start, int) else None
            if match and match.group(1).lower() in _RENAMED_CALLS and not sql[match.start()].startswith('"'):
                label = match.group(1).lower()
        if label is not None:
            labelled[-1] = exp.Alias(this=expression, alias=exp.to_identifier(label, quoted=True))
            changed = True
    if changed:
        query.set("expressions", labelled)


def _adopt(node: exp.Expr, replaced: dict[int, exp.Expr]) -> None:
    if not replaced:
        return
    for key, value in list(node.args.items()):
        if isinstance(value, list):
            if any(id(item) in replaced for item in value):
                node.set(key, [replaced.pop(id(item), item) for item in value])
        elif isinstance(value, exp.Expr) and id(value) in replaced:
            node.set(key, replaced.pop(id(value)))


__all__ = ["BOUND_OPERATORS", "BindError", "Bound", "bind_postgres", "bound_operator", "unbound_reason"]
