"""Lineage: outputs of the root query, qualifying, memo and budget."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

from governance.pii.lineage.names import _MAX_STEPS, _SYNTHETIC_PREFIX, FREE_TEXT
from governance.pii.lineage.nodes import (
    _NOTHING,
    OutputColumn,
    Source,
    _Found,
    _leftmost_select,
    _merge,
    _most_severe,
    _order_and_distinct_on_keys,
    _severity,
    _sort_key,
    _source_text,
    _Unresolved,
    _values_width,
)


class _Outputs:
    """Part of _Classifier (classifier.py): the root query's outputs, qualifying
    the tree, the walk's memo and budget."""

    # ---- lineage ---------------------------------------------------------

    def _lineage(
        self, root: exp.Expr, tables: list[tuple[exp.Table, tuple[str, ...]]], names: list[str | None]
    ) -> list[OutputColumn]:
        if isinstance(root, exp.Values):
            return self._values_root(root, names)
        root_scope = self._prepare(root, tables)

        count = self._output_count(root_scope)
        if self.n_columns is not None and self.n_columns != count:
            raise _Unresolved(f"{self.n_columns} columns returned, {count} resolved")

        qualified_names = [s.alias_or_name for s in _leftmost_select(root_scope.expression).selects]
        display = self._align_names(names, qualified_names)
        # The outermost query's own row choice (WHERE, GROUP BY, ...) is not
        # traced: only each output's expression, with full=False.
        outputs = []
        for index in range(count):
            found = self._scope_output(root_scope, index, full=False)
            output = self._output(index, display[index], found, self._plain_free_text(root_scope, index, found))
            if output.pii_kind and self._unchanged(root_scope, index, found):
                output = replace(output, unchanged=True)
            outputs.append(output)
        return outputs

    def _unchanged(self, root_scope: Scope, index: int, found: _Found) -> bool:
        """Is output ``index`` nothing but schema columns passed on unchanged,
        with no other taint (a tainted literal, an unknown relation, a
        rewrite)? Row choice (filters, sorting) adds sources, not values."""
        if found[1]:
            return False
        plain = self._plain_output(root_scope, index, 0)
        return bool(plain)

    def _plain_free_text(self, root_scope: Scope, index: int, found: _Found) -> frozenset[Source]:
        """The free-text sources of output ``index`` when that output is
        nothing but those columns passed on unchanged (through derived
        tables, CTEs and set operations): read as themselves. Empty when the
        output computes anything from a free-text column (then it is masked
        whole), or reads one only through another path too."""
        free = {s for s in found[0] if self.index.columns(s[0]).get(s[1]) == FREE_TEXT}
        if not free:
            return frozenset()
        plain = self._plain_output(root_scope, index, 0)
        if plain is None or not free <= plain:
            return frozenset()
        return frozenset(free)

    def _prepare(self, root: exp.Expr, tables: list[tuple[exp.Table, tuple[str, ...]]]) -> Scope:
        """Point the tables at the schema, qualify the tree and build its
        scopes (in place); the root query's scope."""
        if not isinstance(root, (exp.Select, exp.SetOperation)):
            raise _Unresolved(f"not a query: {type(root).__name__}")

        # Case-insensitive everywhere (see module docstring), and every
        # identifier the same case as the schema keys.
        for identifier in root.find_all(exp.Identifier):
            name = identifier.this
            if isinstance(name, str):
                lowered = name.lower()
                if lowered.startswith(_SYNTHETIC_PREFIX):
                    raise _Unresolved("reserved identifier in query")
                if lowered != name:
                    identifier.set("this", lowered)

        mapping: dict[str, dict[str, str]] = {}
        synthetic_by_key: dict[str, str] = {}
        for table, keys in tables:
            if len(keys) != 1:
                continue  # unknown (tainted in the walk) or ambiguous (unresolved)
            key = keys[0]
            synthetic = synthetic_by_key.get(key)
            if synthetic is None:
                synthetic = f"{_SYNTHETIC_PREFIX}{len(synthetic_by_key)}"
                synthetic_by_key[key] = synthetic
                self.synthetic[synthetic] = key
                # qualify only needs names; the type is never looked at.
                mapping[synthetic] = {column: "text" for column in self.index.columns(key)}
            if not table.alias:
                # Column references keep using the name as written (`customers.name`).
                table.set("alias", exp.TableAlias(this=exp.to_identifier(table.name)))
            table.set("this", exp.to_identifier(synthetic))
            table.set("db", None)
            table.set("catalog", None)

        root = qualify(
            root,
            dialect=self.dialect,
            schema=MappingSchema(mapping, dialect=self.dialect, normalize=False),
            # Unresolvable columns stay unqualified and the walk refuses them
            # where they matter; validating would refuse the whole query for
            # a column in a WHERE clause.
            validate_qualify_columns=False,
            quote_identifiers=False,
            identify=False,
        )
        scopes = traverse_scope(root)
        if not scopes:
            raise _Unresolved("no scope")
        root_scope = scopes[-1]
        for scope in scopes:
            self.scope_by_expression[id(scope.expression)] = scope
            self.traversed.add(id(scope))
        for scope in scopes:
            self._map_alias_refs(scope)
        return root_scope

    def _map_alias_refs(self, scope: Scope) -> None:
        """Record what an unqualified name inside an ORDER BY / DISTINCT ON
        expression of this query means (``ORDER BY abs(g - ascii(c.name))``
        with an output ``g``): qualify leaves it unqualified as an output
        reference. PostgreSQL reads a name inside an expression as an INPUT
        column first, so when an input column of that name may exist and the
        output is not that very column, the meaning is not certain:
        unresolved (masks more)."""
        select = scope.expression
        if not isinstance(select, exp.Select):
            return
        keys = _order_and_distinct_on_keys(select)
        if not keys:
            return
        outputs: dict[str, list[exp.Expr]] = {}
        for item in select.selects:
            outputs.setdefault(item.alias_or_name, []).append(item.this if isinstance(item, exp.Alias) else item)
        for key in keys:
            key = _sort_key(key)
            if type(key) is exp.Column:
                continue  # a bare key: see _key
            for node in key.find_all(exp.Column):
                if node.table or isinstance(node.this, exp.Star) or node.find_ancestor(exp.Select) is not select:
                    continue
                items = outputs.get(node.name)
                if items is None:
                    continue  # unresolved: _trace refuses it
                same = all(type(item) is exp.Column and item.name == node.name for item in items)
                if not same and self._may_have_column(scope, node.name):
                    raise _Unresolved(f"{node.name!r} in ORDER BY is an output and maybe an input column")
                self.alias_refs[id(node)] = items

    def _may_have_column(self, scope: Scope, name: str) -> bool:
        for source in scope.sources.values():
            if isinstance(source, exp.Table):
                key = self.synthetic.get(source.name) if isinstance(source.this, exp.Identifier) else None
                if key is None or name in self.index.columns(key):
                    return True
                continue
            expression = source.expression
            if not isinstance(expression, (exp.Select, exp.SetOperation)):
                return True
            if source.outer_columns:
                names = [column.lower() for column in source.outer_columns]
            else:
                names = [s.alias_or_name for s in _leftmost_select(expression).selects]
            if name in names:
                return True
        return False

    def _values_root(self, root: exp.Values, names: list[str | None]) -> list[OutputColumn]:
        # A bare VALUES list reads nothing unless it nests a query or a column;
        # its literals may still hold re-identified values.
        if any(isinstance(node, (exp.Column, exp.Query)) for node in root.walk()):
            raise _Unresolved("VALUES with subqueries")
        count = _values_width(root)
        if self.n_columns is not None and self.n_columns != count:
            raise _Unresolved(f"{self.n_columns} columns returned, {count} resolved")
        outputs = []
        for index in range(count):
            cells = [
                row.expressions[index] if isinstance(row, exp.Tuple) else row
                for row in root.expressions
                if not isinstance(row, exp.Tuple) or index < len(row.expressions)
            ]
            found = _merge(self._trace(cell, None, False) for cell in cells)
            output = self._output(index, f"column{index + 1}", found)
            outputs.append(output if output.pii_kind else OutputColumn(index, output.name, None, (), "literal"))
        return outputs

    @staticmethod
    def _align_names(original: list[str | None], qualified: list[str]) -> list[str]:
        """Names as written where they align 1:1 with the expanded outputs
        (qualify names unaliased expressions `_col_N`), else qualify's names."""
        if len(original) == len(qualified) and None not in original:
            return [name or "" for name in original]
        if original.count(None) == 1:  # one `*`: it expanded into the difference
            width = len(qualified) - (len(original) - 1)
            star = original.index(None)
            if width >= 0:
                return [
                    *(n or "" for n in original[:star]),
                    *qualified[star : star + width],
                    *(n or "" for n in original[star + 1 :]),
                ]
        return qualified

    def _output(self, index: int, name: str, found: _Found, plain: frozenset[Source] = frozenset()) -> OutputColumn:
        """``plain``: free-text sources the output passes on unchanged (read
        as themselves, left to the detectors)."""
        sources, taints, labels = found
        kinds = {source: self.index.columns(source[0]).get(source[1]) for source in sources}
        for source in plain:
            if kinds.get(source) == FREE_TEXT:
                kinds[source] = None
        pii = sorted((s for s in sources if kinds[s]), key=lambda s: (_severity(kinds[s] or ""), s))
        others = sorted(s for s in sources if not kinds[s])
        ordered = tuple(pii + others)
        taint_list = sorted(taints, key=lambda t: (_severity(t[0]), t[1]))
        kind = _most_severe([*(kinds[s] or "" for s in pii), *(t[0] for t in taint_list)])
        if pii:
            shown = ", ".join(_source_text(s) for s in pii[:3])
            more = f" (+{len(pii) - 3} more)" if len(pii) > 3 else ""
            reason = f"derived from {shown}{more}"
            if taint_list:
                reason += f"; {taint_list[0][1]}"
            return OutputColumn(index, name, kind, ordered, reason)
        if taint_list:
            more = f" (+{len(taint_list) - 1} more)" if len(taint_list) > 1 else ""
            return OutputColumn(index, name, kind, ordered, f"{taint_list[0][1]}; masked{more}")
        if others:
            reason = "not derived from personal data"
        elif labels:
            reason = " / ".join(sorted(labels)) + " only"
        else:
            reason = "no source column (literal)"
            return OutputColumn(index, name, None, ordered, reason)
        return OutputColumn(index, name, None, ordered, reason)

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _Unresolved("lineage too complex")

    def _memoized(self, key: tuple, compute: Callable[[], _Found]) -> _Found:
        """Memoised, cycle-safe evaluation. A recursive CTE reaches itself:
        the inner visit returns nothing (its contributions are collected
        further up), and results below such a cut are partial, so they are
        not memoised."""
        cached = self.memo.get(key)
        if cached is not None:
            return cached
        if key in self.path:
            self.cycle_cut = True
            return _NOTHING
        outer_cut = self.cycle_cut
        self.cycle_cut = False
        self.path.add(key)
        try:
            result = compute()
        finally:
            self.path.discard(key)
        if not self.cycle_cut:
            self.memo[key] = result
        self.cycle_cut = self.cycle_cut or outer_cut
        return result
