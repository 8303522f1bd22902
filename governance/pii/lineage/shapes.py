"""Row shapes, schema lookups and name checks of lineage."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from sqlglot import exp

from governance.pii.lineage.nodes import Source, _atoms, _conditions, _is_set_returning, _kind, _plain_limit, _sort_key
from governance.pii.masking import TOKEN_PATTERN
from governance.sql.dialects import dialect_of


def _row_shape(root: exp.Expr, pii_names: set[str]) -> str | None:
    """A construct that can make the number of result rows a value (for the
    fallback of :func:`rows_read_pii`, by shape and names only), or None: a
    set-returning or table function (an unknown function may be one), a
    recursive CTE, a LIMIT / OFFSET / FETCH that is not a plain number, GROUP
    BY / DISTINCT / DISTINCT ON over anything but bare columns, a HAVING, a
    set operation, or a predicate comparing a personal-data name with
    another column, a nested query or a whole row."""
    for node in root.walk():
        if isinstance(node, exp.With) and node.args.get("recursive"):
            return "a recursive CTE"
        if isinstance(node, (exp.Limit, exp.Offset, exp.Fetch)) and not _plain_limit(node):
            return "a computed LIMIT / OFFSET / FETCH"
        if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
            return "a table function"
        if _is_set_returning(node):
            return "a set-returning function"
        if isinstance(node, exp.SetOperation):
            return "a set operation"
        if isinstance(node, exp.Having):
            return "a HAVING"
        if isinstance(node, exp.Group) and any(
            type(key) is not exp.Column for key in map(_sort_key, node.iter_expressions())
        ):
            return "GROUP BY an expression"
        if isinstance(node, exp.Select) and isinstance(node.args.get("distinct"), exp.Distinct):
            on = node.args["distinct"].args.get("on")
            keys = (on.expressions if isinstance(on, exp.Tuple) else [on]) if isinstance(on, exp.Expr) else []
            items = [item.this if isinstance(item, exp.Alias) else item for item in node.selects]
            if any(type(key) is not exp.Column for key in [*map(_sort_key, keys), *items]):
                return "DISTINCT over an expression"
    for select in root.find_all(exp.Select):
        for atom in _atoms(_conditions(select)):
            names = {column.name.lower() for column in atom.find_all(exp.Column)}
            if names & pii_names and (
                names - pii_names or atom.find(exp.Query, exp.TableColumn, exp.Count, exp.Star) is not None
            ):
                return "a comparison of personal data with another column"
    return None


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


def _names_unknown_column(root: exp.Expr, known_columns: set[str]) -> bool:
    """Does the query reference a column no referenced table has? In
    PostgreSQL ``c.text`` / ``c.row_to_json`` / ``customers.customers`` is a
    function of the whole row of ``c`` (attribute notation); an alias or a
    typo would be one too, and only the walk can tell them apart."""
    for node in root.find_all(exp.Column):
        if not isinstance(node.this, exp.Star) and node.name.lower() not in known_columns:
            return True
    return False


def _names_pii_by_word(sql: object, schema: object, tainted_literals: object) -> bool:
    """Does the text name a personal-data column of the schema (as a word,
    any case), or hold a tainted literal or a token? Anything unreadable: yes."""
    if not isinstance(sql, str):
        return True
    text = sql.lower()
    words = set(_WORD.findall(text))
    for columns in schema.values():  # type: ignore[attr-defined]
        for column, kind in columns.items():
            if _kind(kind) and str(column).lower() in words:
                return True
    for original in tainted_literals or {}:  # type: ignore[attr-defined]
        if isinstance(original, str) and original and original in sql:
            return True
    return bool(TOKEN_PATTERN.search(sql))


def _dialect_or_same(name: str) -> str:
    try:
        return dialect_of(name)
    except ValueError:
        return str(name).lower()  # unknown: the classifier's parse fails and masks everything
