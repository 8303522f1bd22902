"""Column lineage for masking SQL results: personal-data TAINT.

The agent's read-only query has run; before its result reaches the model,
every OUTPUT column whose value depends on personal data (PII) in any way is
masked whole. :func:`classify_outputs` decides, for each output column,
whether it is tainted and of which kind.

The rule (taint). An output is masked when its expression READS a
personal-data value in any way:

* a classified column, through any function, operator, cast, comparison,
  CASE (conditions included), aggregate, window function (its argument AND
  its PARTITION BY / ORDER BY, named ``WINDOW`` clauses too: ``row_number()
  OVER (ORDER BY name)`` ranks names), row / JSON / array constructor;
  ``length(name)``, ``ascii(substr(name, 3, 1))``, ``name > 'M'``,
  ``strpos(name, 'x')`` each return a property of the characters, and a few
  queries of them spell the value out;
* a whole row, in any notation: ``c``, ``row_to_json(c)``, ``c::text``,
  ``ROW(c.*)``, ``json_agg(c)``, and PostgreSQL's attribute notation
  ``c.text`` / ``c.row_to_json`` / ``customers.customers`` (``t.f`` is
  ``f(t)`` when ``t`` has no column ``f``): a reference to a column a known
  table does not have is read as a function of its whole row;
* a nested query inside the output expression (scalar subquery, EXISTS,
  IN, ARRAY(SELECT ...)): everything in it taints - its SELECT list AND the
  clauses that choose its rows (WHERE, JOIN ... ON, GROUP BY, HAVING,
  ORDER BY, LIMIT, and those of the CTEs / derived tables it reads), because
  evaluated per row it is an oracle: ``(SELECT 1 FROM customers c2 WHERE
  c2.id = c.id AND c2.name LIKE '김%')``;
* a TAINTED LITERAL: the executor puts the originals back for tokens the
  model writes in string literals (``'[이름-1]'`` runs as ``'김민준'``), so a
  string literal containing one of the ``tainted_literals`` (or still
  spelled like a token) is a personal-data source of that kind, through any
  function, CTE, derived table, set operation or VALUES list. A function
  that returns the statement text (``current_query()``) is tainted whenever
  the query carries such a literal;
* a column of a relation NOT in the schema (catalogs, statistics views,
  unclassified tables), a table function not known to derive only from its
  arguments, or a function that reads data by name or runs SQL text
  (``query_to_xml``, ``dblink``), or session state (MySQL ``@v``,
  ``current_setting()``, which the same statement can set from a column):
  tainted with the connection's most severe kind when the connection has
  any personal-data column (when in doubt, mask);
* a FREE-TEXT column (schema value :data:`FREE_TEXT`: an unclassified
  column that can hold text, see governance.pii.free_text) is a
  personal-data source like a classified one, through every rule here -
  except that an output passing it on unchanged (a bare column, through
  derived tables, CTEs and set operations that select it as is) is read as
  itself and left to the value detectors. Any function, operator, cast or
  aggregate over it (``memo::bytea``, ``to_tsvector(memo)``, ``substr(memo,
  g, 1)``, ``string_agg(...)``) masks the output whole, labelled with the
  doubt kind: nothing is enumerated, so no rewrite is missed;
* a character-rewriting or encoding function (``translate``, ``replace``,
  ``reverse``, ``encode``, ``hex``, ...; :data:`_TRANSFORMING_FUNCTIONS`)
  applied to ANY column, classified or not: the value detectors that run
  over free text afterwards cannot recognise a rewritten phone number, so
  the output is masked in doubt.

An output made only of the model's own literals (no column, row, nested
query, unknown function, variable, or re-identified literal anywhere in the
statement; :attr:`OutputColumn.literal`) says nothing the model did not
write: the caller returns it as written, never matched against the vault
(matching would confirm which of the model's guesses are real values).

The ONLY exemption is a count, and only of a plain shape: ``COUNT(*)``,
``COUNT(x)`` or ``COUNT(DISTINCT x[, y])`` where every ``x`` is a BARE
column of a schema table (or one a derived table / CTE / set operation
passes on unchanged), with or without ``FILTER (WHERE ...)``; also
``COUNT(CASE WHEN p THEN 1 END)`` / ``COUNT(IF(p, 1, NULL))``, read as
``COUNT(*) FILTER (WHERE p)``; and a scalar or IN subquery whose single
output is such a count. They return a number of rows, not a value: what they
count or filter does not taint (``count(*) FROM customers WHERE name LIKE
'김%'``, ``count(DISTINCT phone)``, ``count(*) FILTER (WHERE name LIKE
'A%')``). A count filter is a yes/no oracle on the same footing as a
top-level WHERE, which is accepted; a windowed count still taints through
its PARTITION BY / ORDER BY. NOT exempt (:meth:`_Classifier._count`):

* a count of an EXPRESSION: its argument is traced like any expression
  (``count(NULLIF(g <= ascii(name), false))``, ``count(DISTINCT g %
  ascii(name))``, ``count(CASE WHEN g <= ascii(name) THEN g END)``);
* a count of rows that personal data MULTIPLIES or MAKES rather than
  filters (:meth:`_Classifier._count_multiplied`): a WHERE / JOIN ON /
  HAVING atom, or the count's own FILTER, comparing a non-personal column
  with it (``count(*) FILTER (WHERE g <= ascii(name))`` over ``g =
  1..N`` is the code); a table function whose arguments read it
  (``generate_series(1, ascii(name))``); and, for every row source counted
  (derived table, CTE, recursive CTE and its recursion condition, set
  operation, LATERAL, VALUES), the same inside it plus whatever sets its
  NUMBER of rows (:meth:`_Classifier._row_count`): a LIMIT / OFFSET / FETCH
  computed from personal data, GROUP BY / DISTINCT / DISTINCT ON / UNION's
  duplicate removal over expressions of it, a HAVING comparing it with
  anything else, a set-returning function in the SELECT list
  (``SELECT generate_series(1, ascii(name))``). Bare personal-data columns
  there (``SELECT DISTINCT name``) give the number of distinct values, like
  ``count(DISTINCT name)``: still exempt.

The same rows taint every other output COMPUTED over them (anything but a
bare column or a literal): ``sum(1)``, ``avg``, ``string_agg('x', '')``,
``row_number() OVER ()`` over ``customers c, generate_series(1,
ascii(c.name))`` are counts of them too.

A count nested in an output is not exempt when a filter in it compares
personal data with a non-personal column of an OUTER row (``(SELECT
count(*) FROM customers c WHERE ascii(c.name) >= g)`` over ``g = 1..N``
steps at the code).

A table alias with a column list (PostgreSQL ``customers c(name, id)``)
renames by position: a column of it reads the table's whole row.

Row choice. The WHERE / JOIN ON filters of any query, and the row filters of
the CTEs and derived tables it reads, do not taint outputs: they choose
rows, like counting. ``SELECT id FROM customers WHERE name = '김민준'``
returns ids. Sorting, grouping and DISTINCT ON by a BARE column do not
either, a personal-data one included: ``SELECT city FROM customers GROUP BY
city, name``, ``SELECT max(id) FROM customers GROUP BY name``, ``SELECT id
FROM customers ORDER BY name LIMIT 1`` reveal an order or a grouping of the
values, never a value (accepted, like a filter). Exceptions, where the row
choice decides an output's VALUE:

* in ANY scope (the outermost included), an ORDER BY / GROUP BY / DISTINCT
  ON key that is an EXPRESSION reading personal data (anything but a bare
  column; output references ``ORDER BY 2`` / ``ORDER BY alias`` mean that
  output's expression), or a HAVING atom comparing personal data with
  anything but constants (``HAVING count(*) < ascii(max(name))``), taints
  every output of that scope, and through derived tables and CTEs the outer
  outputs that read them (:meth:`_Classifier._row_choice`): ``SELECT g FROM
  generate_series(1, 200000) g, customers c ORDER BY abs(g -
  ascii(c.name)) LIMIT 1`` returns the code, ``min(g) ... GROUP BY g <
  ascii(c.name)`` splits g at it. ORDER BY taints with or without LIMIT:
  the model sees the order, and the executor's row cap is a LIMIT. This is
  deliberately coarse: ``SELECT city, count(*) FROM customers GROUP BY
  city, length(name)`` is masked too;
* a LIMIT / OFFSET / FETCH computed from personal data ends a number
  sequence at the value: it taints every output of its query;
* a column compared with personal data in one predicate (an atom of WHERE /
  ON / HAVING, split on AND / OR / NOT) carries it: ``SELECT g FROM
  generate_series(1, 200000) g, customers c WHERE g = ascii(c.name)``
  returns the code (:meth:`_Classifier._compared`); ``c2.name = c.name``
  taints only the name columns, already personal data;
* a column from the NULL-able side of an outer join is tainted by the join
  condition and that side's filters: ``LEFT JOIN customers c2 ON c2.id =
  c.id AND c2.name > 'M'`` makes ``c2.id`` NULL or not per row.

Row count of the result (:func:`rows_read_pii`). Masking hides values, not
rows: ``SELECT 1 FROM customers c, generate_series(1, ascii(c.name))``
returns as many rows as the code. The number of rows of the RESULT is read
like a count over it, ``SELECT count(*) FROM (<query>)``: personal data that
multiplies or makes rows (:meth:`_Classifier._count_multiplied`) or sets a
row source's number of rows (:meth:`_Classifier._row_count`), applied to the
root scope, returns its most severe kind; the caller must then treat the
row count of the result as personal data. Filtering real rows
by personal data (``WHERE name LIKE '김%'``, ``JOIN customers c2 ON c2.name =
c.name``, a semi-join on ids) is a yes/no like a count: None. Two
refinements at the root only (:meth:`_Classifier._result_rows`): its own
ORDER BY never changes how many rows there are (unless ``FETCH ... WITH
TIES`` or a set-returning key), and an aggregate without GROUP BY returns
one row (none under HAVING: a yes/no) whatever it reads - its count's VALUE
is masked as a column - except for set-returning outputs; a set operation's
branches are each such a result. The same parse, fast path (no personal-data
name, star, whole row, literal or unknown relation: None without the walk),
qualify, memo and budget as :func:`classify_outputs`. Fail closed: when the
walk cannot decide, the doubt kind if the statement names personal data AND
has a shape that can set a number of rows (:func:`_row_shape`: a table or
set-returning function, a recursive CTE, a LIMIT / OFFSET / FETCH that is
not a plain number, GROUP BY / DISTINCT over an expression, HAVING, a set
operation, a predicate comparing a personal-data name with another column);
unparsable text is judged by its words; an internal error gives the doubt
kind whenever the text names a personal-data column.

How it works:

1. Parse once with sqlglot and collect the relations the query reads. Fast
   path, when it is provably safe: no referenced table has a PII column, or
   the query never names one, expands no star outside ``COUNT(*)``,
   references no whole row and no column a referenced table lacks
   (:func:`_may_reach_pii`, :func:`_names_unknown_column`) - AND the query
   has no tainted literal, no transforming or data-reading function, no
   variable and no unknown relation (:meth:`_Classifier.special_kinds`). ``SELECT city,
   count(*) FROM customers GROUP BY city`` needs no walk. The count and
   row-choice rules need nothing more: without a personal-data name no count
   argument, FILTER, sort / grouping key or LIMIT can read personal data.
2. Otherwise qualify the tree with sqlglot's optimizer (``*`` / ``t.*``
   expand, aliases resolve, every column gets its source alias) against a
   small schema of just the referenced tables, build the scope tree, and
   walk each output expression through CTEs, derived tables, set operations,
   nested queries, LATERAL and table functions, collecting real-table
   sources and non-column taints (literals, unknown relations, rewrites).
3. Anything the walk does not positively understand (unknown node shape,
   unexpanded ``*``, unqualified column, ambiguous table, a bare word
   spelled like a PII column, a column count
   different from what the database returned, budget overrun, any
   exception) drops to a name-based FALLBACK that masks more, never less
   (see :meth:`_Classifier._fallback`); it applies the count and row-choice
   rules by name (a sort / grouping key that is an expression naming a
   personal-data column, or a filter mixing one with anything else, masks
   every output).

Known limits (accepted, stated so they are not mistaken for coverage):
filters and counts remain yes/no oracles (``WHERE name LIKE '김%'`` with a
count or a row count, asked many times, narrows a value down); sorting or
grouping by a bare personal-data column reveals the order / grouping of the
values (and, like ``count(DISTINCT name)``, ``SELECT DISTINCT name`` the
number of distinct values); the row-count rule answers for the whole result
only: the caller must still act on it (hide the count, refuse the result);
a free-text column read as itself is protected by the value detectors only;
a cell masked whole gets the token of its own value, so many pieces of one
value cut one per row (``substr(memo, g, 1)``) each show a token, and equal
pieces equal tokens.

Identifiers are compared case-insensitively, quoted or not: treating
``"Phone"`` as ``phone`` can only mask more.

Star expansion follows the column order of ``schema[table]``: that dict must
list columns in the table's ordinal order (information_schema's
ordinal_position, SQLite's table_info cid), or ``SELECT *`` maps the wrong
positions - ``n_columns`` only catches a different COUNT of columns. Callers
that have the result's column names can also compare them with
``OutputColumn.name`` case-insensitively (reliable for plain and
star-expanded columns).

Only public sqlglot API is used; with sqlglotc installed the optimizer is
mypyc-compiled, so private internals may differ from the pure-Python package.
In sqlglot 30 a query's WITH / FROM args are keyed "with_" / "from_".

No Django import: this package is pure and runs on every query result.
Its parts: ``names`` (function lists, kinds' order), ``nodes`` and ``shapes``
(helpers over trees, schema lookups), ``classifier`` (parse, fast paths, the
top of the walk) with its parts ``outputs``, ``walk``, ``rows`` and
``fallback``; this module holds the public entry points.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

# The package's parts, and the names tests reach for, from one place.
from governance.pii.lineage.classifier import _Classifier
from governance.pii.lineage.names import (
    _DATA_READING_FUNCTIONS,
    _DIALECTS,
    _DOUBT_KIND,
    _PURE_TABLE_FUNCTIONS,
    _SEVERITY,
    _TRANSFORMING_FUNCTIONS,
    FREE_TEXT,
)
from governance.pii.lineage.nodes import OutputColumn, _kind, _last_resort, _literal_items, _most_severe, _Unresolved
from governance.pii.lineage.shapes import _may_reach_pii, _names_pii_by_word
from governance.sql.dialects import SUPPORTED_DIALECTS

__all__ = [
    "FREE_TEXT",
    "SUPPORTED_DIALECTS",
    "OutputColumn",
    "classify_outputs",
    "rows_read_pii",
    "token_kind",
    "_Classifier",
    "_DATA_READING_FUNCTIONS",
    "_DIALECTS",
    "_DOUBT_KIND",
    "_PURE_TABLE_FUNCTIONS",
    "_SEVERITY",
    "_TRANSFORMING_FUNCTIONS",
    "_Unresolved",
    "_kind",
    "_last_resort",
    "_literal_items",
    "_may_reach_pii",
    "_most_severe",
    "_names_pii_by_word",
]

# --------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------


def classify_outputs(
    sql: str,
    dialect: str,
    schema: dict[str, dict[str, str | None]],
    n_columns: int | None = None,
    *,
    tainted_literals: Mapping[str, str] | None = None,
) -> list[OutputColumn]:
    """One :class:`OutputColumn` per output column of ``sql``.

    ``schema``: table key (lowercase, "schema.table" or bare) -> {column
    (lowercase, in ordinal order) -> PII kind or None}, the analysed schema of
    the connection. ``n_columns``: how many columns the database returned
    (``len(cursor.description)``); always pass it - it is the list length and
    the check that the lineage matches what actually ran.
    ``tainted_literals``: original value -> its PII kind, for every original
    the executor substituted for a token in the statement's string literals;
    a literal containing one is a personal-data source of that kind.

    Never raises: any failure masks more (fail closed).
    """
    try:
        classifier = _Classifier(sql, dialect, schema, n_columns, tainted_literals)
        # One tree for both, the shared parse: both read it, and the walk
        # takes a copy of its own before it rewrites (qualify).
        parsed = classifier._parse(shared=True)
        literal = classifier.literal_outputs(parsed)
        outputs = classifier.run(parsed)
    except Exception as error:  # fail closed on anything unexpected
        outputs = _last_resort(schema, n_columns, f"internal error: {type(error).__name__}")
        literal = None
    if literal is not None and len(literal) == len(outputs):
        outputs = [
            replace(o, literal=True) if flag and o.pii_kind is None else o
            for o, flag in zip(outputs, literal, strict=True)
        ]
    return [_labelled(output) for output in outputs]


def token_kind(kind: str | None) -> str | None:
    """The kind a token is labelled with: free text masks as the doubt kind."""
    return _DOUBT_KIND if kind == FREE_TEXT else kind


def _labelled(output: OutputColumn) -> OutputColumn:
    if output.pii_kind != FREE_TEXT:
        return output
    return replace(output, pii_kind=_DOUBT_KIND)


def rows_read_pii(
    sql: str,
    dialect: str,
    schema: dict[str, dict[str, str | None]],
    *,
    tainted_literals: Mapping[str, str] | None = None,
) -> str | None:
    """The personal-data kind (most severe) when personal data decides how
    many rows the result of ``sql`` has beyond filtering rows of real tables,
    else None: the count rules applied to the whole result, as if it were
    ``SELECT count(*) FROM (<sql>)`` (see "Row count of the result" in the
    module docstring). ``SELECT 1 FROM customers c, generate_series(1,
    ascii(c.name))`` returns as many rows as the code: a kind. ``SELECT id
    FROM customers WHERE name LIKE '김%'`` filters real rows: None.

    ``schema`` and ``tainted_literals`` as for :func:`classify_outputs`.
    Never raises. Fails closed: a statement whose lineage cannot be resolved
    gets the doubt kind when it names personal data (a PII column, a star or
    a whole row, a tainted literal, an unknown relation) and has any shape
    that can set a number of rows (:func:`_row_shape`); an internal error
    gets the doubt kind when the SQL names a PII column at all."""
    try:
        return token_kind(_Classifier(sql, dialect, schema, None, tainted_literals).rows_kind())
    except Exception:  # fail closed on anything unexpected
        try:
            return _DOUBT_KIND if _names_pii_by_word(sql, schema, tainted_literals) else None
        except Exception:
            return _DOUBT_KIND
