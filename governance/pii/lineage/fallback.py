"""Lineage when the walk cannot decide: by names, masking more."""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot import exp

from governance.pii.lineage.names import _DOUBT_KIND, _TRANSFORMING_FUNCTIONS, _function_label, _function_role
from governance.pii.lineage.nodes import (
    OutputColumn,
    Source,
    Taint,
    _atoms,
    _child_expressions,
    _count_parts,
    _display_name,
    _is_count,
    _is_star,
    _most_severe,
    _sort_key,
    _source_text,
)
from governance.pii.lineage.shapes import _WORD, _renames_or_odd_references


class _Fallback:
    """Part of _Classifier (classifier.py): deciding by names when the walk
    cannot, masking more."""

    # ---- fallback ----------------------------------------------------------

    def _fallback(self, why: str, root: exp.Expr | None, referenced: set[str] | None) -> list[OutputColumn]:
        """Lineage unresolved. For a flat SELECT over plain tables whose
        outputs align with the result, each output is decided by the names it
        uses (:meth:`_by_name`); any other shape masks every output when
        anything the query reads or writes may be personal data."""
        if referenced is None:
            if root is not None:
                referenced, _ = self._referenced_tables(root)
            else:
                referenced = self._tables_by_word()
        pii = self.index.pii_columns(referenced)
        if root is None:
            # Unparsable: which relations it reads is unknown, and a relation
            # outside the schema may hold anything.
            kind = _most_severe(pii.values()) or self.connection_kind() or self._text_literal_kind()
            count = self.n_columns or 0
            if kind is None:
                reason = f"lineage unresolved: {why}; no personal data in the connection"
                return [OutputColumn(i, "", None, (), reason) for i in range(count)]
            return [OutputColumn(i, "", kind, (), f"lineage unresolved: {why}; masked (doubt)") for i in range(count)]

        special = self.special_kinds(root)
        if not pii and not special:
            return self._without_pii(root, f"lineage unresolved: {why}; no referenced table has personal data")

        by_name = self._by_name(root, pii)
        if by_name is not None:
            outputs = []
            items = root.selects if isinstance(root, exp.Select) else []
            for index, (name, sources, taints) in enumerate(by_name):
                output = self._output(index, name, (frozenset(sources), frozenset(taints), frozenset()))
                if output.pii_kind:
                    shown = ", ".join(_source_text(s) for s in output.sources[:3] if s in pii)
                    detail = f"name matches {shown}" if shown else output.reason.removesuffix("; masked")
                    reason = f"lineage unresolved: {why}; {detail}; masked"
                    # A bare column of a plain table (a flat SELECT): the table's own values.
                    item = items[index] if len(items) == len(by_name) else None
                    item = item.this if isinstance(item, exp.Alias) else item
                    bare = type(item) is exp.Column and not isinstance(item.this, exp.Star)
                    unchanged = bare and not taints and {item.name.lower()} == {column for _, column in sources}
                    outputs.append(
                        OutputColumn(index, name, output.pii_kind, output.sources, reason, unchanged=unchanged)
                    )
                else:
                    reason = f"lineage unresolved: {why}; no personal-data column name"
                    outputs.append(OutputColumn(index, name, None, (), reason))
            return outputs

        kind = _most_severe([*pii.values(), *special]) or _DOUBT_KIND
        names = self._original_names(root)
        if self.n_columns is not None:
            count = self.n_columns
        else:
            count = len(names)  # best effort: a `*` counts as one
        if len(names) != count or None in names:
            names = [""] * count
        return [
            OutputColumn(i, names[i] or "", kind, (), f"lineage unresolved: {why}; masked (doubt)")
            for i in range(count)
        ]

    def _text_literal_kind(self) -> str | None:
        """Unparsable SQL: a tainted literal anywhere in the text."""
        if not isinstance(self.sql, str):
            return None
        return self.literal_kind(self.sql)

    def _tables_by_word(self) -> set[str]:
        """Unparsable SQL: any schema table whose bare name appears as a word
        counts as referenced (quoted or not, any case). No text at all: every
        table may be read."""
        if not isinstance(self.sql, str):
            return set(self.index.schema)
        words = set(_WORD.findall(self.sql.lower()))
        referenced = set()
        for key in self.index.schema:
            if str(key).lower().rsplit(".", 1)[-1] in words:
                referenced.add(key)
        return referenced

    def _by_name(self, root: exp.Expr, pii: dict[Source, str]) -> list[tuple[str, set[Source], set[Taint]]] | None:
        """Name-based taint for a flat SELECT, or None when names cannot be
        mapped to the result (then everything is masked). The same rules as
        the walk, with columns matched by name: a name some referenced table
        has as a PII column taints; a qualified name its table lacks is a
        whole-row function (attribute notation); a name no known table has
        may come from an unknown relation (doubt)."""
        if not isinstance(root, exp.Select) or root.args.get("with_") or root.args.get("laterals"):
            return None
        if _renames_or_odd_references(root):
            return None  # `customers AS c(i, n)`: `n` is the name column under another name
        relations: list[exp.Expr] = []
        from_ = root.args.get("from_")
        if from_ is not None:
            relations.append(from_.this)
        joins = root.args.get("joins") or []
        if any(join.args.get("side") for join in joins):
            return None  # an outer join's condition decides NULLs in outputs: see _outer_join
        relations.extend(join.this for join in joins)
        # Every FROM item must be a plain table: a derived table, CTE or table
        # function can rename a PII column to anything.
        by_alias: dict[str, tuple[str, ...]] = {}  # alias / table name -> schema keys it may mean
        unknown_aliases: set[str] = set()
        for relation in relations:
            if not isinstance(relation, exp.Table) or not isinstance(relation.this, exp.Identifier):
                return None
            keys = self.index.resolve([part.name.lower() for part in relation.parts])
            for alias in {relation.alias_or_name.lower(), relation.name.lower()}:
                if keys:
                    by_alias[alias] = by_alias.get(alias, ()) + keys
                else:
                    unknown_aliases.add(alias)
        selects = root.selects
        if self.n_columns is not None and self.n_columns != len(selects):
            return None
        pii_names = {column for _, column in pii}
        conditions = [root.args.get(key) for key in ("where", "having", "qualify")]
        conditions.extend(join.args.get("on") for join in joins)
        for node in root.find_all(exp.Count, exp.Filter):
            if _is_count(node):  # a count's FILTER (WHERE ...) is a row filter too
                conditions.append(_count_parts(node)[1])
        for atom in _atoms(conditions):
            # A column compared with personal data carries it (see _compared):
            # by name alone the comparison cannot be placed, so mask everything.
            # So does a count compared with it in HAVING (see _having_taint).
            names = {node.name.lower() for node in atom.find_all(exp.Column)}
            if names & pii_names and (names - pii_names or atom.find(exp.Count)):
                return None
        if self._keys_read_pii_by_name(root, pii_names):
            return None  # row choice by value (see _row_choice): every output
        known_keys = {key for keys in by_alias.values() for key in keys}
        by_column: dict[str, list[Source]] = {}
        for key in known_keys:
            for column in self.index.columns(key):
                by_column.setdefault(column, []).append((key, column))
        doubt = self.connection_kind()

        def whole_row(keys: Iterable[str]) -> set[Source]:
            return {(key, column) for key in keys for column in self.index.columns(key)}

        result = []
        windows = _child_expressions(root.args.get("windows"))
        for select in selects:
            if _is_star(select):
                return None
            sources: set[Source] = {s for s in by_column.get(select.alias_or_name.lower(), ()) if s in pii}
            taints: set[Taint] = set()
            stack: list[exp.Expr] = [select]
            while stack:
                current = stack.pop()
                if _is_count(current):
                    counted = _count_parts(current)[2]
                    if counted is not None and not all(
                        type(node) is exp.Column and node.name.lower() in by_column for node in counted
                    ):
                        stack.extend(counted)  # a count of an expression is that expression
                    continue
                if _is_star(current) or isinstance(current, (exp.Query, exp.Exists)):
                    return None
                if isinstance(current, exp.Var) and current.name.lower() in pii_names:
                    return None
                if isinstance(current, exp.Column):
                    name, table = current.name.lower(), current.table.lower()
                    if table:
                        if table in by_alias:
                            found = {s for s in by_column.get(name, ()) if s[0] in by_alias[table]}
                            sources.update(found or whole_row(by_alias[table]))
                        elif doubt:
                            taints.add((doubt, f"{table}.{name} is not in the analysed schema"))
                    elif name in by_column:
                        sources.update(by_column[name])
                    elif name in by_alias:  # PostgreSQL whole-row `SELECT c FROM t c`
                        sources.update(whole_row(by_alias[name]))
                    elif doubt:
                        taints.add((doubt, f"{name} is not a column of a known table"))
                    continue
                taint = self.node_taint(current)
                if taint:
                    taints.add(taint)
                if _function_role(current) == "transform" and any(
                    isinstance(n, (exp.Column, exp.TableColumn)) for n in current.walk()
                ):
                    rewrite = _function_label(current, _TRANSFORMING_FUNCTIONS)
                    taints.add((_DOUBT_KIND, f"{rewrite}() rewrites a column's characters"))
                if isinstance(current, exp.Window) and current.args.get("alias"):
                    stack.extend(windows)
                stack.extend(current.iter_expressions())
            result.append((_display_name(select, self.dialect), sources, taints))
        return result

    def _keys_read_pii_by_name(self, root: exp.Select, pii_names: set[str]) -> bool:
        """Does an ORDER BY / GROUP BY / DISTINCT ON key of a flat SELECT that
        is not a bare column name a personal-data column (or hold anything
        that may read one)? Output references mean the output's expression."""
        keys: list[exp.Expr] = []
        order = root.args.get("order")
        if order is not None:
            keys.extend(order.expressions)
        distinct = root.args.get("distinct")
        on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
        if isinstance(on, exp.Expr):
            keys.extend(on.expressions if isinstance(on, exp.Tuple) else [on])
        group = root.args.get("group")
        if group is not None:
            keys.extend(group.iter_expressions())
        aliases = {select.alias.lower(): select.this for select in root.selects if isinstance(select, exp.Alias)}
        for key in keys:
            key = _sort_key(key)
            if isinstance(key, exp.Literal) and key.is_int:
                index = int(key.this) - 1
                if not 0 <= index < len(root.selects):
                    return True
                key = root.selects[index]
                key = key.this if isinstance(key, exp.Alias) else key
            elif type(key) is exp.Column and not key.table and key.name.lower() in aliases:
                key = aliases[key.name.lower()]
            if type(key) is exp.Column:
                continue
            for node in key.walk():
                if isinstance(node, (exp.Query, exp.TableColumn, exp.Star)) or self.node_taint(node):
                    return True
                if isinstance(node, (exp.Column, exp.Var)) and node.name.lower() in pii_names:
                    return True
        return False
