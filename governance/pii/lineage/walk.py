"""Lineage: the walk through expressions, scopes, columns and whole rows."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from governance.pii.lineage.names import _DOUBT_KIND, _TRANSFORMING_FUNCTIONS, _function_label, _function_role
from governance.pii.lineage.nodes import (
    _NOTHING,
    Source,
    Taint,
    _atoms,
    _child_expressions,
    _conditions,
    _count_parts,
    _Found,
    _is_count,
    _is_count_query,
    _is_star,
    _leftmost_select,
    _merge,
    _Unresolved,
    _unwrap,
)


class _Walk:
    """Part of _Classifier (classifier.py): what one expression reads, through
    scopes, columns, whole rows and the predicates that carry values."""

    def _output_count(self, scope: Scope) -> int:
        expression = scope.expression
        if isinstance(expression, exp.SetOperation):
            branches = scope.set_operation_scopes
            if len(branches) != 2:
                raise _Unresolved("set operation without branches")
            left, right = (self._output_count(branch) for branch in branches)
            if left != right:
                raise _Unresolved("set operation branches differ in width")
            return left
        if isinstance(expression, exp.Select):
            selects = expression.selects
            if any(_is_star(s) for s in selects):
                raise _Unresolved("* could not be expanded")
            return len(selects)
        raise _Unresolved(f"unsupported query shape: {type(expression).__name__}")

    def _scope_output(self, scope: Scope, index: int, full: bool) -> _Found:
        """Lineage of output `index` of a query scope; a set operation's output
        is derived from that output of every branch. ``full``: inside a
        nested query of an output expression, where the rows chosen by
        derived tables and CTEs taint too."""
        expression = scope.expression
        if isinstance(expression, exp.SetOperation):
            branches = scope.set_operation_scopes
            if len(branches) != 2:
                raise _Unresolved("set operation without branches")
            results = [self._scope_output(branch, index, full) for branch in branches]
            return _merge([*results, self._limit_taint(scope), self._row_choice(scope)])
        if isinstance(expression, exp.Select):
            selects = expression.selects
            if index >= len(selects):
                raise _Unresolved("output index out of range")
            results = [self._trace(selects[index], scope, full), self._limit_taint(scope), self._row_choice(scope)]
            if not isinstance(selects[index].unalias(), (exp.Column, exp.Literal)):
                # Rows that personal data multiplies or makes: anything computed
                # over them (sum(1), avg, string_agg('x'), row_number() OVER ())
                # may be a count of them, not just COUNT. A bare column or a
                # literal is the same value however many rows there are.
                results.append(self._count_multiplied(scope))
            return _merge(results)
        raise _Unresolved(f"unsupported query shape: {type(expression).__name__}")

    def _limit_taint(self, scope: Scope) -> _Found:
        """A LIMIT / OFFSET computed from personal data decides which values
        come out, not just which rows: ``generate_series(1, 100) LIMIT
        (SELECT length(name) ...)`` ends at the length. It taints every
        output of its query."""
        expression = scope.expression
        if not (expression.args.get("limit") or expression.args.get("offset")):
            return _NOTHING

        def compute() -> _Found:
            limits = [expression.args.get("limit"), expression.args.get("offset")]
            results = [self._atom_values(node, scope, scope) for node in limits if isinstance(node, exp.Expr)]
            return _merge(results)

        return self._memoized(("limit", id(scope)), compute)

    def _scope_width(self, scope: Scope) -> int:
        if scope.outer_columns:
            return len(scope.outer_columns)
        return len(_leftmost_select(scope.expression).selects)

    def _trace(self, node: exp.Expr, scope: Scope | None, full: bool) -> _Found:
        """Everything one expression evaluated in `scope` reads (see the
        module docstring). Iterative: long expressions must not hit Python's
        recursion limit."""
        sources: set[Source] = set()
        taints: set[Taint] = set()
        labels: set[str] = set()
        stack: list[exp.Expr] = [node]
        while stack:
            current = stack.pop()
            self._tick()
            if _is_count(current):
                if scope is None:  # a count in a bare VALUES list: an expression like any other
                    stack.extend(current.iter_expressions())
                    continue
                found = self._count(current, scope, full)
                sources |= found[0]
                taints |= found[1]
                labels |= found[2]
                continue
            node_type = type(current)
            if node_type is exp.Column:
                if isinstance(current.this, exp.Star):
                    raise _Unresolved("* could not be expanded")
                refs = self.alias_refs.get(id(current)) if not current.table else None
                if refs is not None:  # an output name inside ORDER BY / DISTINCT ON: that output
                    stack.extend(refs)
                    continue
                if scope is None:
                    raise _Unresolved(f"column {current.name!r} outside a query")
                found = self._column(current, scope, full)
            elif node_type is exp.TableColumn:  # PostgreSQL whole-row reference `SELECT c FROM t c`
                if scope is None:
                    raise _Unresolved("whole row outside a query")
                found = self._whole_row(current.name, scope, full)
            elif node_type is exp.Star:
                raise _Unresolved("* could not be expanded")
            elif node_type is exp.Var and current.name.lower() in self.pii_names:
                # A bare word spelled like a PII column: sqlglot did not read it
                # as a column, the server might.
                raise _Unresolved(f"bare word {current.name!r}")
            elif node_type is exp.Subquery:  # (SELECT ...): the scope is keyed by the inner query
                stack.append(current.this)
                continue
            elif node_type is exp.Exists:
                # A truth about rows chosen by personal data: everything in it taints.
                found = self._nested_query(_unwrap(current.this), count_exempt=False)
            elif isinstance(current, exp.Query):  # scalar subquery, IN (...), ARRAY(SELECT ...)
                found = self._nested_query(current, count_exempt=True)
            else:
                taint = self.node_taint(current)
                if taint:
                    taints.add(taint)
                if _function_role(current) == "transform":
                    found = _merge(self._trace(child, scope, full) for child in current.iter_expressions())
                    if found[0]:
                        rewrite = _function_label(current, _TRANSFORMING_FUNCTIONS)
                        taints.add((_DOUBT_KIND, f"{rewrite}() rewrites a column's characters"))
                else:
                    if node_type is exp.Window and current.args.get("alias"):
                        # OVER w / OVER (w ...): the named window's PARTITION / ORDER BY taints too.
                        select = current.find_ancestor(exp.Select)
                        if select is None:
                            raise _Unresolved("named window outside a query")
                        stack.extend(_child_expressions(select.args.get("windows")))
                    stack.extend(current.iter_expressions())
                    continue
            sources |= found[0]
            taints |= found[1]
            labels |= found[2]
        return frozenset(sources), frozenset(taints), frozenset(labels)

    def _nested_query(self, query: exp.Expr, count_exempt: bool) -> _Found:
        """A query inside an output expression: a per-row oracle, so its
        outputs AND its row choice taint - unless it only counts."""
        scope = self.scope_by_expression.get(id(query))
        if scope is None:
            raise _Unresolved("subquery without scope")
        if count_exempt and _is_count_query(query):
            # Its one output is a count: exempt or not by the count rules, plus
            # what chooses its rows by value (GROUP BY / ORDER BY keys, LIMIT),
            # plus personal data compared with the OUTER row.
            return _merge([self._scope_output(scope, 0, True), self._correlated(query, scope)])
        if id(query) in self.shallow:
            return _merge(self._scope_output(scope, i, False) for i in range(self._output_count(scope)))
        return self._full(scope)

    def _pii_only(self, found: _Found) -> _Found:
        """The personal-data part of a result: PII sources and taints."""
        sources = frozenset(s for s in found[0] if self.index.columns(s[0]).get(s[1]))
        return sources, found[1], frozenset()

    def _scope_of(self, node: exp.Expr) -> Scope:
        """The scope a node is evaluated in: its nearest enclosing query's."""
        current: exp.Expr | None = node
        while current is not None:
            scope = self.scope_by_expression.get(id(current))
            if scope is not None:
                return scope
            current = current.parent
        raise _Unresolved("node outside every scope")

    def _compared(self, scope: Scope) -> dict[tuple[str, str], _Found]:
        """Columns of this scope's sources that a row filter compares with
        personal data, and with which. ``WHERE g = ascii(substr(c.name, 1,
        1))`` over ``generate_series(1, 200000) g`` makes ``g`` the
        character's code: a column in one predicate (an atom of WHERE /
        JOIN ON / HAVING / QUALIFY, or of a query nested in them, where it
        is a correlated reference) with a personal-data VALUE carries it,
        whatever the operator. A semi-join (``o.customer_id IN (SELECT id
        FROM customers WHERE phone LIKE ...)``) compares with ids: a filter.
        Keys are (source alias, column), "*" for a whole row."""
        cached = self.compared.get(id(scope))
        if cached is not None:
            return cached
        self.compared[id(scope)] = {}  # a filter reaching its own scope again adds nothing new
        result = self._compared_in(scope, _conditions(scope.expression))
        self.compared[id(scope)] = result
        return result

    def _compared_in(self, scope: Scope, conditions: list[exp.Expr]) -> dict[tuple[str, str], _Found]:
        """:meth:`_compared` over the given conditions of ``scope`` (its row
        filters, or a count's FILTER (WHERE ...))."""
        result: dict[tuple[str, str], _Found] = {}
        atoms = [(atom, scope) for atom in _atoms(conditions)]
        for condition in conditions:
            for select in condition.find_all(exp.Select):
                nested = self.scope_by_expression.get(id(select))
                if nested is None:
                    raise _Unresolved("subquery without scope")
                atoms.extend((atom, nested) for atom in _atoms(_conditions(select)))
        for atom, where in atoms:
            mine = []
            unplaced = False
            for node in atom.walk():
                if isinstance(node, exp.Column) and node.table:
                    key = (node.table, node.name)
                elif isinstance(node, exp.TableColumn):
                    key = (node.name, "*")
                else:
                    unplaced = unplaced or isinstance(node, exp.Column)
                    continue
                if self._find_source(key[0], self._scope_of(node))[1] is scope:
                    mine.append(key)
            if not mine and not (unplaced and where is scope):
                continue
            if not unplaced and (all(self._is_pii_column(key, scope) for key in mine) or not self._may_carry(atom)):
                # Cheap skips (most filters): the compared columns are personal
                # data already, or nothing in the predicate can be.
                continue
            found = self._atom_values(atom, where, scope)
            if found[0] or found[1]:
                if unplaced:
                    raise _Unresolved("unqualified column compared with personal data")
                for key in mine:
                    result[key] = _merge([result.get(key, _NOTHING), found])
        return result

    def _is_pii_column(self, key: tuple[str, str], scope: Scope) -> bool:
        source = scope.sources.get(key[0])
        if not isinstance(source, exp.Table) or key[1] == "*":
            return False
        table = self.synthetic.get(source.name)
        return table is not None and bool(self.index.columns(table).get(key[1]))

    def _may_carry(self, atom: exp.Expr) -> bool:
        """Could this predicate hold a personal-data value at all? Only
        through a PII-named column, a column of anything but a plain schema
        table, a whole row, a nested query or a tainting node."""
        for node in atom.walk():
            node_type = type(node)
            if node_type is exp.Column:
                if node.name in self.pii_names:
                    return True
                source = self._find_source(node.table, self._scope_of(node))[0] if node.table else None
                if not isinstance(source, exp.Table) or source.name not in self.synthetic:
                    return True
            elif node_type is exp.TableColumn or isinstance(node, exp.Query):
                return True
            elif self.node_taint(node) or _function_role(node) == "transform":
                return True
        return False

    def _atom_values(self, atom: exp.Expr, where: Scope, owner: Scope) -> _Found:
        """Personal data among the VALUES one predicate compares: queries
        nested in it count by their outputs only (their own filters are atoms
        of their own), and `owner`'s columns by their value only. Results
        memoised meanwhile are dropped: they were computed with these
        narrower rules."""
        memo_before = set(self.memo)
        shallow_before = self.shallow
        self.shallow = shallow_before | {id(query) for query in atom.find_all(exp.Query)}
        self.plain_scopes.add(id(owner))
        try:
            return self._pii_only(self._trace(atom, where, False))
        finally:
            self.plain_scopes.discard(id(owner))
            self.shallow = shallow_before
            for key in set(self.memo) - memo_before:
                del self.memo[key]

    def _compared_column(self, alias: str, name: str, owner: Scope) -> _Found:
        compared = self._compared(owner)
        if not compared:
            return _NOTHING
        if name == "*":
            return _merge(found for (source, _), found in compared.items() if source == alias)
        return _merge([compared.get((alias, name), _NOTHING), compared.get((alias, "*"), _NOTHING)])

    def _count(self, node: exp.Expr, scope: Scope, full: bool) -> _Found:
        """A count in ``scope``. Exempt - a number of rows, whatever filters
        them - only when it counts ``*`` or [DISTINCT] plain columns (columns
        of schema tables, or passed on unchanged by derived tables): then
        nothing it counts taints, only personal data that decides HOW MANY
        rows there are beyond filtering them (:meth:`_count_multiplied`, its
        FILTER read like a WHERE). ``count(CASE WHEN g <= ascii(name) THEN 1
        END)`` or ``count(DISTINCT g % ascii(name))`` counts a value: its
        argument is traced like any expression."""
        _count_node, condition, counted = _count_parts(node)
        results = [self._count_multiplied(scope)]
        if condition is not None:
            results.append(self._filter_multiplied(condition, scope))
        exempt = counted is None or (bool(counted) and all(self._plain_sources(e, scope) for e in counted))
        if not exempt:
            results.extend(self._trace(expression, scope, full) for expression in counted or ())
        found = _merge(results)
        return found[0], found[1], frozenset({"count"})

    def _carried(self, scope: Scope, compared: dict[tuple[str, str], _Found]) -> _Found:
        """Of the columns a filter compares with personal data, those that
        carry a value into a count: any column but a personal-data column of
        a schema table (which a count may filter on)."""
        results = []
        for (alias, name), found in compared.items():
            source = scope.sources.get(alias)
            key = self.synthetic.get(source.name) if isinstance(source, exp.Table) else None
            if key is None or name == "*" or not self.index.columns(key).get(name):
                results.append(found)  # a non-personal (or unknown) column carries the value
        return _merge(results)

    def _find_source(self, alias: str, scope: Scope) -> tuple[exp.Table | Scope, Scope]:
        """The source an alias names and the scope whose FROM it is in,
        looking outwards for correlated references. A CTE is a source of
        every scope below its WITH, but ``n.g`` in a subquery that does not
        read ``n`` itself is the OUTER query's row: the FROM decides."""
        current: Scope | None = scope
        while current is not None:
            if alias in current.selected_sources:
                source = current.sources.get(alias)
                return (source if source is not None else current.selected_sources[alias][1]), current
            current = current.parent
        current = scope
        while current is not None:
            source = current.sources.get(alias)
            if source is not None:
                return source, current
            current = current.parent
        raise _Unresolved(f"unknown source {alias!r}")

    def _column(self, column: exp.Column, scope: Scope, full: bool) -> _Found:
        self._tick()
        alias = column.table
        name = column.name
        if not alias:
            raise _Unresolved(f"column {name!r} not resolved")
        source, owner = self._find_source(alias, scope)
        if id(owner) in self.plain_scopes:
            return self._column_of(source, owner, name, full)
        return _merge(
            [
                self._column_of(source, owner, name, full),
                self._outer_join(alias, source, owner),
                self._compared_column(alias, name, owner),
            ]
        )

    def _column_of(self, source: exp.Table | Scope, owner: Scope, name: str, full: bool) -> _Found:
        if isinstance(source, exp.Table):
            if not isinstance(source.this, exp.Identifier):
                # Table function (json_each(c.memo), generate_series(...)):
                # every output derives from all its arguments.
                return self._table_function(source, owner, full)
            key = self.synthetic.get(source.name)
            if key is None:
                return self._unknown_relation(source.name)
            columns = self.index.columns(key)
            alias = source.args.get("alias")
            if name not in columns or (alias is not None and alias.columns):
                # PostgreSQL attribute notation: `c.text` is text(c), the whole row.
                # A column list renames by position (`customers c(name, id)`:
                # `id` is the name column), and the schema's order is not
                # proof of the table's: the whole row.
                return frozenset((key, c) for c in columns), frozenset(), frozenset()
            return frozenset({(key, name)}), frozenset(), frozenset()
        return self._derived_column(source, name, full)

    def _outer_join(self, alias: str, source: exp.Table | Scope, owner: Scope) -> _Found:
        """A column from the NULL-able side of an outer join is NULL or not
        depending on the join condition and that side's row filters: ``LEFT
        JOIN customers c2 ON c2.id = c.id AND c2.name > 'M'`` makes ``c2.id``
        a per-row oracle. Those taint the column, unlike an inner join's."""
        select = owner.expression
        joins = select.args.get("joins") if isinstance(select, exp.Select) else None
        if not joins:
            return _NOTHING

        def compute() -> _Found:
            from_ = select.args.get("from_")
            before = [from_.this.alias_or_name] if from_ is not None else []
            results = []
            for join in joins:
                side = str(join.args.get("side") or "").upper()
                here = join.this.alias_or_name
                if (side in ("LEFT", "FULL") and here == alias) or (side in ("RIGHT", "FULL") and alias in before):
                    for key, value in join.args.items():
                        if key != "this":
                            results.extend(self._trace(child, owner, True) for child in _child_expressions(value))
                    if isinstance(source, Scope):
                        results.append(self._rows(source))
                before.append(here)
            return _merge(results)

        return self._memoized(("outer", id(owner), alias), compute)

    def _whole_row(self, alias: str, scope: Scope, full: bool) -> _Found:
        source, owner = self._find_source(alias, scope)
        if id(owner) in self.plain_scopes:
            return self._whole_row_of(source, owner, full)
        return _merge(
            [
                self._whole_row_of(source, owner, full),
                self._outer_join(alias, source, owner),
                self._compared_column(alias, "*", owner),
            ]
        )

    def _whole_row_of(self, source: exp.Table | Scope, owner: Scope, full: bool) -> _Found:
        if isinstance(source, exp.Table):
            if not isinstance(source.this, exp.Identifier):
                return self._table_function(source, owner, full)
            key = self.synthetic.get(source.name)
            if key is None:
                return self._unknown_relation(source.name)
            return frozenset((key, column) for column in self.index.columns(key)), frozenset(), frozenset()
        source = self._real_scope(source)
        if full:
            return self._full(source)
        if isinstance(source.expression, (exp.Select, exp.SetOperation)):
            return _merge(self._scope_output(source, i, False) for i in range(self._scope_width(source)))
        return self._trace(source.expression, source, False)

    def _real_scope(self, scope: Scope) -> Scope:
        """A recursive CTE's self-reference points at a scope sqlglot never
        traversed (a copy over the base branch); use the CTE's own scope."""
        if id(scope) in self.traversed:
            return scope
        parent = scope.expression.parent if isinstance(scope.expression, exp.Expr) else None
        real = self.scope_by_expression.get(id(parent)) if parent is not None else None
        if real is None:
            raise _Unresolved("unresolved CTE reference")
        return real

    def _derived_column(self, scope: Scope, name: str, full: bool) -> _Found:
        """Column `name` of a CTE, derived table, LATERAL or UNNEST/VALUES;
        with ``full``, plus what chooses that relation's rows."""
        scope = self._real_scope(scope)

        def compute() -> _Found:
            expression = scope.expression
            if isinstance(expression, (exp.Select, exp.SetOperation)):
                if scope.outer_columns:
                    names = [column.lower() for column in scope.outer_columns]
                else:
                    names = [s.alias_or_name for s in _leftmost_select(expression).selects]
                indexes = [i for i, candidate in enumerate(names) if candidate == name]
                if not indexes:
                    raise _Unresolved(f"column {name!r} not found in derived table")
                # Several outputs with one name: the reference may mean any.
                results = [self._scope_output(scope, index, full) for index in indexes]
            elif (
                isinstance(expression, exp.Lateral)
                and not scope.outer_columns
                and isinstance(expression.this, exp.Subquery)
                and id(expression.this.this) in self.scope_by_expression
            ):
                # LATERAL (SELECT ...) AS l: the column by name, like a derived table.
                inner = self.scope_by_expression[id(expression.this.this)]
                results = [self._derived_column(inner, name, full)]
            else:
                # UNNEST(...), VALUES, table functions, LATERAL with a column
                # list: every column derives from everything inside it.
                results = [self._trace(expression, scope, full)]
            if full:
                results.append(self._rows(scope))
            return _merge(results)

        return self._memoized(("column", id(scope), name, full), compute)
