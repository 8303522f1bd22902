"""The classifier: parse, fast paths, the top of the walk (governance.pii.lineage)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.scope import Scope

from governance.pii.lineage.fallback import _Fallback
from governance.pii.lineage.names import (
    _DATA_READING_FUNCTIONS,
    _DIALECTS,
    _DOUBT_KIND,
    _PURE_TABLE_FUNCTIONS,
    _function_label,
    _function_names,
    _function_role,
)
from governance.pii.lineage.nodes import (
    _FROM_LIST,
    _ROW_SHAPE_WORDS,
    OutputColumn,
    Taint,
    _catalog_qualified_calls,
    _catalog_unqualified,
    _display_name,
    _Found,
    _is_aggregate_select,
    _is_set_returning,
    _is_star,
    _kind,
    _leftmost_select,
    _literal_items,
    _merge,
    _most_severe,
    _order_sets_count,
    _string_value,
    _Unresolved,
    _unwrap,
    _values_width,
)
from governance.pii.lineage.outputs import _Outputs
from governance.pii.lineage.rows import _Rows
from governance.pii.lineage.shapes import (
    _dialect_or_same,
    _may_reach_pii,
    _names_pii_by_word,
    _names_unknown_column,
    _odd_column_names,
    _row_shape,
    _SchemaIndex,
)
from governance.pii.lineage.walk import _Walk
from governance.pii.masking import KIND_BY_LABEL, TOKEN_PATTERN
from governance.sql.dialects import copy_tree, parse_sql, parsed


class _Classifier(_Outputs, _Walk, _Rows, _Fallback):
    def __init__(
        self,
        sql: str,
        dialect: str,
        schema: Mapping,
        n_columns: int | None,
        tainted_literals: Mapping[str, str] | None = None,
    ) -> None:
        self.sql = sql
        self.dialect = _dialect_or_same(dialect)
        self.index = _SchemaIndex(schema)
        self.n_columns = n_columns if isinstance(n_columns, int) and n_columns >= 0 else None
        # Originals substituted for tokens -> kind. Empty strings would match every literal.
        self.literal_kinds: dict[str, str] = {}
        for original, kind in (tainted_literals or {}).items():
            if isinstance(original, str) and original:
                self.literal_kinds[original] = _kind(kind) or _DOUBT_KIND
        self._connection_kind: str | None | bool = False  # False: not computed yet
        # Relations read that are not in the schema / that mean several schema tables.
        self.unknown_relations: set[str] = set()
        self.ambiguous_relations: set[str] = set()
        # Lineage walk state.
        self.synthetic: dict[str, str] = {}  # synthetic table name -> schema key
        self.scope_by_expression: dict[int, Scope] = {}
        self.traversed: set[int] = set()
        self.memo: dict[tuple, _Found] = {}
        self.path: set[tuple] = set()
        self.cycle_cut = False
        self.steps = 0
        self.compared: dict[int, dict[tuple[str, str], _Found]] = {}  # scope id -> see _compared
        # Scopes whose row filters are being read as values (_compared): their
        # own columns count as just their values there, not what filters them.
        self.plain_scopes: set[int] = set()
        self.shallow: frozenset[int] | set[int] = frozenset()  # nested queries read by their outputs only
        self.pii_names: set[str] = set()  # lowercased PII column names of the referenced tables
        # Output-name references inside ORDER BY / DISTINCT ON expressions
        # (left unqualified by qualify) -> the output expressions they mean.
        self.alias_refs: dict[int, list[exp.Expr]] = {}
        self._names_cache: tuple[exp.Expr, list[str | None]] | None = None
        self._shared_root: exp.Expr | None = None  # see _parse(shared=True)

    # ---- kinds of non-column taints ----------------------------------------

    def connection_kind(self) -> str | None:
        """Most severe PII kind of the whole connection: what an unknown
        relation may hold. None when the connection has no personal data."""
        if self._connection_kind is False:
            self._connection_kind = _most_severe(
                kind for key in self.index.schema for kind in self.index.columns(key).values() if kind
            )
        return self._connection_kind  # type: ignore[return-value]

    def literal_kind(self, value: str) -> str | None:
        """Kind of a string literal holding a re-identified original (or a
        token the executor will replace), else None."""
        kinds = [kind for original, kind in self.literal_kinds.items() if original in value]
        if "[" in value:
            kinds.extend(KIND_BY_LABEL[m.group(1)] for m in TOKEN_PATTERN.finditer(value))
        return _most_severe(kinds)

    def statement_kind(self) -> str | None:
        """Kind of the statement text itself: the most severe tainted
        literal, if any exists (current_query() returns the whole text)."""
        kinds = list(self.literal_kinds.values())
        if isinstance(self.sql, str) and "[" in self.sql:
            kinds.extend(KIND_BY_LABEL[m.group(1)] for m in TOKEN_PATTERN.finditer(self.sql))
        return _most_severe(kinds)

    def node_taint(self, node: exp.Expr) -> Taint | None:
        """Taint of one node by itself (literal, data-reading or
        statement-text function); transforming functions are decided by
        the walk, which knows whether a column is below."""
        text = _string_value(node)
        if text is not None:
            kind = self.literal_kind(text) if text else None
            return (kind, "a literal holding a re-identified personal-data value") if kind else None
        if type(node) in (exp.Parameter, exp.Placeholder):
            # MySQL `@v` (set by `@v := name` elsewhere in the statement) or a
            # bind placeholder: a value from outside the tree.
            kind = self.connection_kind()
            return (kind, "reads a variable lineage cannot follow") if kind else None
        role = _function_role(node)
        if role == "data":
            kind = self.connection_kind()
            label = _function_label(node, _DATA_READING_FUNCTIONS)
            return (kind, f"{label}() reads data lineage cannot follow") if kind else None
        if role == "statement":
            kind = self.statement_kind()
            return (kind, "returns the statement text, which holds a re-identified value") if kind else None
        return None

    def special_kinds(self, root: exp.Expr) -> set[str]:
        """Kinds that may taint an output without any classified column being
        named: tainted literals, data-reading or statement-text functions,
        unknown relations or table functions (when the connection has
        personal data), transforming functions (doubt). Empty means the
        column-based fast paths are safe."""
        kinds: set[str] = set()
        for node in root.walk():
            taint = self.node_taint(node)
            if taint:
                kinds.add(taint[0])
            elif _function_role(node) == "transform":
                kinds.add(_DOUBT_KIND)
        if self.unknown_relations:
            kind = self.connection_kind()
            if kind:
                kinds.add(kind)
        return kinds

    # ---- top level ------------------------------------------------------

    def run(self, parsed: tuple[exp.Expr | None, str] | None = None) -> list[OutputColumn]:
        """The outputs' lineage; `parsed`: what `_parse` gave (the walk
        rewrites a copy of its own when that is the shared tree)."""
        if self.dialect not in _DIALECTS:
            return self._fallback(f"unsupported dialect {self.dialect!r}", None, None)
        if not isinstance(self.sql, str):
            return self._fallback("sql is not a string", None, None)
        root, why = parsed or self._parse()
        if root is None:
            return self._fallback(why, None, None)
        if not isinstance(root, (exp.Select, exp.SetOperation, exp.Values)):
            # Not a query sqlglot understands (exp.Command for EXPLAIN, ...):
            # its tree says nothing reliable about the tables it reads.
            return self._fallback(f"not a query: {type(root).__name__}", None, None)

        referenced, tables = self._referenced_tables(root)
        pii = self.index.pii_columns(referenced)
        self.pii_names = {column for _, column in pii}
        if not self.special_kinds(root):
            # Fast paths, safe only without literals, rewrites or unknown
            # relations (checked just above): then a personal-data value can
            # reach an output only through a classified column's name, a star
            # or a whole row.
            if not pii:
                return self._without_pii(root, "no referenced table has personal data")
            if (
                self._outputs_match_result(root)
                and not _may_reach_pii(root, {column for _, column in pii})
                and not _names_unknown_column(root, {c for key in referenced for c in self.index.columns(key)})
            ):
                return self._without_pii(root, "no personal-data column is named in the query")

        if _odd_column_names(root):
            return self._fallback("a column is named by a string or an expression", root, referenced)
        names = self._original_names(root)
        try:
            root, tables = self._private(root, tables)
            return self._lineage(root, tables, names)
        except _Unresolved as error:
            why = str(error)
        except Exception as error:  # qualify / scope errors, recursion, ... -> fallback
            why = f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}".rstrip(": ")
        # The lineage pass rewrote the tree; the fallback needs the query as written.
        return self._fallback(why, self._parse()[0], referenced)

    def literal_outputs(self, parsed: tuple[exp.Expr | None, str] | None = None) -> list[bool] | None:
        """Which outputs are only the model's own literals (see
        OutputColumn.literal), judged on the statement as written; None when
        that cannot be told. A function returning session or statement state
        (current_query(), current_setting()) is not a literal. Reads the
        tree only: `parsed` (what `_parse` gave) can go to `run` afterwards."""
        root, _why = parsed or self._parse()
        if root is None:
            return None
        flags = _literal_items(root)
        if flags is None:
            return None
        for node in root.walk():
            if _function_role(node) in ("data", "statement") or (_string_value(node) and self.node_taint(node)):
                return [False] * len(flags)
        return flags

    def rows_kind(self) -> str | None:
        """:func:`rows_read_pii`: the same parse, fast path, qualify and walk
        as :meth:`run`, asking the count question of the root scope."""
        if self.dialect not in _DIALECTS or not isinstance(self.sql, str):
            return self._rows_fallback(None, None)
        root, _why = self._parse(shared=True)  # read only, up to the walk
        if root is None or not isinstance(root, (exp.Select, exp.SetOperation, exp.Values)):
            return self._rows_fallback(None, None)
        if isinstance(root, exp.Values):
            return None  # as many rows as it lists
        referenced, tables = self._referenced_tables(root)
        pii = self.index.pii_columns(referenced)
        self.pii_names = {column for _, column in pii}
        if not self.special_kinds(root):
            # Without a personal-data name, star, whole row, literal or
            # unknown relation nothing can read personal data (see run()).
            if not pii:
                return None
            if not _may_reach_pii(root, self.pii_names) and not _names_unknown_column(
                root, {c for key in referenced for c in self.index.columns(key)}
            ):
                return None
            # No construct that can set a number of rows at all (no table or
            # set-returning function, recursion, computed limit, grouping or
            # DISTINCT over an expression, HAVING, set operation, or predicate
            # comparing personal data with another column): the walk below
            # could find nothing either, so it is skipped (it costs a qualify).
            if _row_shape(root, self.pii_names) is None:
                return None
        try:
            if _odd_column_names(root):
                raise _Unresolved("a column is named by a string or an expression")
            root, tables = self._private(root, tables)
            root_scope = self._prepare(root, tables)
            found = self._result_rows(root_scope, root=True)
        except (_Unresolved, SqlglotError, RecursionError):  # unresolved, budget: by names and shape
            return self._rows_fallback(self._parse()[0], referenced)
        kinds = [kind for kind in (self.index.columns(key).get(column) for key, column in found[0]) if kind]
        return _most_severe([*kinds, *(taint[0] for taint in found[1])])

    def _result_rows(self, scope: Scope, root: bool = False) -> _Found:
        """Personal data that sets the number of rows of the result: for the
        root scope what :meth:`_count_multiplied` and :meth:`_row_count`
        find for a count over it, except where that number cannot depend on
        it: the root's ORDER BY (unless WITH TIES or a set-returning key),
        and everything below an aggregate without GROUP BY (one row, or
        none under HAVING: a yes/no like a filter) but its set-returning
        outputs. A set operation's branches are results of their own."""
        expression = scope.expression
        if root and expression.args.get("order") is not None and not _order_sets_count(expression):
            expression.set("order", None)  # ordering never changes how many rows there are
        if isinstance(expression, exp.SetOperation):
            branches = scope.set_operation_scopes
            if len(branches) != 2:
                raise _Unresolved("set operation without branches")
            results = [self._limit_taint(scope), self._row_choice(scope)]
            if expression.args.get("distinct"):
                results.extend(self._output_key(scope, i) for i in range(self._output_count(scope)))
            results.extend(self._result_rows(branch) for branch in branches)
            return _merge(results)
        if _is_aggregate_select(expression):
            return _merge(
                self._pii_only(self._trace(item, scope, False))
                for item in expression.selects
                if any(_is_set_returning(node) for node in item.walk())
            )
        return _merge([self._count_multiplied(scope), self._row_count(scope)])

    def _rows_fallback(self, root: exp.Expr | None, referenced: set[str] | None) -> str | None:
        """:func:`rows_read_pii` when the walk cannot decide: the doubt kind
        when the statement names personal data AND has a shape that can set
        a number of rows (:func:`_row_shape`), else None. Unparsable text is
        judged by its words: a PII column name, a tainted literal or any
        table with personal data (a whole row cannot be ruled out), and a
        row-setting word or a list / function after FROM."""
        if root is None:
            if not isinstance(self.sql, str):
                return _DOUBT_KIND
            names_pii = (
                bool(self.index.pii_columns(self._tables_by_word()))
                or self._text_literal_kind() is not None
                or _names_pii_by_word(self.sql, self.index.schema, self.literal_kinds)
            )
            shaped = bool(_ROW_SHAPE_WORDS.search(self.sql) or _FROM_LIST.search(self.sql))
            return _DOUBT_KIND if names_pii and shaped else None
        if referenced is None:
            referenced, _ = self._referenced_tables(root)
        pii_names = {column for _, column in self.index.pii_columns(referenced)}
        names_pii = bool(self.special_kinds(root)) or (bool(pii_names) and _may_reach_pii(root, pii_names))
        if not names_pii:
            return None
        return _DOUBT_KIND if _row_shape(root, pii_names) is not None else None

    def _parse(self, *, shared: bool = False) -> tuple[exp.Expr | None, str]:
        """(root of the single statement, "") or (None, why not).

        `shared`: the process's one parse of the text (dialects.parsed, which
        the guard read), without a copy, for passes that only read it: the
        fast paths, the literal pass, the fallbacks. Whatever rewrites a
        tree (the walk's qualify) takes `_private` first. A statement the
        catalog rewrite below would change is a copy even then."""
        try:
            found = parsed(self.dialect, self.sql).statements if shared else parse_sql(self.dialect, self.sql)
            statements = [s for s in found if s is not None and not isinstance(s, exp.Semicolon)]
        except Exception:
            return None, "parse error"
        if len(statements) != 1:
            # The guard only lets single statements run; whichever one produced
            # the result, its lineage is not known here.
            return None, f"expected one statement, got {len(statements)}"
        root = statements[0]
        if shared:
            if _catalog_qualified_calls(root, self.dialect):
                root = copy_tree(root)
            else:
                root = _unwrap(root)
                self._shared_root = root
                return root, ""
        return _unwrap(_catalog_unqualified(root, self.dialect)), ""

    def _private(
        self, root: exp.Expr, tables: list[tuple[exp.Table, tuple[str, ...]]]
    ) -> tuple[exp.Expr, list[tuple[exp.Table, tuple[str, ...]]]]:
        """(`root`, `tables`) for a pass that rewrites the tree: a copy of
        the statement and its table nodes when `root` is the shared parse
        (which other readers of the same text, the guard first, see as
        parsed), else as they are."""
        if root is not self._shared_root:
            return root, tables
        # The shared statement has no catalog-qualified call (else _parse
        # would have copied it), so neither has its copy.
        statements = [
            s for s in parse_sql(self.dialect, self.sql) if s is not None and not isinstance(s, exp.Semicolon)
        ]
        if len(statements) != 1:
            raise _Unresolved("parse error")  # cannot happen (the same text parsed a moment ago); masks more
        copy = _unwrap(statements[0])
        return copy, self._referenced_tables(copy)[1]

    def _referenced_tables(self, root: exp.Expr) -> tuple[set[str], list[tuple[exp.Table, tuple[str, ...]]]]:
        """(schema keys of every table the query may read, the table nodes to
        point at the schema with the keys each may mean). Relations that are
        not in the schema, and table functions not known to be pure, are
        recorded in ``unknown_relations``.

        A bare name equal to a CTE name is left alone for qualify to resolve
        as the CTE; where it really is the table (inside the CTE's own body,
        or out of the CTE's scope), the walk meets a table missing from the
        qualify schema and falls back. Its schema keys still count as
        referenced, so such a query never takes the "no personal data" path."""
        cte_names = {cte.alias_or_name.lower() for cte in root.find_all(exp.CTE)}
        referenced: set[str] = set()
        tables: list[tuple[exp.Table, tuple[str, ...]]] = []
        for table in root.find_all(exp.Table):
            if table.arg_key == "indexed":
                continue  # SQLite `t INDEXED BY idx`: idx is an index
            if not isinstance(table.this, exp.Identifier):
                # Table function: its arguments are walked as expressions.
                names = _function_names(table.this) if isinstance(table.this, exp.Expr) else frozenset()
                if not names & _PURE_TABLE_FUNCTIONS:
                    self.unknown_relations.add(table.this.sql(self.dialect)[:40] if table.this else "?")
                continue
            parts = table.parts
            if not all(isinstance(part, exp.Identifier) for part in parts):
                self.unknown_relations.add(table.sql(self.dialect)[:40])
                continue
            lowered = [part.name.lower() for part in parts]
            keys = self.index.resolve(lowered)
            referenced.update(keys)
            if len(lowered) == 1 and lowered[0] in cte_names:
                continue
            if not keys:
                self.unknown_relations.add(".".join(lowered))
            elif len(keys) > 1:
                self.ambiguous_relations.add(lowered[-1])
            tables.append((table, keys))
        return referenced, tables

    def _outputs_match_result(self, root: exp.Expr) -> bool:
        """As many outputs as the database returned (the walk checks the
        same: a different count means sqlglot and the server read the SQL
        differently, and then nothing about it is trusted)."""
        return self.n_columns is None or len(self._original_names(root)) == self.n_columns

    def _original_names(self, root: exp.Expr) -> list[str | None]:
        """Display names of the outputs as written; None for a `*` entry.
        Asked twice per query before the tree changes; rendering a name can
        cost a SQL generation, so the last answer is kept."""
        cached = self._names_cache
        if cached is not None and cached[0] is root:
            return list(cached[1])
        names = self._compute_original_names(root)
        self._names_cache = (root, names)
        return list(names)

    def _compute_original_names(self, root: exp.Expr) -> list[str | None]:
        select = _leftmost_select(root)
        if isinstance(select, exp.Values):
            return [f"column{i + 1}" for i in range(_values_width(select))]
        if not isinstance(select, exp.Select):
            return []
        return [None if _is_star(s) else _display_name(s, self.dialect) for s in select.selects]

    def _without_pii(self, root: exp.Expr, reason: str) -> list[OutputColumn]:
        names = self._original_names(root)
        count = self.n_columns if self.n_columns is not None else len(names)
        if len(names) != count or None in names:
            names = [""] * count  # `*` or a different count: names cannot be aligned
        return [OutputColumn(i, names[i] or "", None, (), reason) for i in range(count)]
