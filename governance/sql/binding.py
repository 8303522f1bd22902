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
checked by the executor in the same transaction (execute.py,
`PG_USER_CODE_SQL`).
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

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
# The operators the binder writes; the guard accepts OPERATOR(pg_catalog.op)
# for exactly these (plus the text-search match).
BOUND_OPERATORS: frozenset[str] = frozenset({f"pg_catalog.{op}" for op in OPERATORS.values()} | {"pg_catalog.@@"})

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
        if node.this == exp.DataType.Type.USERDEFINED:
            raise BindError(f"cast to a type that is not built in: {node.sql(dialect=_PG)[:60]}")
        return None
    if _is_call(node):
        return _qualify_call(node)
    return None


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
    tables, names, whole_row = _references(tree)
    cast_names = _cast_candidates(tree)
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


def _adopt(node: exp.Expr, replaced: dict[int, exp.Expr]) -> None:
    if not replaced:
        return
    for key, value in list(node.args.items()):
        if isinstance(value, list):
            if any(id(item) in replaced for item in value):
                node.set(key, [replaced.pop(id(item), item) for item in value])
        elif isinstance(value, exp.Expr) and id(value) in replaced:
            node.set(key, replaced.pop(id(value)))


def _quoted(identifier: exp.Identifier) -> str:
    name = identifier.name if identifier.quoted else identifier.name.lower()
    return '"' + name.replace('"', '""') + '"'


def _key(identifier: exp.Identifier) -> str:
    return identifier.name if identifier.quoted else identifier.name.lower()


def _references(tree: exp.Expr) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """(relations named, attribute-notation candidates, whether a relation's
    row is used as a value). A candidate is a name written after a
    qualifier (`t.n`, `(x).n`) that is not an explicit output column of the
    subquery or CTE it qualifies: PostgreSQL reads `t.n` as n(t) when t has
    no column n."""
    tables: set[str] = set()
    columns: set[str] = set()
    relation_names: set[str] = set()
    derived = _derived_outputs(tree)
    candidates: set[str] = set()
    for node in tree.walk():
        if type(node) is exp.Table and all(isinstance(p, exp.Identifier) for p in node.parts):
            if node.parts and not isinstance(node.this, exp.Func):
                tables.add(".".join(_quoted(part) for part in node.parts))
                relation_names.add(_key(node.parts[-1]))
        elif type(node) is exp.TableAlias and isinstance(node.this, exp.Identifier):
            relation_names.add(_key(node.this))
        elif type(node) is exp.Column and isinstance(node.this, exp.Identifier):
            name = _key(node.this)
            columns.add(name)
            qualifier = node.args.get("table")
            if isinstance(qualifier, exp.Identifier):
                outputs = derived.get(_key(qualifier))
                if outputs is None or name not in outputs:
                    candidates.add(name)
        elif type(node) is exp.Dot and isinstance(node.expression, exp.Identifier):
            candidates.add(_key(node.expression))
    return tuple(sorted(tables)), tuple(sorted(candidates)), bool(columns & relation_names)


def _derived_outputs(tree: exp.Expr) -> dict[str, frozenset[str] | None]:
    """Alias of a subquery or CTE (and of a reference to a CTE) -> its
    explicit output column names; None when they are not all known (*)."""
    outputs: dict[str, frozenset[str] | None] = {}
    for node in tree.walk():
        if isinstance(node, (exp.Subquery, exp.CTE)):
            alias = node.args.get("alias")
            if isinstance(alias, exp.TableAlias) and isinstance(alias.this, exp.Identifier):
                listed = [c for c in alias.columns if isinstance(c, exp.Identifier)]
                names = frozenset(_key(c) for c in listed) if listed else _select_outputs(node.this)
                outputs[_key(alias.this)] = names
    for table in tree.find_all(exp.Table):
        alias = table.args.get("alias")
        if isinstance(table.this, exp.Identifier) and isinstance(alias, exp.TableAlias):
            name = _key(table.this)
            if name in outputs and isinstance(alias.this, exp.Identifier):
                outputs[_key(alias.this)] = outputs[name]
    return outputs


def _select_outputs(query: exp.Expr) -> frozenset[str] | None:
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    names = set()
    for expression in query.expressions:
        if isinstance(expression, exp.Star) or isinstance(getattr(expression, "this", None), exp.Star):
            return None
        if not expression.alias_or_name:
            return None
        names.add(expression.alias_or_name if _quoted_alias(expression) else expression.alias_or_name.lower())
    return frozenset(names)


def _quoted_alias(expression: exp.Expr) -> bool:
    identifier = expression.args.get("alias") if isinstance(expression, exp.Alias) else expression.this
    return isinstance(identifier, exp.Identifier) and identifier.quoted


# Where a column stands as itself: output, sort and grouping keys read it
# without converting it.
_AS_ITSELF = (exp.Select, exp.Ordered, exp.Group, exp.Distinct)


def _cast_candidates(tree: exp.Expr) -> tuple[str, ...] | None:
    if any(isinstance(node, (exp.Subquery, exp.CTE, exp.SetOperation, exp.Lateral)) for node in tree.walk()):
        return None
    names = set()
    for column in tree.find_all(exp.Column):
        parent = column.parent
        if isinstance(parent, exp.Alias) and isinstance(parent.parent, exp.Select):
            parent = parent.parent
        if not isinstance(parent, _AS_ITSELF) and isinstance(column.this, exp.Identifier):
            names.add(_key(column.this))
    return tuple(sorted(names))


def _text_array(values: tuple[str, ...]) -> str:
    items = ", ".join("'" + value.replace("'", "''") + "'" for value in values)
    return f"CAST(ARRAY[{items}] AS TEXT[])" if values else "CAST(ARRAY[] AS TEXT[])"


# Pseudo-types a user function can take a row of any relation as
# (record, anyelement, anynonarray, anycompatible, anycompatiblenonarray).
_ANY_ROW_TYPES = (2249, 2283, 2776, 5077, 5079)


def user_code_sql(bound: Bound) -> str:
    """A catalog query (itself bound) listing what of the database's own
    code the bound statement could still run: a cast with a user function
    between the type of a column it names (or the row type of a relation it
    uses as a value) of a relation it reads and a built-in type (the only
    targets a bound statement can cast to, explicitly or by coercion), or to
    such a column's type (UNION / CASE unify towards it); and any function,
    pg_catalog's too, it would call in attribute notation (`t.f` for f(t)
    where t has no column f: only real columns are read that way). No rows:
    nothing."""
    tables, names = _text_array(bound.tables), _text_array(bound.names)
    # A whole row converts every column (to_jsonb(t) uses a type's cast to json).
    every_column = bound.cast_names is None or bound.whole_row
    cast_names = _text_array(bound.cast_names or ())
    any_row = ", ".join(str(oid) for oid in _ANY_ROW_TYPES)
    sql = f"""
    WITH rel AS (
        SELECT c.oid, c.reltype FROM unnest({tables}) AS n(name)
        JOIN pg_catalog.pg_class AS c ON c.oid = to_regclass(n.name)
    ), user_cast AS (
        SELECT k.castsource, k.casttarget, tt.typnamespace AS target_schema
        FROM pg_catalog.pg_cast AS k JOIN pg_catalog.pg_proc AS p ON p.oid = k.castfunc
        JOIN pg_catalog.pg_type AS tt ON tt.oid = k.casttarget
        WHERE p.pronamespace <> 11
    ), used_type AS (
        SELECT rel.reltype AS oid FROM rel WHERE {"TRUE" if bound.whole_row else "FALSE"}
        UNION SELECT a.atttypid FROM rel JOIN pg_catalog.pg_attribute AS a ON a.attrelid = rel.oid
        WHERE a.attnum > 0 AND NOT a.attisdropped
        AND ({"TRUE" if every_column else "FALSE"} OR CAST(a.attname AS TEXT) = ANY({cast_names}))
    )
    SELECT 'cast', CAST(ty.typname AS TEXT) FROM used_type AS u JOIN pg_catalog.pg_type AS ty ON ty.oid = u.oid
    WHERE EXISTS (
        SELECT 1 FROM user_cast AS k
        WHERE (k.target_schema = 11 AND k.castsource IN (ty.oid, ty.typelem, ty.typbasetype))
        OR (k.target_schema <> 11 AND k.casttarget IN (ty.oid, ty.typelem, ty.typbasetype))
    )
    UNION ALL
    SELECT 'function', CAST(p.proname AS TEXT) FROM pg_catalog.pg_proc AS p
    JOIN pg_catalog.pg_namespace AS s ON s.oid = p.pronamespace
    JOIN rel ON p.proargtypes[0] = rel.reltype OR p.proargtypes[0] IN ({any_row})
    OR p.proargtypes[0] IN (
        SELECT a.atttypid FROM pg_catalog.pg_attribute AS a JOIN pg_catalog.pg_type AS ct ON ct.oid = a.atttypid
        WHERE a.attrelid = rel.oid AND a.attnum > 0 AND NOT a.attisdropped AND ct.typtype = 'c'
    )
    WHERE s.nspname <> 'information_schema' AND p.prokind = 'f' AND p.pronargs >= 1
    AND p.pronargs - p.pronargdefaults <= 1 AND CAST(p.proname AS TEXT) = ANY({names})
    AND NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = rel.oid AND a.attname = p.proname AND a.attnum > 0 AND NOT a.attisdropped
    )
    """
    return bind_postgres(sql).sql


# --------------------------------------------------------------------------
# Verification of the rendering, on its tokens
# --------------------------------------------------------------------------

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
        return (i - 1) in bound_at or previous.token_type in (_T.L_PAREN, _T.COMMA, _T.L_BRACKET, _T.SELECT)
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
