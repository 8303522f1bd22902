"""Function and constant lists of lineage: which functions rewrite, read data or
return the statement, which table functions are pure, kinds' severity."""

from __future__ import annotations

import functools

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect

from governance.pii.kinds import SEVERITY
from governance.sql.dialects import SUPPORTED_DIALECTS

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
