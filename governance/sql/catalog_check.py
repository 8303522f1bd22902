"""The catalog check: what of a database's own code a bound statement could
still reach, decided by the database's catalog in the statement's own
transaction (execute.py runs it, bound, before the statement).

Binding names pg_catalog's functions and operators, but two paths to other
code are chosen by types, not names: a cast with a user function from (or
to) a user type the statement reads, and attribute notation `t.f`, which
PostgreSQL reads as f(t) when t has no column f. The statement's tree gives
the relations and names involved (:func:`references`,
:func:`cast_candidates`); :func:`user_code_text` is the query that finds
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlglot import exp

if TYPE_CHECKING:
    from governance.sql.binding import Bound


def _quoted(identifier: exp.Identifier) -> str:
    name = identifier.name if identifier.quoted else identifier.name.lower()
    return '"' + name.replace('"', '""') + '"'


def _key(identifier: exp.Identifier) -> str:
    return identifier.name if identifier.quoted else identifier.name.lower()


def references(tree: exp.Expr) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
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


def cast_candidates(tree: exp.Expr) -> tuple[str, ...] | None:
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


def user_code_text(bound: Bound) -> str:
    """A catalog query (itself bound) listing what of the database's own
    code the bound statement could still run: code in the definition of a
    view it reads (at any depth) or in a row-level security policy of a
    relation it reads (:func:`_reached_code`); a cast with a user function
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
    WITH RECURSIVE rel AS (
        SELECT c.oid, c.reltype FROM unnest({tables}) AS n(name)
        JOIN pg_catalog.pg_class AS c ON c.oid = to_regclass(n.name)
    ), {_REACHED_CODE}, user_cast AS (
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
    SELECT 'view or policy function', CAST(p.proname AS TEXT) FROM reached_code AS rc
    JOIN pg_catalog.pg_proc AS p ON p.oid = rc.fn
    UNION ALL
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
    return sql


# System catalogs' fixed OIDs (pg_depend.classid / refclassid): the same in
# every PostgreSQL release.
_PG_PROC, _PG_CLASS, _PG_OPERATOR, _PG_REWRITE, _PG_POLICY = 1255, 1259, 2617, 2618, 3256


def _reached_code() -> str:
    """CTEs `reach` (the relations read, and every relation a view among
    them reads, recursively) and `reached_code` (the functions outside
    pg_catalog that their views' rules and row-level security policies
    would run: called directly, as an operator's or a cast's function, or
    as an aggregate). information_schema's views call its own helper
    functions (only a superuser can add one there).

    Binding cannot reach into a view: its definition was resolved when the
    owner created it, with the owner's search path, and a SECURITY DEFINER
    function in it writing through dblink escapes the read-only transaction.
    So the catalog decides, in the statement's own transaction, before it
    runs. pg_catalog's own functions leave no pg_depend rows (they are
    pinned), so they are not seen here; a view calls them with the reader's
    rights, and the read-only transaction holds for them."""
    rules = f"""
        JOIN pg_catalog.pg_rewrite AS r ON r.ev_class = reach.oid
        JOIN pg_catalog.pg_depend AS d ON d.classid = {_PG_REWRITE} AND d.objid = r.oid"""
    policies = f"""
        JOIN pg_catalog.pg_policy AS pol ON pol.polrelid = reach.oid
        JOIN pg_catalog.pg_depend AS d ON d.classid = {_PG_POLICY} AND d.objid = pol.oid"""
    called = []
    for source in (rules, policies):
        called.append(f"SELECT d.refobjid AS fn FROM reach {source} WHERE d.refclassid = {_PG_PROC}")
        called.append(
            f"SELECT o.oprcode FROM reach {source}"
            f" JOIN pg_catalog.pg_operator AS o ON o.oid = d.refobjid WHERE d.refclassid = {_PG_OPERATOR}"
        )
    return f"""reach(oid) AS (
        SELECT rel.oid FROM rel
        UNION
        SELECT d.refobjid FROM reach {rules} WHERE d.refclassid = {_PG_CLASS}
    ), reached_code(fn) AS (
        SELECT x.fn FROM ({" UNION ".join(called)}) AS x
        JOIN pg_catalog.pg_proc AS p ON p.oid = x.fn
        JOIN pg_catalog.pg_namespace AS s ON s.oid = p.pronamespace
        WHERE s.nspname NOT IN ('pg_catalog', 'information_schema')
    )"""


_REACHED_CODE = _reached_code()
