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

No Django import: this module is pure and runs on every query result.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope
from sqlglot.schema import MappingSchema

from governance.pii.kinds import SEVERITY
from governance.pii.masking import KIND_BY_LABEL, TOKEN_PATTERN
from governance.sql.dialects import SUPPORTED_DIALECTS, dialect_of

_DIALECTS: dict[str, Dialect] = {name: Dialect.get_or_raise(name) for name in SUPPORTED_DIALECTS}

# "Most severe first" when an output derives from several kinds: identity
# numbers, then financial, then contact data, then names. The output is
# masked whole either way; the kind only labels the token. Kinds not listed
# (a future PiiKind) rank after these but are still PII.
_SEVERITY = SEVERITY  # governance.pii.kinds: the one order of the kinds
_SEVERITY_RANK = {kind: rank for rank, kind in enumerate(_SEVERITY)}

# Kind used when an output is masked in doubt without a classified source to
# name it (a rewritten free-text column, an unreadable schema): the least
# specific kind labels the tokens.
_DOUBT_KIND = "name"

# Schema value for a FREE-TEXT column (a memo, a comment: text nobody
# classified as one kind, where the detectors find values inside): read as
# itself it is scanned by the detectors; anything computed from it (any
# function, operator, cast, aggregate, comparison, piece) is masked whole
# like a classified column, labelled with the doubt kind. Inside the walk it
# is a personal-data kind like any other (counts, filters, row counts and
# row choice follow the same rules); only an output that passes such a
# column on unchanged (:meth:`_Classifier._plain_output`) is left to the
# detectors.
FREE_TEXT = "free_text"

# Lineage walk budget (nodes visited + columns resolved). A normal query needs
# a few hundred; pathological nesting or recursive CTEs must not stall the
# worker, so past the budget the query is treated as unresolved (masks more).
_MAX_STEPS = 20_000

# Tables the query reads are renamed to these before qualifying, so that
# "schema.table" and bare schema keys both fit sqlglot's one-level schema and
# no CTE or alias can shadow a real table.
_SYNTHETIC_PREFIX = "__pii_lineage_t"

# Character-rewriting and encoding functions. Free-text (unclassified)
# columns are protected only by the value detectors that run over the result;
# these functions turn "010-1234-5678" into something no detector recognises
# but the model can decode (translate digits to letters, reverse, hex,
# base64, one character code at a time, split into characters, encrypt with
# a key it chose). Applied to ANY column they mask the output in doubt.
# One-way digests (md5, sha*) are not here: nothing comes back from them.
# Names are matched against sqlglot's class key, its SQL names and the
# spelling of unknown (Anonymous) functions, all lowercased.
_TRANSFORMING_FUNCTIONS = frozenset(
    {
        # per-character rewriting
        "translate",
        "replace",
        "regexp_replace",
        "regexpreplace",
        "reverse",
        "overlay",
        "insert",
        "stuff",
        "to_ascii",
        "unistr",
        "soundex",
        "difference",
        # character codes
        "ascii",
        "ord",
        "unicode",
        "chr",
        "char",
        "get_byte",
        "get_bit",
        # encodings
        "encode",
        "decode",
        "hex",
        "to_hex",
        "unhex",
        "lowerhex",
        "bin",
        "oct",
        "conv",
        "to_base64",
        "tobase64",
        "from_base64",
        "frombase64",
        "base64",
        "base64encode",
        "base64decodestring",
        "base64decodebinary",
        "convert",
        "convert_to",
        "convert_from",
        "converttocharset",
        "quote",
        "quote_literal",
        "quote_nullable",
        "export_set",
        "make_set",
        # splitting into pieces (string_to_array(memo, NULL): one element per character)
        "string_to_array",
        "stringtoarray",
        "string_to_table",
        "regexp_split_to_array",
        "regexp_split_to_table",
        "regexpsplit",
        "split",
        # reversible with a key the model chooses
        "aes_encrypt",
        "aes_decrypt",
        "des_encrypt",
        "des_decrypt",
        "encrypt",
        "decrypt",
        "pgp_sym_encrypt",
        "pgp_sym_decrypt",
        "compress",
        "uncompress",
    }
)

# Functions that read data by name or run SQL text given as a string: their
# result is whatever that reads, which no lineage can follow. Tainted like an
# unknown relation. (The guard refuses most of them; this is the second line.)
_DATA_READING_FUNCTIONS = frozenset(
    {
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "query_to_xmlschema",
        "cursor_to_xml",
        "table_to_xml",
        "table_to_xml_and_xmlschema",
        "schema_to_xml",
        "schema_to_xml_and_xmlschema",
        "database_to_xml",
        "database_to_xml_and_xmlschema",
        "dblink",
        "dblink_exec",
        "dblink_get_result",
        "xpath_table",
        "crosstab",
        "crosstab2",
        "crosstab3",
        "crosstab4",
        "connectby",
        "ts_stat",
        "pg_read_file",
        "pg_read_binary_file",
        "lo_get",
        "loread",
        "load_file",
        "pg_stat_get_activity",
        "pg_stat_statements",
        "readfile",
        # session state the same statement can set from a column (set_config(..., name, ...))
        "current_setting",
    }
)

# Functions returning the statement's own text: with a re-identified literal
# in the statement, that text holds the original.
_STATEMENT_TEXT_FUNCTIONS = frozenset({"current_query"})

# Table functions whose rows derive only from their arguments (which the
# walk follows). Any other function in FROM is treated like an unknown
# relation: it may read anything.
_PURE_TABLE_FUNCTIONS = frozenset(
    {
        "generate_series",
        "generateseries",
        "explodinggenerateseries",
        "exploding_generate_series",
        "generate_subscripts",
        "unnest",
        "json_each",
        "json_each_text",
        "jsonb_each",
        "jsonb_each_text",
        "json_tree",
        "json_array_elements",
        "json_array_elements_text",
        "jsonb_array_elements",
        "jsonb_array_elements_text",
        "json_object_keys",
        "jsonb_object_keys",
        "json_to_record",
        "json_to_recordset",
        "jsonb_to_record",
        "jsonb_to_recordset",
        "json_populate_record",
        "json_populate_recordset",
        "jsonb_populate_record",
        "jsonb_populate_recordset",
        "jsonb_path_query",
        "jsontable",
        "json_table",
        "regexp_split_to_table",
        "regexp_matches",
        "string_to_table",
    }
)

Source = tuple[str, str]  # (schema key, lowercased column)
Taint = tuple[str, str]  # (kind, why): a personal-data source that is not a schema column
# What a walk found: real-table sources, other taints, labels of exemptions used ("count").
_Found = tuple[frozenset[Source], frozenset[Taint], frozenset[str]]
_NOTHING: _Found = (frozenset(), frozenset(), frozenset())


@dataclass(frozen=True)
class OutputColumn:
    index: int
    name: str  # output name as the DB will label it (alias or column name) - best effort
    pii_kind: str | None  # kind of the PII source (most severe if several); None if not derived from PII
    sources: tuple[tuple[str, str], ...]  # (table, column) sources read, PII ones first
    reason: str  # short: "derived from customers.phone", "count only", "lineage unresolved: ...; masked (doubt)"
    # Only the model's own literals (and known functions of them): nothing is
    # read and nothing re-identified, so the output says nothing the model
    # did not write (not matched against the vault: no membership oracle).
    literal: bool = False


class _Unresolved(Exception):
    """Lineage cannot be decided positively; the message says why (short)."""


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
        outputs = classifier.run()
        literal = classifier.literal_outputs()
    except Exception as error:  # fail closed on anything unexpected
        outputs = _last_resort(schema, n_columns, f"internal error: {type(error).__name__}")
        literal = None
    if literal is not None and len(literal) == len(outputs):
        outputs = [
            replace(o, literal=True) if flag and o.pii_kind is None else o
            for o, flag in zip(outputs, literal, strict=True)
        ]
    return [_labelled(output) for output in outputs]


# Nodes that make an output more than the model's own literals: a column, a
# whole row, a star, a nested query, a function sqlglot does not know (it may
# read data), a variable or placeholder.
_NOT_LITERAL = (exp.Column, exp.TableColumn, exp.Star, exp.Query, exp.Anonymous, exp.Parameter, exp.Placeholder)


def _literal_items(query: exp.Expr) -> list[bool] | None:
    """Per output of `query` as written: is it made of literals only?"""
    if isinstance(query, exp.Subquery):
        return _literal_items(query.this)
    if isinstance(query, exp.SetOperation):
        left, right = _literal_items(query.this), _literal_items(query.expression)
        if left is None or right is None or len(left) != len(right):
            return None
        return [a and b for a, b in zip(left, right, strict=True)]
    if isinstance(query, exp.Values):
        rows = [row.expressions if isinstance(row, exp.Tuple) else [row] for row in query.expressions]
        width = len(rows[0]) if rows else 0
        if any(len(row) != width for row in rows):
            return None
        return [all(row[i].find(*_NOT_LITERAL) is None for row in rows) for i in range(width)]
    if isinstance(query, exp.Select):
        if query.args.get("with_") is not None:
            return None
        return [item.find(*_NOT_LITERAL) is None for item in query.selects]
    return None


def token_kind(kind: str | None) -> str | None:
    """The kind a token is labelled with: free text masks as the doubt kind."""
    return _DOUBT_KIND if kind == FREE_TEXT else kind


def _labelled(output: OutputColumn) -> OutputColumn:
    if output.pii_kind != FREE_TEXT:
        return output
    return OutputColumn(output.index, output.name, _DOUBT_KIND, output.sources, output.reason, output.literal)


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


# Words of a statement that may set its number of rows (fallback for text that
# does not parse): set-returning / table functions, recursion, limits,
# grouping, set operations, joins, VALUES; a comma after FROM (implicit join)
# or a function call as a FROM item is checked separately.
_ROW_SHAPE_WORDS = re.compile(
    r"\b(?:recursive|limit|offset|fetch|top|group|distinct|union|intersect|except|minus|join|lateral|"
    r"unnest|values|having|connect|generate_series|generate_subscripts|json_\w+|jsonb_\w+|regexp_\w+|"
    r"string_to_table|\w*series\w*)\b",
    re.IGNORECASE,
)
_FROM_LIST = re.compile(r"\bfrom\b.*,|\bfrom\s+(?:[\w$\"`]+\s*\.\s*)?[\w$\"`]+\s*\(", re.IGNORECASE | re.DOTALL)


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


def _merge(results: Iterable[_Found]) -> _Found:
    sources: set[Source] = set()
    taints: set[Taint] = set()
    labels: set[str] = set()
    for found_sources, found_taints, found_labels in results:
        sources |= found_sources
        taints |= found_taints
        labels |= found_labels
    return frozenset(sources), frozenset(taints), frozenset(labels)


@functools.cache
def _names_for_type(node_type: type[exp.Expr]) -> frozenset[str]:
    # Cached per type: sql_names() and the key are computed once per process.
    names = {node_type.key.lower()}
    try:
        names.update(name.lower() for name in node_type.sql_names())  # type: ignore[attr-defined]
    except Exception:
        pass
    return frozenset(names)


def _function_names(node: exp.Expr) -> frozenset[str]:
    """Lowercased names a function node may be known by ("" set for non-functions)."""
    node_type = type(node)
    if node_type is exp.Anonymous:
        return frozenset({node.name.lower()})
    if issubclass(node_type, exp.Func):
        return _names_for_type(node_type)
    return frozenset()


def _role_of(names: frozenset[str]) -> str | None:
    if names & _DATA_READING_FUNCTIONS:
        return "data"
    if names & _STATEMENT_TEXT_FUNCTIONS:
        return "statement"
    if names & _TRANSFORMING_FUNCTIONS:
        return "transform"
    return None


@functools.cache
def _type_role(node_type: type[exp.Expr]) -> str | None:
    if node_type is exp.Anonymous or not issubclass(node_type, exp.Func):
        return None
    return _role_of(_names_for_type(node_type))


@functools.cache
def _anonymous_role(name: str) -> str | None:
    return _role_of(frozenset({name.lower()}))


def _function_role(node: exp.Expr) -> str | None:
    """ "data", "statement", "transform" (see the lists above) or None; cached
    per node type / function name because it runs on every node."""
    node_type = type(node)
    if node_type is exp.Anonymous:
        return _anonymous_role(node.name)
    return _type_role(node_type)


def _function_label(node: exp.Expr, names: frozenset[str]) -> str:
    """A function's name for a reason: the listed spelling it matched."""
    matched = _function_names(node) & names
    return min(matched) if matched else type(node).__name__.lower()


@functools.cache
def _is_count_type(node_type: type[exp.Expr]) -> bool:
    return issubclass(node_type, exp.Count)


def _is_count(node: exp.Expr) -> bool:
    """COUNT(...), also under FILTER (WHERE ...): a number of rows."""
    if _is_count_type(type(node)):
        return True
    return type(node) is exp.Filter and isinstance(node.this, exp.Expr) and _is_count_type(type(node.this))


def _count_parts(node: exp.Expr) -> tuple[exp.Expr, exp.Expr | None, list[exp.Expr] | None]:
    """(the COUNT node, its FILTER condition or None, the counted expressions)
    of a node :func:`_is_count` accepts. The counted expressions are None for
    ``COUNT(*)`` and ``[x]`` / ``[x, y]`` for ``COUNT([DISTINCT] x[, y])``."""
    condition = None
    if type(node) is exp.Filter:
        where = node.expression
        condition = where.this if isinstance(where, exp.Where) else where
        node = node.this
    argument = node.this
    extra = _child_expressions(node.args.get("expressions"))
    if isinstance(argument, exp.Star) and not extra:
        return node, condition, None
    predicate = _case_filter(argument) if not extra and condition is None else None
    if predicate is not None:
        # count(CASE WHEN p THEN 1 END) is count(*) FILTER (WHERE p)
        return node, predicate, None
    if isinstance(argument, exp.Distinct):
        counted = _child_expressions(argument.args.get("expressions"))
        if argument.args.get("on") is not None:
            counted.append(argument.args["on"])
    else:
        counted = _child_expressions(argument)
    return node, condition, [*counted, *extra]


def _sort_key(key: exp.Expr) -> exp.Expr:
    """A sort / grouping key without ASC / DESC, parentheses or COLLATE,
    which order the same values differently but compute nothing from them."""
    while isinstance(key, (exp.Ordered, exp.Paren, exp.Collate)) and isinstance(key.this, exp.Expr):
        key = key.this
    return key


def _case_filter(node: object) -> exp.Expr | None:
    """``p`` when ``node`` is ``CASE WHEN p THEN <number> [ELSE NULL] END``
    or ``IF(p, <number>, NULL)``: counting it is counting the rows where
    ``p`` holds (a FILTER); else None."""
    if type(node) is exp.Case and not node.args.get("this") and len(node.args.get("ifs") or []) == 1:
        branch, otherwise = node.args["ifs"][0], node.args.get("default")
    elif type(node) is exp.If:
        branch, otherwise = node, node.args.get("false")
    else:
        return None
    predicate, value = branch.args.get("this"), branch.args.get("true")
    if otherwise is not None and type(otherwise) is not exp.Null:
        return None
    if type(value) is not exp.Literal or value.is_string or not isinstance(predicate, exp.Expr):
        return None
    return predicate


# Functions that return several rows from a SELECT list (PostgreSQL
# set-returning functions): in a row source that a count counts, they
# multiply its rows by whatever their arguments read.
_SET_RETURNING_TYPES: tuple[type[exp.Expr], ...] = (exp.UDTF, exp.GenerateSeries)


@functools.cache
def _known_scalar_functions() -> frozenset[str]:
    """Functions some dialect's guard allowlist admits that are not in
    _PURE_TABLE_FUNCTIONS: scalar by review (tests/test_sql_allowlist.py
    checks every PostgreSQL entry that returns a set is listed there)."""
    from governance.sql.functions import allowed_functions

    names: set[str] = set()
    for dialect in SUPPORTED_DIALECTS:
        names |= allowed_functions(dialect)
    return frozenset(names - _PURE_TABLE_FUNCTIONS)


def _is_set_returning(node: exp.Expr) -> bool:
    """A function that may return several rows. A function sqlglot does not
    know (exp.Anonymous) may, unless the allowlists know it as scalar."""
    if isinstance(node, _SET_RETURNING_TYPES):
        return True
    if isinstance(node, exp.Anonymous) and node.name.lower() not in _known_scalar_functions():
        return True
    return bool(_function_names(node) & _PURE_TABLE_FUNCTIONS)


def _order_and_distinct_on_keys(select: exp.Expr) -> list[exp.Expr]:
    """The ORDER BY keys and the DISTINCT ON expression of a SELECT: what
    chooses which rows it returns, in what order."""
    keys: list[exp.Expr] = []
    order = select.args.get("order")
    if order is not None:
        keys.extend(order.expressions)
    distinct = select.args.get("distinct")
    on = distinct.args.get("on") if isinstance(distinct, exp.Distinct) else None
    if isinstance(on, exp.Expr):
        keys.append(on)
    return keys


def _is_count_query(query: exp.Expr) -> bool:
    """A SELECT whose single output is a count (``SELECT count(*) FROM ...``)."""
    if not isinstance(query, exp.Select):
        return False
    selects = query.selects
    if len(selects) != 1:
        return False
    only = selects[0]
    if isinstance(only, exp.Alias):
        only = only.this
    return isinstance(only, exp.Expr) and _is_count(only)


def _unwrap(node: exp.Expr) -> exp.Expr:
    """(SELECT ...) -> SELECT ...: a parenthesised root has the same outputs.
    Not when the parentheses carry their own LIMIT / ORDER BY / ...: those
    would be lost (``(... UNION ...) LIMIT (SELECT length(name) ...)``)."""
    while (
        isinstance(node, exp.Subquery)
        and isinstance(node.this, exp.Query)
        and not any(value for key, value in node.args.items() if key != "this")
    ):
        node = node.this
    return node


def _catalog_unqualified(root: exp.Expr, dialect: str) -> exp.Expr:
    """`pg_catalog.count(*)` read as `count(*)`: the executor may bind every
    function of a PostgreSQL statement to the catalog, and sqlglot reads a
    schema-qualified call as an unknown function under a dot; the catalog's
    own function is the one lineage knows (counts stay exempt). Deepest
    first, so a qualified call inside another is unqualified before its
    caller is read again; a call that does not read back stays as it is
    (an unknown function: masks more)."""
    if dialect not in ("postgres", "postgresql"):
        return root
    # sqlglot reads `pg_catalog.f(...)` as Dot(pg_catalog, f(...)), and
    # `pg_catalog.f(...) FILTER / WITHIN GROUP (...)` as a Column of table
    # pg_catalog whose "name" is the whole call.
    for node in reversed(list(root.walk())):
        if isinstance(node, exp.Dot):
            qualifier, call = node.this, node.expression
            qualified = isinstance(qualifier, exp.Identifier) and type(call) is exp.Anonymous
        elif type(node) is exp.Column:
            qualifier, call = node.args.get("table"), node.this
            qualified = isinstance(qualifier, exp.Identifier) and isinstance(call, exp.Expr)
            qualified = qualified and not isinstance(call, (exp.Identifier, exp.Star))
        else:
            continue
        if not qualified or qualifier.name.lower() != "pg_catalog" or node.args.get("db") or node.args.get("catalog"):
            continue
        try:
            plain = exp.maybe_parse(call.sql(dialect=dialect), dialect=dialect)
        except Exception:
            continue
        if node is root:
            return plain
        node.replace(plain)
    return root


def _leftmost_select(node: exp.Expr) -> exp.Expr:
    """The branch that names a set operation's outputs."""
    node = _unwrap(node)
    while isinstance(node, exp.SetOperation):
        node = _unwrap(node.this)
    return node


def _is_star(node: exp.Expr) -> bool:
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


def _string_value(node: exp.Expr) -> str | None:
    """The text of a string literal node ('..', N'..', E'..', $$..$$), else None."""
    node_type = type(node)
    if node_type is exp.Literal:
        return node.this if node.is_string and isinstance(node.this, str) else None
    if node_type in (exp.National, exp.RawString, exp.UnicodeString):
        return node.this if isinstance(node.this, str) else None
    return None


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


_CONNECTIVES = (exp.And, exp.Or, exp.Xor, exp.Not, exp.Paren, exp.Where, exp.Having, exp.Qualify)


def _atoms(condition: object) -> list[exp.Expr]:
    """The smallest predicates of a condition: split on AND / OR / NOT and
    parentheses. ``c.name = 'x' OR c.id = 1`` has two atoms, ``g =
    ascii(c.name)`` one."""
    atoms: list[exp.Expr] = []
    stack = _child_expressions(condition)
    while stack:
        node = stack.pop()
        if isinstance(node, _CONNECTIVES):
            stack.extend(node.iter_expressions())
        else:
            atoms.append(node)
    return atoms


def _conditions(query: exp.Expr) -> list[exp.Expr]:
    """The row filters of a SELECT: WHERE, HAVING, QUALIFY, every JOIN ... ON."""
    if not isinstance(query, exp.Select):
        return []
    conditions = [query.args.get(key) for key in ("where", "having", "qualify")]
    conditions.extend(join.args.get("on") for join in query.args.get("joins") or [])
    return [condition for condition in conditions if isinstance(condition, exp.Expr)]


def _child_expressions(value: object) -> list[exp.Expr]:
    if isinstance(value, exp.Expr):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, exp.Expr)]
    return []


def _plain_limit(node: object) -> bool:
    """A LIMIT / OFFSET / FETCH that is absent or a plain number (no WITH TIES)."""
    if not isinstance(node, exp.Expr):
        return True
    for part in node.walk():
        if isinstance(part, (exp.Limit, exp.Offset, exp.Fetch, exp.Var)):
            continue
        if isinstance(part, exp.LimitOptions):
            if part.args.get("with_ties") or part.args.get("percent"):
                return False
            continue
        if not (isinstance(part, exp.Literal) and not part.is_string):
            return False
    return True


def _order_sets_count(query: exp.Expr) -> bool:
    """Can a query's own ORDER BY change how many rows it returns? Only
    through FETCH ... WITH TIES or a set-returning function in a key
    (PostgreSQL runs ``ORDER BY generate_series(1, 3)``): otherwise ordering
    rows never adds or removes one."""
    order = query.args.get("order")
    if order is None:
        return False
    limit = query.args.get("limit")
    if isinstance(limit, exp.Expr) and any(
        options.args.get("with_ties") or options.args.get("percent") for options in limit.find_all(exp.LimitOptions)
    ):
        return True
    return any(_is_set_returning(node) for node in order.walk())


def _is_aggregate_select(query: exp.Expr) -> bool:
    """A SELECT without GROUP BY that aggregates (in its outputs or HAVING):
    it returns one row, or none under HAVING, whatever rows it reads."""
    if not isinstance(query, exp.Select) or query.args.get("group") is not None:
        return False
    parts = [*query.selects, *_child_expressions(query.args.get("having"))]
    for part in parts:
        for node in part.walk():
            if isinstance(node, exp.AggFunc) and node.find_ancestor(exp.Select) is query:
                if not isinstance(node.parent, exp.Window) and not (
                    isinstance(node.parent, exp.Filter) and isinstance(node.parent.parent, exp.Window)
                ):
                    return True
    return False


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


# --------------------------------------------------------------------------
# The classifier
# --------------------------------------------------------------------------


def _dialect_or_same(name: str) -> str:
    try:
        return dialect_of(name)
    except ValueError:
        return str(name).lower()  # unknown: the classifier's parse fails and masks everything


class _Classifier:
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
            return self._lineage(root, tables, names)
        except _Unresolved as error:
            why = str(error)
        except Exception as error:  # qualify / scope errors, recursion, ... -> fallback
            why = f"{type(error).__name__}: {str(error).splitlines()[0][:80] if str(error) else ''}".rstrip(": ")
        # The lineage pass rewrote the tree; the fallback needs the query as written.
        return self._fallback(why, self._parse()[0], referenced)

    def literal_outputs(self) -> list[bool] | None:
        """Which outputs are only the model's own literals (see
        OutputColumn.literal), judged on the statement as written; None when
        that cannot be told. A function returning session or statement state
        (current_query(), current_setting()) is not a literal."""
        root, _why = self._parse()
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
        root, _why = self._parse()
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
        return _unwrap(_catalog_unqualified(statements[0], self.dialect)), ""

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
            outputs.append(self._output(index, display[index], found, self._plain_free_text(root_scope, index, found)))
        return outputs

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
            return _merge([self._trace(selects[index], scope, full), self._limit_taint(scope), self._row_choice(scope)])
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
            # what chooses its rows by value (GROUP BY / ORDER BY keys, LIMIT).
            return self._scope_output(scope, 0, True)
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

    def _filter_multiplied(self, condition: exp.Expr, scope: Scope) -> _Found:
        """A count's FILTER (WHERE ...) is a row filter like WHERE: ``count(*)
        FILTER (WHERE g <= ascii(name))`` over a number source is the code."""
        scope = self._real_scope(scope)
        return self._memoized(
            ("filter", id(condition)), lambda: self._carried(scope, self._compared_in(scope, [condition]))
        )

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
            if name not in columns:
                # PostgreSQL attribute notation: `c.text` is text(c), the whole row.
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
            for index, (name, sources, taints) in enumerate(by_name):
                output = self._output(index, name, (frozenset(sources), frozenset(taints), frozenset()))
                if output.pii_kind:
                    shown = ", ".join(_source_text(s) for s in output.sources[:3] if s in pii)
                    detail = f"name matches {shown}" if shown else output.reason.removesuffix("; masked")
                    reason = f"lineage unresolved: {why}; {detail}; masked"
                    outputs.append(OutputColumn(index, name, output.pii_kind, output.sources, reason))
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
