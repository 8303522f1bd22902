"""Lineage: counts, row counts and row choice."""

from __future__ import annotations

from sqlglot import exp
from sqlglot.optimizer.scope import Scope

from governance.pii.lineage.names import _PURE_TABLE_FUNCTIONS, _function_names
from governance.pii.lineage.nodes import (
    _NOTHING,
    Source,
    _atoms,
    _child_expressions,
    _conditions,
    _count_parts,
    _Found,
    _is_count,
    _is_set_returning,
    _leftmost_select,
    _merge,
    _order_and_distinct_on_keys,
    _sort_key,
    _Unresolved,
)


class _Rows:
    """Part of _Classifier (classifier.py): counts, what sets a number of
    rows, and row choice by value."""

    def _filter_multiplied(self, condition: exp.Expr, scope: Scope) -> _Found:
        """A count's FILTER (WHERE ...) is a row filter like WHERE: ``count(*)
        FILTER (WHERE g <= ascii(name))`` over a number source is the code."""
        scope = self._real_scope(scope)
        return self._memoized(
            ("filter", id(condition)), lambda: self._carried(scope, self._compared_in(scope, [condition]))
        )

    def _correlated(self, query: exp.Expr, scope: Scope) -> _Found:
        """Personal data that a filter anywhere in a nested count compares
        with a column of an outer row: ``(SELECT count(*) FROM customers c
        WHERE ascii(c.name) >= g)`` over ``g = 1..N`` is 1 up to the code and
        0 after it, so ``sum(...)`` of it, or the rows' step, is the code. A
        count counts rows; correlated this way it is a function of the value."""

        def carries(node: exp.Expr) -> bool:
            # An outer column carries the value unless it is a personal-data
            # column itself (``c2.name = c.name`` counts namesakes, like GROUP BY).
            owner = self._find_source(node.table, self._scope_of(node))[1]
            current = owner
            while current is not None and current is not scope:
                current = current.parent
            return current is None and not self._is_pii_column((node.table, node.name), owner)

        def compute() -> _Found:
            conditions: list[tuple[exp.Expr, exp.Expr]] = []
            for node in query.walk():
                if isinstance(node, exp.Select):
                    conditions.extend((condition, node) for condition in _conditions(node))
                elif _is_count(node):  # FILTER (WHERE p), or count(CASE WHEN p THEN 1 END)
                    condition = _count_parts(node)[1]
                    if isinstance(condition, exp.Expr):
                        conditions.append((condition, node))
            results = []
            for condition, holder in conditions:
                where = self._scope_of(holder)
                for atom in _atoms([condition]):
                    if any(isinstance(n, exp.Column) and n.table and carries(n) for n in atom.walk()):
                        results.append(self._atom_values(atom, where, where))
            return _merge(results)

        return self._memoized(("correlated", id(scope)), compute)

    def _count_multiplied(self, scope: Scope) -> _Found:
        """Personal data that decides HOW MANY rows a count in this scope
        counts beyond filtering them: a table function whose arguments read
        it (``generate_series(1, ascii(name))``), a non-personal column
        compared with it (``JOIN generate_series(1, 200000) g ON g <
        ascii(name)``), and, for every row source it reads (derived table,
        CTE, recursive CTE, set operation, LATERAL, VALUES, table function),
        the same plus whatever sets that source's number of rows
        (:meth:`_row_count`). A count over such rows is the value itself; a
        count of rows merely filtered by personal data (``c2.name =
        c.name``) stays a count."""
        scope = self._real_scope(scope)

        def compute() -> _Found:
            if isinstance(scope.expression, exp.SetOperation):
                branches = scope.set_operation_scopes
                return _merge([self._row_count(scope), *(self._count_multiplied(b) for b in branches)])
            results = [self._carried(scope, self._compared(scope))]
            for source in scope.sources.values():
                if isinstance(source, Scope):
                    real = self._real_scope(source)
                    if isinstance(real.expression, (exp.Select, exp.SetOperation)):
                        results.append(self._count_multiplied(real))
                        results.append(self._row_count(real))
                    else:  # UNNEST(string_to_array(name, NULL)), VALUES, LATERAL ...
                        results.append(self._pii_only(self._trace(real.expression, real, True)))
                elif not isinstance(source.this, exp.Identifier):
                    results.append(self._pii_only(self._trace(source.this, scope, True)))
            return _merge(results)

        return self._memoized(("multiplied", id(scope)), compute)

    def _row_count(self, scope: Scope) -> _Found:
        """Personal data that sets the NUMBER of rows of a row source other
        than by filtering them: a LIMIT / OFFSET / FETCH computed from it;
        GROUP BY, DISTINCT ON and DISTINCT over expressions of it (``GROUP BY
        g % ascii(name)`` makes ascii(name) groups); a HAVING that compares
        it with anything else (:meth:`_having_taint`); a set-returning
        function in the SELECT list (``SELECT generate_series(1,
        ascii(name))``); UNION's duplicate removal over such outputs. Bare
        personal-data columns as keys (``SELECT DISTINCT name``) give the
        number of distinct values, like ``count(DISTINCT name)``: allowed."""
        scope = self._real_scope(scope)

        def compute() -> _Found:
            expression = scope.expression
            results = [self._limit_taint(scope)]
            if isinstance(expression, exp.SetOperation):
                if expression.args.get("distinct"):
                    results.extend(self._output_key(scope, i) for i in range(self._output_count(scope)))
                results.append(self._row_choice(scope))
                results.extend(self._row_count(branch) for branch in scope.set_operation_scopes)
            elif isinstance(expression, exp.Select):
                results.append(self._row_choice(scope))
                if expression.args.get("distinct") is not None:
                    results.extend(self._output_key(scope, i) for i in range(len(expression.selects)))
                for item in expression.selects:
                    if any(_is_set_returning(node) for node in item.walk()):
                        results.append(self._pii_only(self._trace(item, scope, False)))
            else:
                results.append(self._pii_only(self._trace(expression, scope, True)))
            return _merge(results)

        return self._memoized(("row count", id(scope)), compute)

    # ---- row choice by value: ORDER BY / GROUP BY / DISTINCT ON / HAVING ----

    def _row_choice(self, scope: Scope) -> _Found:
        """Personal data by which a query's sort, grouping or DISTINCT ON keys,
        or a mixed HAVING, choose or shape its rows, in ANY scope (the
        outermost included). It taints every output of the scope: ``ORDER BY
        abs(g - ascii(name)) LIMIT 1`` returns the g equal to the code,
        ``min(g) ... GROUP BY g < ascii(name)`` splits g at it. A key that
        is a bare column (a personal-data one included: ``ORDER BY name``,
        ``GROUP BY name``) orders or groups without computing on the value:
        it adds only what already taints that column besides its own value
        (:meth:`_key`). ORDER BY taints with or without LIMIT: the model sees
        the order, and the executor's row cap is a LIMIT."""
        expression = scope.expression
        if isinstance(expression, exp.SetOperation):
            order = expression.args.get("order")
            if not order:
                return _NOTHING

            def compute_set() -> _Found:
                width = self._output_count(scope)
                names = [s.alias_or_name for s in _leftmost_select(expression).selects]
                results = []
                for key in order.expressions:
                    key = _sort_key(key)
                    if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.this) <= width:
                        indexes = [int(key.this) - 1]
                    elif type(key) is exp.Column and not key.table and not isinstance(key.this, exp.Star):
                        indexes = [i for i, name in enumerate(names) if name == key.name]
                    else:
                        indexes = []
                    if not indexes:
                        raise _Unresolved("set operation ordered by an expression")
                    results.extend(self._output_key(scope, i) for i in indexes)
                return _merge(results)

            return self._memoized(("choice", id(scope)), compute_set)
        if not isinstance(expression, exp.Select):
            return _NOTHING
        keys = _order_and_distinct_on_keys(expression)
        group = expression.args.get("group")
        if group is not None:
            keys.extend(group.iter_expressions())
        having = expression.args.get("having")
        if not keys and having is None:
            return _NOTHING

        def compute() -> _Found:
            return _merge([*(self._key(key, scope) for key in keys), self._having_taint(scope)])

        return self._memoized(("choice", id(scope)), compute)

    def _key(self, key: exp.Expr, scope: Scope) -> _Found:
        """Personal data in one sort / grouping key of ``scope``. Output
        references (``ORDER BY 2``, ``ORDER BY alias``) mean that output's
        expression. An expression reading personal data is the value (any
        function, operator or comparison of it); a bare column adds only what
        taints it besides its own value (a comparison in WHERE, an outer
        join), so ``ORDER BY name`` alone reveals order, never a value."""
        key = _sort_key(key)
        if isinstance(key, (exp.Tuple, exp.Rollup, exp.Cube, exp.GroupingSets)):
            return _merge(self._key(child, scope) for child in key.iter_expressions())
        select = scope.expression
        if isinstance(select, exp.Select):
            if isinstance(key, exp.Literal) and key.is_int:
                index = int(key.this) - 1
                if not 0 <= index < len(select.selects):
                    raise _Unresolved("key position out of range")
                return self._output_key(scope, index)
            if type(key) is exp.Column and not key.table and not isinstance(key.this, exp.Star):
                indexes = [i for i, item in enumerate(select.selects) if item.alias_or_name == key.name]
                if not indexes:
                    raise _Unresolved(f"key {key.name!r} not resolved")
                return _merge(self._output_key(scope, i) for i in indexes)
        return self._key_value(key, scope)

    def _key_value(self, key: exp.Expr, scope: Scope) -> _Found:
        """:meth:`_key` of an expression (no output reference)."""
        found = self._pii_only(self._trace(key, scope, False))
        if type(key) is exp.Column and key.table:
            plain = self._plain_sources(key, scope)
            if plain:
                found = found[0] - plain, found[1], found[2]
            else:
                source = self._find_source(key.table, scope)[0]
                if isinstance(source, exp.Table) and isinstance(source.this, exp.Identifier):
                    if source.name not in self.synthetic:  # a bare column of an unknown relation
                        found = found[0], found[1] - self._unknown_relation(source.name)[1], found[2]
        return found

    def _output_key(self, scope: Scope, index: int) -> _Found:
        """:meth:`_key` of output ``index`` of a query (each branch's for a
        set operation): what a DISTINCT or an output reference in ORDER BY
        orders or groups by."""
        scope = self._real_scope(scope)
        expression = scope.expression
        if isinstance(expression, exp.SetOperation):
            branches = scope.set_operation_scopes
            if len(branches) != 2:
                raise _Unresolved("set operation without branches")
            return _merge(self._output_key(branch, index) for branch in branches)
        if isinstance(expression, exp.Select):
            selects = expression.selects
            if index >= len(selects):
                raise _Unresolved("output index out of range")
            item = selects[index]
            if isinstance(item, exp.Alias):
                item = item.this
            if type(item) is exp.Column and not item.table:
                raise _Unresolved(f"column {item.name!r} not resolved")
            return self._key_value(item, scope)
        return self._pii_only(self._trace(expression, scope, False))

    def _having_taint(self, scope: Scope) -> _Found:
        """A HAVING atom that compares personal data with anything but itself
        (a count, an aggregate of another column: ``HAVING count(*) <
        ascii(max(name))``) keeps the groups whose size or sum is below the
        value, so every output of the query carries it. ``HAVING max(name)
        LIKE 'A%'`` only filters groups, like WHERE."""
        having = scope.expression.args.get("having")
        if having is None:
            return _NOTHING
        results = []
        for atom in _atoms(having):
            found = self._atom_values(atom, scope, scope)
            if (found[0] or found[1]) and not self._pure_filter(atom, scope):
                results.append(found)
        return _merge(results)

    def _pure_filter(self, atom: exp.Expr, scope: Scope) -> bool:
        """Does a predicate read nothing but plain personal-data columns
        (and constants)? Then it compares the value with constants only."""
        for node in atom.walk():
            if isinstance(node, (exp.Count, exp.Query, exp.TableColumn, exp.Window, exp.Star)):
                return False
            if self.node_taint(node):
                return False
            if type(node) is exp.Column:
                plain = self._plain_sources(node, self._scope_of(node))
                if not plain or not all(self.index.columns(key).get(column) for key, column in plain):
                    return False
        return True

    def _plain_sources(self, node: exp.Expr, scope: Scope, depth: int = 0) -> frozenset[Source] | None:
        """The schema columns a bare column reference passes on unchanged
        (through derived tables, CTEs and set operations that select it as
        is), or None when it is anything else: an expression, a column of a
        table function, VALUES or unknown relation, a computed output."""
        if type(node) is not exp.Column or not node.table or isinstance(node.this, exp.Star) or depth > 32:
            return None
        self._tick()
        source = self._find_source(node.table, scope)[0]
        if isinstance(source, exp.Table):
            key = self.synthetic.get(source.name) if isinstance(source.this, exp.Identifier) else None
            if key is None or node.name not in self.index.columns(key):
                return None
            return frozenset({(key, node.name)})
        inner = self._real_scope(source)
        expression = inner.expression
        if not isinstance(expression, (exp.Select, exp.SetOperation)):
            return None
        if inner.outer_columns:
            names = [column.lower() for column in inner.outer_columns]
        else:
            names = [s.alias_or_name for s in _leftmost_select(expression).selects]
        indexes = [i for i, name in enumerate(names) if name == node.name]
        if len(indexes) != 1:
            return None
        return self._plain_output(inner, indexes[0], depth + 1)

    def _plain_output(self, scope: Scope, index: int, depth: int) -> frozenset[Source] | None:
        scope = self._real_scope(scope)
        expression = scope.expression
        if isinstance(expression, exp.SetOperation):
            branches = scope.set_operation_scopes
            found = [self._plain_output(branch, index, depth + 1) for branch in branches]
            if len(branches) != 2 or any(f is None for f in found):
                return None
            return frozenset().union(*found)  # type: ignore[arg-type]
        if not isinstance(expression, exp.Select) or index >= len(expression.selects):
            return None
        item = expression.selects[index]
        if isinstance(item, exp.Alias):
            item = item.this
        return self._plain_sources(item, scope, depth + 1)

    def _full(self, scope: Scope) -> _Found:
        """Every output of a scope plus whatever chooses its rows."""
        scope = self._real_scope(scope)

        def compute() -> _Found:
            outputs = [self._scope_output(scope, i, True) for i in range(self._output_count(scope))]
            return _merge([*outputs, self._rows(scope)])

        return self._memoized(("full", id(scope)), compute)

    def _rows(self, scope: Scope) -> _Found:
        """What chooses the rows of a scope (inside a nested query): WHERE,
        JOIN ON, GROUP BY, HAVING, ORDER BY, LIMIT, DISTINCT ON, WINDOW,
        table-function arguments, unknown relations, and the same of every
        CTE or derived table it reads."""
        scope = self._real_scope(scope)

        def compute() -> _Found:
            expression = scope.expression
            if isinstance(expression, exp.SetOperation):
                branches = scope.set_operation_scopes
                results = [self._rows(branch) for branch in branches]
                if any(expression.args.get(key) for key in ("order", "limit", "offset")):
                    # ORDER BY / LIMIT over the combined outputs: all of them choose rows.
                    results.extend(self._scope_output(scope, i, True) for i in range(self._output_count(scope)))
                return _merge(results)
            if not isinstance(expression, exp.Select):
                # VALUES, UNNEST, LATERAL with a column list, table functions.
                return self._trace(expression, scope, True)
            results = []
            for key, value in expression.args.items():
                if key in ("expressions", "with_", "from_", "joins"):
                    continue  # outputs are traced separately, sources below
                results.extend(self._trace(child, scope, True) for child in _child_expressions(value))
            for join in expression.args.get("joins") or []:
                for key, value in join.args.items():
                    if key != "this":
                        results.extend(self._trace(child, scope, True) for child in _child_expressions(value))
            for source in scope.sources.values():
                if isinstance(source, Scope):
                    results.append(self._rows(source))
                else:
                    results.append(self._table_rows(source, scope))
            return _merge(results)

        return self._memoized(("rows", id(scope)), compute)

    def _table_rows(self, table: exp.Table, scope: Scope) -> _Found:
        """Rows of a FROM item that is a table: a function's arguments choose
        them; an unknown relation may hold anything."""
        if not isinstance(table.this, exp.Identifier):
            return self._table_function(table, scope, True)
        if table.name in self.synthetic:
            return _NOTHING
        return self._unknown_relation(table.name)

    def _table_function(self, table: exp.Table, scope: Scope, full: bool) -> _Found:
        found = self._trace(table.this, scope, full)
        names = _function_names(table.this) if isinstance(table.this, exp.Expr) else frozenset()
        if names & _PURE_TABLE_FUNCTIONS:
            return found
        return _merge([found, self._unknown_relation(table.this.sql(self.dialect)[:40])])

    def _unknown_relation(self, name: str) -> _Found:
        if name.lower() in self.ambiguous_relations:
            raise _Unresolved(f"ambiguous table: {name}")
        kind = self.connection_kind()
        if not kind:
            return _NOTHING  # the connection has no personal data at all
        return frozenset(), frozenset({(kind, f"reads {name}, which is not in the analysed schema")}), frozenset()
