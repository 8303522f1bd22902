"""Column lineage for masking SQL results.

The agent's read-only query has run; before its result reaches the model,
every OUTPUT column whose value is derived from a personal-data (PII) column
must be masked whole. :func:`classify_outputs` decides, for each output column,
whether it is derived from a classified column and of which kind.

How it works:

1. Parse once with sqlglot and collect the tables the query may read (a
   name shared with a CTE counts too). If none of them has a PII column,
   nothing can be derived from one: every output is "not PII" without
   further work (the common case stays cheap, well under a millisecond).
   Likewise when the query never names a PII column, expands no star (other
   than ``COUNT(*)``) and references no whole row (:func:`_may_reach_pii`):
   ``SELECT city, count(*) FROM customers GROUP BY city`` needs no walk.
2. Otherwise qualify the tree with sqlglot's optimizer (``*`` / ``t.*``
   expand, aliases resolve, every column gets its source alias) against a
   small schema of just the referenced tables, build the scope tree, and walk
   each output expression down to real table columns through CTEs, derived
   tables, set operations, scalar subqueries, LATERAL and table functions.
   (About 2 ms for a typical join, most of it sqlglot's parse and qualify.)
3. Anything the walk does not positively understand (unknown table or column,
   unexpanded ``*``, unqualified column, a column count different from what
   the database returned, any exception) drops to a name-based FALLBACK that
   masks more, never less (see :meth:`_Classifier._fallback`).

Which outputs carry a PII value. An output is PII when ANY column reaching its
value is PII, whatever the functions in between (concat, substring, upper,
coalesce, CASE - conditions included -, MAX/MIN, string_agg / group_concat /
array_agg, arithmetic, casts, comparisons, ...): they return the value, a part
of it or a property of it, and masking too much is the safe error. The only
value-free positions, whose inputs do not count:

* ``COUNT(...)`` (incl. ``COUNT(DISTINCT x)`` and a ``FILTER (WHERE ...)`` on
  it): the value is a number of rows, like a WHERE clause filtering on PII.
* ``length`` / ``char_length`` / ``character_length`` / ``octet_length`` /
  ``bit_length``: a number that says nothing about the characters.
* ``row_number()`` / ``rank()`` / ``dense_rank()``: a position.
* ``EXISTS (...)``: a truth value about row existence, like a WHERE clause.
* The window specification of ``f(...) OVER (PARTITION BY ... ORDER BY ...)``
  (only ``f``'s arguments carry the value), like GROUP BY / ORDER BY.

WHERE / JOIN ON / GROUP BY / HAVING / ORDER BY never carry a value into an
output. ``WITHIN GROUP (ORDER BY x)`` does (percentile_disc returns an x).

Identifiers are compared case-insensitively, quoted or not: treating
``"Phone"`` as ``phone`` can only mask more.

Star expansion follows the column order of ``schema[table]``: that dict must
list columns in the table's ordinal order (information_schema's
ordinal_position, SQLite's table_info cid), or ``SELECT *`` maps the wrong
positions - ``n_columns`` only catches a different COUNT of columns. Callers
that have the result's column names can also compare them with
``OutputColumn.name`` case-insensitively (reliable for plain and
star-expanded columns).

Tables missing from ``schema`` are unclassified: if the query reads no table
with a PII column, nothing is masked (the value detectors still run on the
result elsewhere).

Only public sqlglot API is used; with sqlglotc installed the optimizer is
mypyc-compiled, so private internals may differ from the pure-Python package.
In sqlglot 30 a query's WITH / FROM args are keyed "with_" / "from_".

No Django import: this module is pure and runs on every query result.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

from governance.sql.dialects import SUPPORTED_DIALECTS, dialect_of

_DIALECTS: dict[str, Dialect] = {name: Dialect.get_or_raise(name) for name in SUPPORTED_DIALECTS}

# "Most severe first" when an output derives from several kinds: identity
# numbers, then financial, then contact data, then names. The output is
# masked whole either way; the kind only labels the token. Kinds not listed
# (a future PiiKind) rank after these but are still PII.
_SEVERITY = ("rrn", "frn", "passport", "driver_license", "card", "account", "phone", "email", "address", "name")
_SEVERITY_RANK = {kind: rank for rank, kind in enumerate(_SEVERITY)}

# Kind used when even the schema cannot be read (last resort): every output is
# masked, and the least specific kind labels the tokens.
_DOUBT_KIND = "name"

# Lineage walk budget (nodes visited + columns resolved). A normal query needs
# a few hundred; pathological nesting or recursive CTEs must not stall the
# worker, so past the budget the query is treated as unresolved (masks more).
_MAX_STEPS = 20_000

# Tables the query reads are renamed to these before qualifying, so that
# "schema.table" and bare schema keys both fit sqlglot's one-level schema and
# no CTE or alias can shadow a real table.
_SYNTHETIC_PREFIX = "__pii_lineage_t"

Source = tuple[str, str]  # (schema key, lowercased column)


@dataclass(frozen=True)
class OutputColumn:
    index: int
    name: str  # output name as the DB will label it (alias or column name) - best effort
    pii_kind: str | None  # kind of the PII source (most severe if several); None if not derived from PII
    sources: tuple[tuple[str, str], ...]  # value-carrying (table, column) sources, PII ones first
    reason: str  # short: "derived from customers.phone", "count only", "lineage unresolved: ...; masked (doubt)"


class _Unresolved(Exception):
    """Lineage cannot be decided positively; the message says why (short)."""


# --------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------


def classify_outputs(
    sql: str, dialect: str, schema: dict[str, dict[str, str | None]], n_columns: int | None = None
) -> list[OutputColumn]:
    """One :class:`OutputColumn` per output column of ``sql``.

    ``schema``: table key (lowercase, "schema.table" or bare) -> {column
    (lowercase, in ordinal order) -> PII kind or None}, the analysed schema of
    the connection. ``n_columns``: how many columns the database returned
    (``len(cursor.description)``); always pass it - it is the list length and
    the check that the lineage matches what actually ran.

    Never raises: any failure masks more (fail closed).
    """
    try:
        return _Classifier(sql, dialect, schema, n_columns).run()
    except Exception as error:  # fail closed on anything unexpected
        return _last_resort(schema, n_columns, f"internal error: {type(error).__name__}")


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


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


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


# Functions whose result carries no value of their input. See the module
# docstring; keep this list short - every entry is a place PII is let through.
_LENGTH_FUNCTIONS = frozenset({"length", "len", "char_length", "character_length", "octet_length", "bit_length"})


@functools.cache
def _label_for_type(node_type: type[exp.Expr]) -> str | None:
    # Cached per type: the issubclass checks run once per type per process.
    if issubclass(node_type, exp.Count):
        return "count"
    if issubclass(node_type, (exp.Length, exp.BitLength)):
        return "length"
    if issubclass(node_type, (exp.RowNumber, exp.Rank, exp.DenseRank)):
        return "rank"
    if issubclass(node_type, exp.Exists):
        return "exists"
    return None


def _value_free_label(node: exp.Expr) -> str | None:
    label = _label_for_type(type(node))
    if label:
        return label
    node_type = type(node)
    if node_type is exp.Anonymous:  # octet_length(...) has no typed node
        return "length" if node.name.lower() in _LENGTH_FUNCTIONS else None
    if node_type is exp.Filter:  # COUNT(*) FILTER (WHERE ...): still a count
        inner = node.this
        return _value_free_label(inner) if isinstance(inner, exp.Expr) else None
    return None


def _unwrap(node: exp.Expr) -> exp.Expr:
    """(SELECT ...) -> SELECT ...: a parenthesised root has the same outputs."""
    while isinstance(node, exp.Subquery) and not node.alias and isinstance(node.this, exp.Query):
        node = node.this
    return node


def _leftmost_select(node: exp.Expr) -> exp.Expr:
    """The branch that names a set operation's outputs."""
    node = _unwrap(node)
    while isinstance(node, exp.SetOperation):
        node = _unwrap(node.this)
    return node


def _is_star(node: exp.Expr) -> bool:
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


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


# --------------------------------------------------------------------------
# Schema lookups
# --------------------------------------------------------------------------


class _SchemaIndex:
    """Lookups into the caller's schema without copying it: exact keys first,
    a full case-insensitive index only when a lookup misses."""

    def __init__(self, schema: Mapping[str, Mapping[str, object]]) -> None:
        self.schema = schema
        self._by_lower: dict[str, str] | None = None
        self._by_bare: dict[str, list[str]] | None = None
        self._columns: dict[str, dict[str, str | None]] = {}

    def _build(self) -> None:
        by_lower: dict[str, str] = {}
        by_bare: dict[str, list[str]] = {}
        for key in self.schema:
            lowered = str(key).lower()
            by_lower.setdefault(lowered, key)
            by_bare.setdefault(lowered.rsplit(".", 1)[-1], []).append(key)
        self._by_lower, self._by_bare = by_lower, by_bare

    def resolve(self, parts: list[str]) -> tuple[str, ...]:
        """Schema keys a table reference (lowercased parts) may mean.

        `public.customers` also matches a bare "customers" key (dropping
        leading qualifiers covers PostgreSQL's public schema, MySQL's
        `db.table` and SQLite's `main.t`). A bare `customers` also matches
        "sales.customers"; several such keys -> all returned (ambiguous)."""
        for start in range(len(parts)):
            key = ".".join(parts[start:])
            if key in self.schema:
                return (key,)
        if self._by_lower is None:
            self._build()
        assert self._by_lower is not None and self._by_bare is not None
        for start in range(len(parts)):
            key = self._by_lower.get(".".join(parts[start:]))
            if key is not None:
                return (key,)
        if len(parts) == 1:
            return tuple(sorted(self._by_bare.get(parts[0], ())))
        return ()

    def columns(self, key: str) -> dict[str, str | None]:
        """{lowercased column -> kind or None}, in the schema's order."""
        columns = self._columns.get(key)
        if columns is None:
            raw = self.schema.get(key) or {}
            columns = {str(name).lower(): _kind(kind) for name, kind in raw.items()}
            self._columns[key] = columns
        return columns

    def pii_columns(self, keys: Iterable[str]) -> dict[Source, str]:
        return {(key, column): kind for key in keys for column, kind in self.columns(key).items() if kind}


def _odd_column_names(root: exp.Expr) -> bool:
    """Does the query name a column in a way sqlglot does not read as a
    column? A column whose name is not an identifier (SQLite's
    ``c.'phone'``, MySQL's ``c."phone"`` under ANSI_QUOTES: sqlglot sees a
    string literal) or a dot after an expression (``'c'.'name'``,
    ``(row).field``) may be a column to the server. The walk cannot follow
    such a name, so it is not even tried (every output is masked)."""
    for node in root.walk():
        if isinstance(node, exp.Column):
            if not isinstance(node.this, (exp.Identifier, exp.Star)):
                return True
        elif isinstance(node, exp.Dot):
            if not isinstance(node.this, (exp.Identifier, exp.Column, exp.Dot)):
                return True
    return False


def _renames_or_odd_references(root: exp.Expr) -> bool:
    """_odd_column_names, or an alias with a column list, which renames the
    columns of whatever it aliases by position (``customers AS c(i, n)``,
    ``(a JOIN b) x(p, q)`` in PostgreSQL): names alone say nothing then."""
    if any(node.columns for node in root.find_all(exp.TableAlias)):
        return True
    return _odd_column_names(root)


def _may_reach_pii(root: exp.Expr, pii_names: set[str]) -> bool:
    """Could any value of a PII column reach the result? False only when the
    tree (a) holds no identifier, bare word or string literal spelled like a
    PII column (any case; a literal can be a column name to the server, see
    _renames_or_odd_references), (b) has no star outside ``COUNT(*)``
    (``*`` and ``t.*`` expand to every column), (c) has no column reference
    spelled like a table, table alias or derived-table alias (PostgreSQL's
    whole-row reference: ``SELECT c FROM customers c``, ``row_to_json(c)``),
    and (d) renames no columns by position and names none oddly. A value
    travels only through a name, a star or a whole row, so without all of
    these none can; every doubt answers True."""
    if _renames_or_odd_references(root):
        return True
    relations: set[str] = set()
    columns: list[str] = []
    for node in root.walk():
        if isinstance(node, (exp.Identifier, exp.Var, exp.Literal)):
            if str(node.this).lower() in pii_names:
                return True
        elif isinstance(node, exp.Star):
            if not isinstance(node.parent, exp.Count):
                return True
        elif isinstance(node, exp.Table):
            relations.add(node.name.lower())
            relations.add(node.alias.lower())
        elif isinstance(node, exp.TableAlias):
            relations.add(node.name.lower())
        if isinstance(node, exp.Column):
            columns.append(node.name.lower())
    return any(column in relations for column in columns)


# A bare word of the SQL text, for finding referenced tables when parsing fails.
_WORD = re.compile(r"[^\W\d][\w$]*")


# --------------------------------------------------------------------------
# The classifier
# --------------------------------------------------------------------------


def _dialect_or_same(name: str) -> str:
    try:
        return dialect_of(name)
    except ValueError:
        return str(name).lower()  # unknown: the classifier's parse fails and masks everything


class _Classifier:
    def __init__(self, sql: str, dialect: str, schema: Mapping, n_columns: int | None) -> None:
        self.sql = sql
        self.dialect = _dialect_or_same(dialect)
        self.index = _SchemaIndex(schema)
        self.n_columns = n_columns if isinstance(n_columns, int) and n_columns >= 0 else None
        # Lineage walk state.
        self.synthetic: dict[str, str] = {}  # synthetic table name -> schema key
        self.scope_by_expression: dict[int, Scope] = {}
        self.traversed: set[int] = set()
        self.memo: dict[tuple[int, str], tuple[frozenset[Source], frozenset[str]]] = {}
        self.path: set[tuple[int, str]] = set()
        self.cycle_cut = False
        self.steps = 0

    # ---- top level ------------------------------------------------------

    def run(self) -> list[OutputColumn]:
        if self.dialect not in _DIALECTS:
            return self._fallback(f"unsupported dialect {self.dialect!r}", None, None)
        if not isinstance(self.sql, str):
            return self._fallback("sql is not a string", None, None)
        root, why = self._parse()
        if root is None:
            return self._fallback(why, None, None)
        if not isinstance(root, (exp.Select, exp.SetOperation, exp.Values)):
            # Not a query sqlglot understands (exp.Command for EXPLAIN, ...):
            # its tree says nothing reliable about the tables it reads.
            return self._fallback(f"not a query: {type(root).__name__}", None, None)

        referenced, tables = self._referenced_tables(root)
        pii = self.index.pii_columns(referenced)
        if not pii:
            # Nothing the query reads is classified as personal data, so no
            # output can be derived from it: skip the (costly) lineage.
            return self._without_pii(root, "no referenced table has personal data")
        if self._outputs_match_result(root) and not _may_reach_pii(root, {column for _, column in pii}):
            # The tables have personal data, but the query never names a PII
            # column, expands a star or references a whole row: no output can
            # carry such a value (the walk would only confirm it, at qualify's cost).
            return self._without_pii(root, "no personal-data column is named in the query")

        if _odd_column_names(root):
            return self._fallback("a column is named by a string or an expression", root, referenced)
        names = self._original_names(root)
        try:
            return self._lineage(root, tables, names)
        except _Unresolved as error:
            why = str(error)
        except Exception as error:  # qualify / scope errors, recursion, ... -> fallback
            why = f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}".rstrip(": ")
        # The lineage pass rewrote the tree; the fallback needs the query as written.
        return self._fallback(why, self._parse()[0], referenced)

    def _parse(self) -> tuple[exp.Expr | None, str]:
        """(root of the single statement, "") or (None, why not)."""
        try:
            statements = [
                s for s in _DIALECTS[self.dialect].parse(self.sql) if s is not None and not isinstance(s, exp.Semicolon)
            ]
        except Exception:
            return None, "parse error"
        if len(statements) != 1:
            # The guard only lets single statements run; whichever one produced
            # the result, its lineage is not known here.
            return None, f"expected one statement, got {len(statements)}"
        return _unwrap(statements[0]), ""

    def _referenced_tables(self, root: exp.Expr) -> tuple[set[str], list[tuple[exp.Table, tuple[str, ...]]]]:
        """(schema keys of every table the query may read, the table nodes to
        point at the schema with the keys each may mean).

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
                continue  # table function: its arguments are walked as expressions
            parts = table.parts
            if not all(isinstance(part, exp.Identifier) for part in parts):
                continue
            lowered = [part.name.lower() for part in parts]
            keys = self.index.resolve(lowered)
            referenced.update(keys)
            if len(lowered) == 1 and lowered[0] in cte_names:
                continue
            tables.append((table, keys))
        return referenced, tables

    def _outputs_match_result(self, root: exp.Expr) -> bool:
        """As many outputs as the database returned (the walk checks the
        same: a different count means sqlglot and the server read the SQL
        differently, and then nothing about it is trusted)."""
        return self.n_columns is None or len(self._original_names(root)) == self.n_columns

    def _original_names(self, root: exp.Expr) -> list[str | None]:
        """Display names of the outputs as written; None for a `*` entry."""
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

    # ---- lineage ---------------------------------------------------------

    def _lineage(
        self, root: exp.Expr, tables: list[tuple[exp.Table, tuple[str, ...]]], names: list[str | None]
    ) -> list[OutputColumn]:
        if isinstance(root, exp.Values):
            return self._values_root(root, names)
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
                continue  # unknown or ambiguous: reaching it in the walk is unresolved
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

        count = self._output_count(root_scope)
        if self.n_columns is not None and self.n_columns != count:
            raise _Unresolved(f"{self.n_columns} columns returned, {count} resolved")

        qualified_names = [s.alias_or_name for s in _leftmost_select(root_scope.expression).selects]
        display = self._align_names(names, qualified_names)
        outputs = []
        for index in range(count):
            sources, labels = self._scope_output(root_scope, index)
            outputs.append(self._output(index, display[index], sources, labels))
        return outputs

    def _values_root(self, root: exp.Values, names: list[str | None]) -> list[OutputColumn]:
        # A bare VALUES list reads nothing unless it nests a query or a column.
        if any(isinstance(node, (exp.Column, exp.Query)) for node in root.walk()):
            raise _Unresolved("VALUES with subqueries")
        count = _values_width(root)
        if self.n_columns is not None and self.n_columns != count:
            raise _Unresolved(f"{self.n_columns} columns returned, {count} resolved")
        return [OutputColumn(i, f"column{i + 1}", None, (), "literal") for i in range(count)]

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

    def _output(self, index: int, name: str, sources: frozenset[Source], labels: frozenset[str]) -> OutputColumn:
        kinds = {source: self.index.columns(source[0]).get(source[1]) for source in sources}
        pii = sorted((s for s in sources if kinds[s]), key=lambda s: (_severity(kinds[s] or ""), s))
        others = sorted(s for s in sources if not kinds[s])
        ordered = tuple(pii + others)
        if pii:
            shown = ", ".join(_source_text(s) for s in pii[:3])
            more = f" (+{len(pii) - 3} more)" if len(pii) > 3 else ""
            return OutputColumn(index, name, kinds[pii[0]], ordered, f"derived from {shown}{more}")
        if others:
            reason = "not derived from personal data"
        elif labels:
            reason = " / ".join(sorted(labels)) + " only"
        else:
            reason = "no source column (literal)"
        return OutputColumn(index, name, None, ordered, reason)

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise _Unresolved("lineage too complex")

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

    def _scope_output(self, scope: Scope, index: int) -> tuple[frozenset[Source], frozenset[str]]:
        """Lineage of output `index` of a query scope; a set operation's output
        is derived from that output of every branch."""
        expression = scope.expression
        if isinstance(expression, exp.SetOperation):
            branches = scope.set_operation_scopes
            if len(branches) != 2:
                raise _Unresolved("set operation without branches")
            sources: set[Source] = set()
            labels: set[str] = set()
            for branch in branches:
                branch_sources, branch_labels = self._scope_output(branch, index)
                sources |= branch_sources
                labels |= branch_labels
            return frozenset(sources), frozenset(labels)
        if isinstance(expression, exp.Select):
            selects = expression.selects
            if index >= len(selects):
                raise _Unresolved("output index out of range")
            return self._trace(selects[index], scope)
        raise _Unresolved(f"unsupported query shape: {type(expression).__name__}")

    def _scope_width(self, scope: Scope) -> int:
        if scope.outer_columns:
            return len(scope.outer_columns)
        return len(_leftmost_select(scope.expression).selects)

    def _trace(self, node: exp.Expr, scope: Scope) -> tuple[frozenset[Source], frozenset[str]]:
        """Value-carrying real-table columns of one expression evaluated in
        `scope`, plus the labels of value-free functions skipped. Iterative:
        long expressions must not hit Python's recursion limit."""
        sources: set[Source] = set()
        labels: set[str] = set()
        stack: list[exp.Expr] = [node]
        while stack:
            current = stack.pop()
            self._tick()
            label = _value_free_label(current)
            if label:
                labels.add(label)
                continue
            if isinstance(current, exp.Window):
                # Only the function carries the value; PARTITION BY / ORDER BY
                # choose rows, like GROUP BY.
                if isinstance(current.this, exp.Expr):
                    stack.append(current.this)
                continue
            if isinstance(current, exp.Column):
                if isinstance(current.this, exp.Star):
                    raise _Unresolved("* could not be expanded")
                found, found_labels = self._column(current, scope)
            elif isinstance(current, exp.TableColumn):  # PostgreSQL whole-row reference `SELECT c FROM t c`
                found, found_labels = self._whole_row(current.name, scope)
            elif isinstance(current, exp.Star):
                raise _Unresolved("* could not be expanded")
            elif isinstance(current, exp.Subquery):  # (SELECT ...): the scope is keyed by the inner query
                stack.append(current.this)
                continue
            elif isinstance(current, exp.Query):  # scalar subquery, IN (...), ARRAY(SELECT ...)
                found, found_labels = self._nested_query(current)
            else:
                stack.extend(current.iter_expressions())
                continue
            sources |= found
            labels |= found_labels
        return frozenset(sources), frozenset(labels)

    def _nested_query(self, query: exp.Query) -> tuple[frozenset[Source], frozenset[str]]:
        scope = self.scope_by_expression.get(id(query))
        if scope is None:
            raise _Unresolved("subquery without scope")
        sources: set[Source] = set()
        labels: set[str] = set()
        for index in range(self._output_count(scope)):
            found, found_labels = self._scope_output(scope, index)
            sources |= found
            labels |= found_labels
        return frozenset(sources), frozenset(labels)

    def _find_source(self, alias: str, scope: Scope) -> tuple[exp.Table | Scope, Scope]:
        """The source an alias names, looking outwards for correlated references."""
        current: Scope | None = scope
        while current is not None:
            source = current.sources.get(alias)
            if source is not None:
                return source, current
            current = current.parent
        raise _Unresolved(f"unknown source {alias!r}")

    def _column(self, column: exp.Column, scope: Scope) -> tuple[frozenset[Source], frozenset[str]]:
        self._tick()
        alias = column.table
        name = column.name
        if not alias:
            raise _Unresolved(f"column {name!r} not resolved")
        source, owner = self._find_source(alias, scope)
        if isinstance(source, exp.Table):
            if not isinstance(source.this, exp.Identifier):
                # Table function (json_each(c.memo), generate_series(...)):
                # every output derives from all its arguments.
                return self._trace(source.this, owner)
            key = self.synthetic.get(source.name)
            if key is None:
                raise _Unresolved(f"table not in analysed schema: {source.name}")
            if name not in self.index.columns(key):
                raise _Unresolved(f"column not in analysed schema: {key}.{name}")
            return frozenset({(key, name)}), frozenset()
        return self._derived_column(source, name)

    def _whole_row(self, alias: str, scope: Scope) -> tuple[frozenset[Source], frozenset[str]]:
        source, owner = self._find_source(alias, scope)
        if isinstance(source, exp.Table):
            if not isinstance(source.this, exp.Identifier):
                return self._trace(source.this, owner)
            key = self.synthetic.get(source.name)
            if key is None:
                raise _Unresolved(f"table not in analysed schema: {source.name}")
            return frozenset((key, column) for column in self.index.columns(key)), frozenset()
        source = self._real_scope(source)
        sources: set[Source] = set()
        labels: set[str] = set()
        if isinstance(source.expression, (exp.Select, exp.SetOperation)):
            for index in range(self._scope_width(source)):
                found, found_labels = self._scope_output(source, index)
                sources |= found
                labels |= found_labels
            return frozenset(sources), frozenset(labels)
        return self._trace(source.expression, source)

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

    def _derived_column(self, scope: Scope, name: str) -> tuple[frozenset[Source], frozenset[str]]:
        """Column `name` of a CTE, derived table, LATERAL or UNNEST/VALUES."""
        scope = self._real_scope(scope)
        key = (id(scope), name)
        cached = self.memo.get(key)
        if cached is not None:
            return cached
        if key in self.path:
            # Recursive CTE: this column is already being resolved further up;
            # its other contributions are collected there. The results below
            # the cut are partial, so they are not memoised.
            self.cycle_cut = True
            return frozenset(), frozenset()
        outer_cut = self.cycle_cut
        self.cycle_cut = False
        self.path.add(key)
        try:
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
                sources: set[Source] = set()
                labels: set[str] = set()
                for index in indexes:
                    found, found_labels = self._scope_output(scope, index)
                    sources |= found
                    labels |= found_labels
                result = (frozenset(sources), frozenset(labels))
            elif (
                isinstance(expression, exp.Lateral)
                and not scope.outer_columns
                and isinstance(expression.this, exp.Subquery)
                and id(expression.this.this) in self.scope_by_expression
            ):
                # LATERAL (SELECT ...) AS l: the column by name, like a derived table.
                inner = self.scope_by_expression[id(expression.this.this)]
                result = self._derived_column(inner, name)
            else:
                # UNNEST(...), VALUES, table functions, LATERAL with a column
                # list: every column derives from everything inside it.
                result = self._trace(expression, scope)
        finally:
            self.path.discard(key)
        if not self.cycle_cut:
            self.memo[key] = result
        self.cycle_cut = self.cycle_cut or outer_cut
        return result

    # ---- fallback ----------------------------------------------------------

    def _fallback(self, why: str, root: exp.Expr | None, referenced: set[str] | None) -> list[OutputColumn]:
        """Lineage unresolved. If no table the query reads has a PII column,
        nothing is masked. Otherwise, for a flat SELECT over plain tables whose
        outputs align with the result, an output is masked when its name or a
        column it uses (outside COUNT & co.) has the name of a PII column of a
        referenced table, or it uses a whole row; any other shape means the
        names cannot be mapped, and every output is masked."""
        if referenced is None:
            if root is not None:
                referenced, _ = self._referenced_tables(root)
            else:
                referenced = self._tables_by_word()
        pii = self.index.pii_columns(referenced)
        if not pii:
            if root is None:
                count = self.n_columns or 0
                return [
                    OutputColumn(i, "", None, (), f"lineage unresolved: {why}; no referenced table has personal data")
                    for i in range(count)
                ]
            return self._without_pii(root, f"lineage unresolved: {why}; no referenced table has personal data")

        by_name = self._by_name(root, pii) if root is not None else None
        if by_name is not None:
            outputs = []
            for index, (name, sources) in enumerate(by_name):
                if sources:
                    ordered = tuple(sorted(sources, key=lambda s: (_severity(pii[s]), s)))
                    kind = pii[ordered[0]]
                    shown = ", ".join(_source_text(s) for s in ordered[:3])
                    reason = f"lineage unresolved: {why}; name matches {shown}; masked"
                    outputs.append(OutputColumn(index, name, kind, ordered, reason))
                else:
                    reason = f"lineage unresolved: {why}; no personal-data column name"
                    outputs.append(OutputColumn(index, name, None, (), reason))
            return outputs

        kind = _most_severe(pii.values())
        names = self._original_names(root) if root is not None else []
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

    def _by_name(self, root: exp.Expr, pii: dict[Source, str]) -> list[tuple[str, set[Source]]] | None:
        """Name-based masking for a flat SELECT, or None when names cannot be
        mapped to the result (then everything is masked)."""
        if not isinstance(root, exp.Select) or root.args.get("with_") or root.args.get("laterals"):
            return None
        if _renames_or_odd_references(root):
            return None  # `customers AS c(i, n)`: `n` is the name column under another name
        relations: list[exp.Expr] = []
        from_ = root.args.get("from_")
        if from_ is not None:
            relations.append(from_.this)
        relations.extend(join.this for join in root.args.get("joins") or [])
        # Every FROM item must be a plain table: a derived table, CTE or table
        # function can rename a PII column to anything.
        row_sources: dict[str, list[Source]] = {}  # alias / table name -> its PII columns (whole-row refs)
        for relation in relations:
            if not isinstance(relation, exp.Table) or not isinstance(relation.this, exp.Identifier):
                return None
            keys = self.index.resolve([part.name.lower() for part in relation.parts])
            table_pii = [source for source in pii if source[0] in keys]
            for alias in {relation.alias_or_name.lower(), relation.name.lower()}:
                row_sources.setdefault(alias, []).extend(table_pii)
        selects = root.selects
        if self.n_columns is not None and self.n_columns != len(selects):
            return None
        by_column: dict[str, list[Source]] = {}
        for source in pii:
            by_column.setdefault(source[1], []).append(source)

        result = []
        for select in selects:
            if _is_star(select):
                return None
            sources: set[Source] = set(by_column.get(select.alias_or_name.lower(), ()))
            stack: list[exp.Expr] = [select]
            while stack:
                current = stack.pop()
                if _value_free_label(current):
                    continue
                if isinstance(current, exp.Window):
                    if isinstance(current.this, exp.Expr):
                        stack.append(current.this)
                    continue
                if _is_star(current) or isinstance(current, exp.Query):
                    return None
                if isinstance(current, exp.Column):
                    name = current.name.lower()
                    sources.update(by_column.get(name, ()))
                    if not current.table and name in row_sources:  # PostgreSQL whole-row `SELECT c FROM t c`
                        sources.update(row_sources[name])
                    continue
                stack.extend(current.iter_expressions())
            result.append((_display_name(select, self.dialect), sources))
        return result
