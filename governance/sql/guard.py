"""Parser layer of the read-only SQL guard.

An AI agent writes SQL that will run against a company database. Before it is
executed, :func:`analyse_sql` decides whether the text is a single, read-only
query and reports which tables it reads and which functions it calls. A second
layer (a read-only transaction with a SELECT-only account) runs elsewhere; this
module must nevertheless stand on its own and FAIL CLOSED: anything it does not
positively recognise as part of a plain query is denied, and any unexpected
exception turns into a denial.

The design is an ALLOWLIST. A read-only transaction does not stop a function
from changing data (pg_surgery, pg_visibility), reading files or server
configuration, taking locks, sleeping, changing session settings or running SQL
handed to it as a string (query_to_xml, dblink, crosstab, ts_stat), and new
extensions bring new such functions every release, so no list of bad names can
be complete. Instead:

* Functions: a query may call only the functions named in the dialect's list,
  ``governance/sql/functions/<dialect>.txt`` (data, reviewed name by name).
  The name checked is the name the SERVER will call, i.e. the word written
  before the ``(``, taken from the token stream, never sqlglot's reading of
  it: sqlglot maps many written names onto one typed class (LEN, LENGTH and
  CHAR_LENGTH all become exp.Length), so a check on the class would let a
  dangerous name hide behind a harmless one. PostgreSQL compares quoted names
  exactly (``"LOWER"`` is not ``lower``); the other dialects fold case. A
  schema-qualified call is checked on its bare name, and any qualifier other
  than ``pg_catalog`` on PostgreSQL is denied: ``public.f()`` is whatever
  someone defined there. Table functions in FROM (generate_series, json_each,
  SQLite's pragma_*) are calls like any other.
* Every word directly followed by ``(`` is accounted for: either the parser
  made a call node at that position (checked as above), or it is the name of
  an alias column list (``AS g(n)``, ``WITH r(n)``), a type with parameters
  (``numeric(10, 2)``), a reviewed piece of syntax (``IN (``, ``OVER (``), or
  an allowed function that sqlglot parses with dedicated syntax (CAST,
  EXTRACT, TRIM, ...). Anything else is denied.
* Node types: every node of the tree must be of a reviewed sqlglot class
  (``_ALLOWED_NODE_TYPES``: query structure, literals, the standard
  operators, the syntax-built functions). An unknown class, such as an
  extension operator (``<->``), ``OPERATOR(schema.op)`` outside pg_catalog's
  standard operators, a session variable or
  a class added by a future sqlglot, is denied. Statement, write, lock and
  session nodes additionally carry a specific reason (``_DENIED_NODE_TYPES``).
  Nodes the parser built for a checked call (its arguments as sqlglot
  normalised them) are covered by the same class list.

How it works, in one pass each:

1. Tokenize + parse once with sqlglot; require exactly one statement, counted
   on the token stream (`;`-separated chunks, as the server splits them), not
   on the parser's output: sqlglot >= 30 folds `WHILE ...; ...; END` into a
   single tree.
2. Lexical checks on the raw text / token stream, for the few places where
   sqlglot's tokenizer and the real server may disagree about where a string
   or comment ends (that disagreement is how stacked statements get smuggled
   past a parser), plus comment forms that servers execute.
3. Require the root to be a query (SELECT, set operation, VALUES, or a
   parenthesised query) that is also WRITTEN as one (starts with SELECT, WITH,
   VALUES or `(`), and deny the query shorthands sqlglot >= 30 desugars into
   SELECT trees (`TABLE t`, `FROM t`, `|>` pipe syntax): the tree then shows
   sqlglot's reading of the shorthand, not what was written.
4. Walk every node of the tree once (iteratively, so deep trees cannot blow the
   Python stack): apply the node-type and function allowlists, collect real
   table names while tracking which CTE names are in scope. Per-class
   decisions are cached, so the walk costs a dict lookup per node.

This module does not decide which TABLES may be read: system catalogs,
statistics and activity views are reported like any table, and
governance.sql.table_access refuses them unless a grant names them.

Only public sqlglot API is used (Dialect.tokenize / Dialect.parser, Token
fields, node ``args`` / ``arg_key`` / ``meta``): with sqlglotc installed the
tokenizer, parser and expression classes are mypyc-compiled, so private
internals may differ from the pure-Python package.

Table names are reported lowercased, qualified as written ("public.customers"
or "customers"). Quoted identifiers are lowercased too, so the grant layer must
(and does) match table names case-insensitively.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from governance.refusals import (
    Reason,
    gettext_noop,  # Django's needs settings at import
)
from governance.sql.binding import BOUND_OPERATORS
from governance.sql.dialects import JSON_ARROW_FIX_EVERYWHERE, POSTGRES, SUPPORTED_DIALECTS
from governance.sql.dialects import parsed as parsed_sql
from governance.sql.functions import allowed_functions, allowed_settings


@dataclass(frozen=True)
class SqlVerdict:
    allowed: bool
    # "" when allowed; otherwise a Reason (its str is the fixed English form).
    reason: str
    tables: tuple[str, ...]
    # The function names the query calls, as checked (sorted, deduplicated;
    # "pg_catalog." is dropped). Informational: not part of equality, and not
    # in as_dict, whose shape other components rely on.
    functions: tuple[str, ...] = field(default=(), compare=False)

    def as_dict(self) -> dict:
        return {"allowed": self.allowed, "reason": self.reason, "tables": list(self.tables)}


# --------------------------------------------------------------------------
# Node types
# --------------------------------------------------------------------------


# Node types denied anywhere in the tree -> reason. Checked with issubclass, so
# base classes (exp.DML, exp.DDL) cover their subclasses. Everything here would
# be denied by the allowlist below anyway; this list only gives the reason.
def _write(keyword: str) -> Reason:
    return Reason(gettext_noop("write statement: %(sql)s"), sql=keyword)


def _control(keyword: str) -> Reason:
    return Reason(gettext_noop("statement not allowed: %(sql)s"), sql=keyword)


def _function(name: str) -> Reason:
    return Reason(gettext_noop("function not allowed: %(sql)s"), sql=name)


def _table_reference(sql: str) -> Reason:
    return Reason(gettext_noop("unsupported table reference: %(sql)s"), sql=sql)


_HINT = Reason(gettext_noop("optimizer hint not allowed"))
_SESSION_VARIABLE = Reason(gettext_noop("server or session variable not allowed"))
_DENIED_NODE_TYPES: tuple[tuple[type[exp.Expr], Reason], ...] = (
    (exp.Insert, _write("INSERT")),
    (exp.Update, _write("UPDATE")),
    (exp.Delete, _write("DELETE")),
    (exp.Merge, _write("MERGE")),
    (exp.Copy, _write("COPY")),
    (exp.Create, _write("CREATE")),
    (exp.DML, _write("DML")),
    (exp.DDL, _write("DDL")),
    (exp.Drop, _write("DROP")),
    (exp.Alter, _write("ALTER")),
    (exp.AlterSession, _write("ALTER")),
    (exp.TruncateTable, _write("TRUNCATE")),
    (exp.LoadData, _write("LOAD DATA")),
    (exp.Comment, _write("COMMENT")),
    (exp.Refresh, _write("REFRESH")),
    (exp.Cache, _write("CACHE")),
    (exp.Uncache, _write("UNCACHE")),
    (exp.SwapTable, _write("SWAP")),
    (exp.Put, _write("PUT")),
    (exp.Export, _write("EXPORT")),
    (exp.Install, _write("INSTALL")),
    (exp.Returning, _write("RETURNING")),
    (exp.OnConflict, _write("ON CONFLICT")),
    (exp.MultitableInserts, _write("INSERT")),
    (exp.ConditionalInsert, _write("INSERT")),
    # SELECT ... INTO new_table / INTO @var / INTO OUTFILE creates or writes.
    (exp.Into, Reason(gettext_noop("SELECT INTO not allowed"))),
    # FOR UPDATE / FOR SHARE / FOR [NO] KEY ... / LOCK IN SHARE MODE take row
    # locks that block the company's writers.
    (exp.Lock, Reason(gettext_noop("locking clause not allowed"))),
    (exp.LockingStatement, _control("LOCKING")),
    # sqlglot's fallback for statements it does not understand (EXPLAIN,
    # CALL, DO, VACUUM, SET ROLE, REPLACE INTO, ...).
    (exp.Command, Reason(gettext_noop("unsupported statement"))),
    # Optimizer hints can change session limits (MySQL SET_VAR /
    # MAX_EXECUTION_TIME, pg_hint_plan Set(statement_timeout 0)).
    (exp.Hint, _HINT),
    (exp.NextValueFor, _function("next value for")),
    (exp.Set, _control("SET")),
    (exp.SetItem, _control("SET")),
    (exp.Transaction, _control("BEGIN")),
    (exp.Commit, _control("COMMIT")),
    (exp.Rollback, _control("ROLLBACK")),
    (exp.Pragma, _control("PRAGMA")),
    (exp.Attach, _control("ATTACH")),
    (exp.Detach, _control("DETACH")),
    (exp.Use, _control("USE")),
    (exp.Grant, _control("GRANT")),
    (exp.Revoke, _control("REVOKE")),
    (exp.Analyze, _control("ANALYZE")),
    (exp.Kill, _control("KILL")),
    (exp.Declare, _control("DECLARE")),
    (exp.Show, _control("SHOW")),
    (exp.Describe, _control("DESCRIBE")),
    (exp.Summarize, _control("SUMMARIZE")),
    (exp.Get, _control("GET")),
    (exp.Execute, _control("EXECUTE")),  # also ExecuteSql
    (exp.StoredProcedure, _control("PROCEDURE")),
    (exp.Block, _control("BLOCK")),
    (exp.WhileBlock, _control("BLOCK")),
    (exp.IfBlock, _control("BLOCK")),
    (exp.LoopBlock, _control("BLOCK")),
    (exp.RepeatBlock, _control("BLOCK")),
    (exp.CaseStatement, _control("BLOCK")),
    (exp.EndStatement, _control("END")),
    (exp.Undrop, _write("UNDROP")),
    (exp.ConnectTo, _control("CONNECT")),
    (exp.Disconnect, _control("DISCONNECT")),
    # Reading @user_variables / @@system_variables: the latter expose server
    # configuration (datadir, secure_file_priv, ...). PostgreSQL $1 / psycopg
    # %s placeholders have no value to bind here.
    (exp.SessionParameter, _SESSION_VARIABLE),
    (exp.Parameter, _SESSION_VARIABLE),
    (exp.Placeholder, Reason(gettext_noop("placeholder not allowed"))),
)

# The sqlglot classes a read-only query may contain. Exact classes, not
# issubclass: a subclass added by a future sqlglot must be reviewed before it
# is allowed. Nodes produced by a function CALL are not looked up here (the
# called name decides); their arguments are.
_ALLOWED_NODE_TYPES: frozenset[type[exp.Expr]] = frozenset(
    {
        # query structure
        exp.Select,
        exp.Union,
        exp.Intersect,
        exp.Except,
        exp.Subquery,
        exp.Values,
        exp.From,
        exp.Join,
        exp.Lateral,
        exp.Where,
        exp.Group,
        exp.Having,
        exp.Order,
        exp.Ordered,
        exp.Limit,
        exp.Offset,
        exp.Fetch,
        exp.LimitOptions,  # FETCH FIRST n ROWS ONLY / WITH TIES
        exp.Distinct,
        exp.With,
        exp.CTE,
        exp.Table,
        exp.TableAlias,
        exp.Alias,
        exp.Column,
        exp.ColumnDef,  # AS t(a int, ...) after json_to_record / json_table
        exp.Identifier,
        exp.Star,
        exp.Dot,
        exp.Var,
        exp.Cube,
        exp.Rollup,
        exp.GroupingSets,
        exp.Window,
        exp.WindowSpec,
        exp.Filter,  # agg(...) FILTER (WHERE ...)
        exp.WithinGroup,  # percentile_cont(...) WITHIN GROUP (ORDER BY ...)
        exp.IgnoreNulls,
        exp.RespectNulls,
        exp.JSONTable,  # JSON_TABLE(...): the call itself is checked by name
        exp.JSONColumnDef,
        exp.JSONSchema,
        # literals and values
        exp.Literal,
        exp.RawString,  # $$...$$
        exp.HexString,  # x'41'
        exp.BitString,  # b'0101'
        exp.ByteString,  # PostgreSQL E'...' (escapes are checked lexically)
        exp.National,  # N'...'
        exp.Introducer,  # MySQL _utf8mb4'...'
        exp.Null,
        exp.Boolean,
        exp.Paren,
        exp.Tuple,
        exp.Array,  # ARRAY[...], ARRAY(SELECT ...)
        exp.Bracket,  # a[1], j['k']
        exp.Slice,  # a[1:2]
        exp.Interval,
        exp.DataType,
        exp.DataTypeParam,
        exp.Kwarg,
        exp.PropertyEQ,  # named argument f(a => 1); MySQL @v := x is denied below
        exp.JSONPath,
        exp.JSONPathRoot,
        exp.JSONPathKey,
        exp.JSONPathSubscript,
        exp.JSONPathWildcard,
        exp.JSONPathSlice,
        exp.JSONPathFilter,
        exp.JSONPathScript,
        exp.JSONPathSelector,
        exp.JSONPathUnion,
        exp.JSONPathRecursive,
        # predicates and the standard operators
        exp.And,
        exp.Or,
        exp.Xor,
        exp.Not,
        exp.Neg,
        exp.EQ,
        exp.NEQ,
        exp.NullSafeEQ,
        exp.NullSafeNEQ,
        exp.GT,
        exp.GTE,
        exp.LT,
        exp.LTE,
        exp.Is,
        exp.In,
        exp.Between,
        exp.Exists,
        exp.Any,
        exp.All,
        exp.Like,
        exp.ILike,
        exp.SimilarTo,
        exp.Glob,
        exp.RegexpLike,  # ~, REGEXP, RLIKE
        exp.RegexpILike,  # ~*
        exp.Escape,
        exp.Collate,
        exp.Add,
        exp.Sub,
        exp.Mul,
        exp.Div,
        exp.IntDiv,
        exp.Mod,
        exp.Pow,
        exp.DPipe,  # ||
        exp.BitwiseAnd,
        exp.BitwiseOr,
        exp.BitwiseXor,
        exp.BitwiseNot,
        exp.BitwiseLeftShift,
        exp.BitwiseRightShift,
        exp.AtTimeZone,
        exp.Case,
        exp.If,  # WHEN ... THEN inside CASE; MySQL IF() is checked by name
        exp.Cast,  # CAST(x AS t), x::t
        exp.Extract,  # EXTRACT(field FROM x)
        exp.Trim,  # TRIM(BOTH ... FROM x)
        exp.Substring,  # SUBSTRING(x FROM a FOR b)
        exp.StrPosition,  # POSITION(a IN b)
        exp.GroupConcat,  # GROUP_CONCAT(DISTINCT x ORDER BY y SEPARATOR ',')
        exp.MatchAgainst,  # tsvector @@ tsquery; MySQL MATCH(...) AGAINST(...)
        exp.Unnest,  # unnest(...) in FROM / ROWS FROM, parsed as syntax
        # JSON / array operators (->, ->>, #>, #>>, @>, <@, ?, ?|, ?&, &&)
        exp.JSONExtract,
        exp.JSONExtractScalar,
        exp.JSONBExtract,
        exp.JSONBExtractScalar,
        exp.JSONBContains,
        exp.JSONBContainsAnyTopKeys,
        exp.JSONBContainsAllTopKeys,
        exp.JSONBContainsTopKey,
        exp.ArrayContains,
        exp.ArrayContainsAll,
        exp.ArrayContainedBy,
        exp.ArrayOverlaps,
        exp.Operator,  # only OPERATOR(pg_catalog.<standard op>), checked per node
        exp.TableSample,  # TABLESAMPLE SYSTEM / BERNOULLI (n) [REPEATABLE (s)]; the method is checked per node
        exp.Overlaps,  # (a, b) OVERLAPS (c, d): the grammar calls pg_catalog.overlaps
        exp.IndexTableHint,  # MySQL USE / FORCE / IGNORE INDEX (names): a plan choice, reads nothing more
        exp.XMLElement,  # xmlelement(name n, ...): grammar syntax building a value
        # Built by sqlglot for a call whose written name is checked on its own
        # (by position, or by check_unexplained_calls): the dedicated parsers
        # of CHAR / CEIL / FLOOR / INITCAP / NORMALIZE / OVERLAY / DECODE /
        # JSON_OBJECT / JSON_OBJECTAGG / JSON_AGG / JSON_VALUE, and
        # the nodes builders wrap arguments in (MySQL GROUP_CONCAT(a, b) ->
        # Concat, TO_DAYS -> DateDiff, DAY / DATE_FORMAT / strftime -> TsOrDs*).
        # None of them stands for a call of its own: every server call is
        # written as a name before "(", and each such name is checked.
        exp.Chr,
        exp.Ceil,
        exp.Floor,
        exp.Initcap,
        exp.Normalize,
        exp.Overlay,
        exp.Decode,
        exp.Concat,
        exp.DateDiff,
        exp.TsOrDsToDate,
        exp.TsOrDsToTimestamp,
        exp.JSONObject,
        exp.JSONObjectAgg,
        exp.JSONArrayAgg,
        exp.JSONValue,
        exp.JSONKeyValue,
        # niladic date/time keywords (no parentheses, so no call to check)
        exp.CurrentDate,
        exp.CurrentTime,
        exp.CurrentTimestamp,
        exp.Localtime,
        exp.Localtimestamp,
    }
)

# Classes the parser may place at a call's position without being the call:
# `VALUES (...)` becomes SELECT * FROM (VALUES ...) with the star there, and a
# builder may hand back its argument (COALESCE(x) -> x). Such positions stay
# unexplained, so check_unexplained_calls still checks the written word.
_NEVER_A_CALL = frozenset({exp.Star, exp.Column, exp.Literal, exp.Var, exp.Null, exp.Boolean, exp.Identifier})
# PostgreSQL's ARRAY(SELECT ...) constructor: ARRAY is a reserved word there,
# never a function name (in MySQL it could name a stored function).
_NEVER_A_CALL_BY_DIALECT = {
    dialect: _NEVER_A_CALL | ({exp.Array} if dialect == POSTGRES else set()) for dialect in SUPPORTED_DIALECTS
}

# Words that may stand directly before "(" without being a function call the
# parser saw: keywords of the query syntax, and MySQL's MATCH ... AGAINST (...).
_SYNTAX_WORDS = frozenset(
    {
        "against",
        "all",
        "and",
        "any",
        "array",
        "as",
        "between",
        "by",
        "case",
        "columns",
        "cube",
        "distinct",
        "else",
        "except",
        "exists",
        "filter",
        "first",  # FETCH FIRST (subquery) ROWS ONLY
        "next",
        "from",
        "group",
        "having",
        "in",
        "index",  # MySQL USE / FORCE / IGNORE INDEX (...)
        "intersect",
        "is",
        "join",
        "key",  # MySQL USE KEY (...)
        "lateral",
        "like",
        "ilike",
        "materialized",  # WITH x AS [NOT] MATERIALIZED (...)
        "limit",
        "nested",
        "not",
        "offset",
        "on",
        "operator",  # OPERATOR(pg_catalog.=): the operator node itself is checked
        "or",
        "over",
        "rollup",
        "row",
        "repeatable",  # TABLESAMPLE ... REPEATABLE (seed)
        "select",
        "sets",
        "some",
        "then",
        "union",
        "using",
        "values",
        "when",
        "where",
        "with",
        "xor",
    }
)


# PostgreSQL's built-in sampling methods. A method is a handler function found
# by name; extensions add others (tsm_system_rows, tsm_system_time).
_SAMPLE_METHODS = frozenset({"system", "bernoulli"})


def _sample_denial(node: exp.Expr, dialect: str) -> Reason | None:
    method = node.args.get("method")
    name = method.name.lower() if isinstance(method, (exp.Var, exp.Identifier)) else ""
    if dialect != POSTGRES or name not in _SAMPLE_METHODS:
        return Reason(gettext_noop("sampling method not allowed: %(sql)s"), sql=name or "default")
    extra = {k for k, v in node.args.items() if v is not None and k not in {"method", "percent", "seed"}}
    if not extra:
        return None
    return Reason(gettext_noop("sampling clause not allowed: %(sql)s"), sql=", ".join(sorted(extra)))


def _node_type_reason(node_type: type[exp.Expr]) -> Reason:
    if issubclass(node_type, exp.Func):
        try:
            name = node_type.sql_names()[0].lower()
        except Exception:  # abstract function classes have no SQL name
            name = node_type.key
        return _function(name)
    if issubclass(node_type, exp.Binary):
        return _operator(node_type.key)
    return Reason(gettext_noop("unsupported expression: %(sql)s"), sql=node_type.key)


def _operator(sql: str) -> Reason:
    return Reason(gettext_noop("operator not allowed: %(sql)s"), sql=sql)


# What the walk must do with a node beyond the per-type verdict.
(
    _KIND_PLAIN,
    _KIND_ANONYMOUS_FUNC,
    _KIND_TABLE,
    _KIND_ASSIGNMENT,
    _KIND_WITH,
    _KIND_IDENTIFIER,
    _KIND_OPERATOR,
    _KIND_SAMPLE,
) = range(8)


@functools.cache
def _classify(node_type: type[exp.Expr]) -> tuple[Reason | None, int]:
    """(reason to deny a node of this type unless it is a checked call, per-node
    work kind). Cached per type: the issubclass scans run once per type per
    process, so the walk pays one dict lookup per node."""
    for denied_type, reason in _DENIED_NODE_TYPES:
        if issubclass(node_type, denied_type):
            return reason, _KIND_PLAIN
    if node_type in (exp.Anonymous, exp.AnonymousAggFunc):
        # A function name sqlglot does not know: always a call, never syntax.
        return Reason(gettext_noop("function not allowed")), _KIND_ANONYMOUS_FUNC
    reason = None if node_type in _ALLOWED_NODE_TYPES else _node_type_reason(node_type)
    if node_type is exp.Table:
        return reason, _KIND_TABLE
    if node_type is exp.PropertyEQ:
        return reason, _KIND_ASSIGNMENT
    if node_type is exp.With:
        return reason, _KIND_WITH
    if node_type is exp.Identifier:
        return reason, _KIND_IDENTIFIER
    if node_type is exp.Operator:
        # OPERATOR(schema.op): only pg_catalog's standard operators, the form
        # the binder writes (binding.py); any other is possibly user-defined.
        return None, _KIND_OPERATOR
    if node_type is exp.TableSample:
        return reason, _KIND_SAMPLE
    return reason, _KIND_PLAIN


# Denied node types are denied even as the product of a call to an allowed
# name (no allowed name produces one today; this keeps it so).
@functools.cache
def _denied_type_reason(node_type: type[exp.Expr]) -> Reason | None:
    for denied_type, reason in _DENIED_NODE_TYPES:
        if issubclass(node_type, denied_type):
            return reason
    return None


# --------------------------------------------------------------------------
# Lexical checks: places where sqlglot's tokenizer and the server can disagree
# --------------------------------------------------------------------------

# A backslash directly before a quote is read as an escape by some servers /
# modes (MySQL by default, PostgreSQL E'' strings, PostgreSQL with
# standard_conforming_strings=off) and as a literal backslash by others. sqlglot
# picks one reading, so `SELECT E'\'' ; DELETE ... --'` is ONE string to
# sqlglot but a stacked DELETE to PostgreSQL. Deny the ambiguous form in every
# dialect; doubled quotes ('O''Brien') still work.
_BACKSLASH_QUOTE = re.compile(r"\\['\"`]")

# PostgreSQL U&"..." / U&'...' Unicode escapes: sqlglot reads `U & "\0070g..."`,
# so U&"\0070g_read_file"('x') would hide a denied function name.
_PG_UNICODE_ESCAPE = re.compile(r"[uU]&['\"]")

# Optimizer-hint comments (MySQL /*+ SET_VAR(...) */, pg_hint_plan
# /*+ Set(statement_timeout 0) */) can lift the limits the executor sets. sqlglot
# keeps some as exp.Hint and turns others into plain comments, so check the text.
_HINT_COMMENT = re.compile(r"/\*\+")

# MySQL executes /*! ... */ and /*M! ... */ comment bodies, and `--` is only a
# comment when followed by whitespace (`1 --1` is `1 - -1`). sqlglot treats all
# of these as plain comments, so code hidden there would go unchecked.
_MYSQL_HIDDEN_CODE = re.compile(r"/\*M?!|--(?!\s)")


def _lexical_denial(sql: str, tokens: list[Token], dialect: str) -> Reason | None:
    if _BACKSLASH_QUOTE.search(sql):
        return Reason(gettext_noop("ambiguous backslash-escaped quote (use doubled quotes)"))
    if _HINT_COMMENT.search(sql):
        return _HINT
    if dialect == "postgres" and _PG_UNICODE_ESCAPE.search(sql):
        return Reason(gettext_noop("unicode escape strings/identifiers not allowed"))
    if dialect == "mysql" and _MYSQL_HIDDEN_CODE.search(_text_between_tokens(sql, tokens)):
        return Reason(gettext_noop("executable or ambiguous comment not allowed"))
    return None


def _text_between_tokens(sql: str, tokens: list[Token]) -> str:
    """Everything the tokenizer did not turn into a token: whitespace and
    comments. Scanning only this avoids false hits inside string literals."""
    gaps = []
    pos = 0
    for token in tokens:
        gaps.append(sql[pos : token.start])
        pos = token.end + 1
    gaps.append(sql[pos:])
    return "\n".join(gaps)


# TokenType is an IntEnum in sqlglot 30 and member lookup on the class is
# slow, so the token loops compare against module constants (with ==, which
# also holds if a compiled tokenizer ever hands out plain ints).
_SEMICOLON = TokenType.SEMICOLON
_TABLE_SAMPLE = TokenType.TABLE_SAMPLE


def _count_statements(tokens: list[Token]) -> int:
    """Non-empty `;`-separated chunks: how many statements the server will
    run. Strings and comments are single tokens (or no token), so a `;`
    inside them does not count."""
    count = 0
    in_statement = False
    for token in tokens:
        if token.token_type == _SEMICOLON:
            in_statement = False
        elif not in_statement:
            in_statement = True
            count += 1
    return count


# What a query may start with, as written. sqlglot turns `TABLE t` (PostgreSQL,
# MySQL) and `FROM t [SELECT ...]` (DuckDB) into SELECT trees in every dialect,
# so the root's node type alone no longer proves a query was written.
_QUERY_START_TOKENS = frozenset({TokenType.SELECT, TokenType.WITH, TokenType.VALUES, TokenType.L_PAREN})


_SHORTHAND_TOKENS = {
    TokenType.TABLE: Reason(
        gettext_noop('TABLE query shorthand not allowed: write SELECT * FROM ... (quote a column named "table")')
    ),
    TokenType.PIPE_GT: Reason(gettext_noop("pipe syntax not allowed")),
}


def _shorthand_denial(tokens: list[Token]) -> Reason | None:
    """Deny query shorthands anywhere in the statement, not only at the root.

    `TABLE t` inside a subquery, CTE or UNION: which table it reads is decided
    by sqlglot's reading of the shorthand (sqlglot 27 reported
    `(TABLE customers)` as reading a table named "table"). In a read-only query
    the unquoted TABLE keyword has no other use than `t.table` / `AS table`,
    which can be quoted. (`FROM t` nested in a query is a syntax error on all
    supported servers, so sqlglot's reading of it cannot let anything run.)
    `|>` pipe syntax is BigQuery's; sqlglot applies it in every dialect."""
    for token in tokens:
        reason = _SHORTHAND_TOKENS.get(token.token_type)
        if reason:
            return reason
    return None


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------

_DIALECTS: dict[str, Dialect] = {name: Dialect.get_or_raise(name) for name in SUPPORTED_DIALECTS}


_PARSE_ERROR_MAX_CHARS = 160


def _parse_error_reason(error: Exception) -> Reason:
    if isinstance(error, ParseError) and error.errors:
        first = error.errors[0]
        where = {"line": first.get("line"), "col": first.get("col")}
        description = str(first.get("description"))
        at = f" (line {where['line']}, col {where['col']})"
        if len(description) + len(at) <= _PARSE_ERROR_MAX_CHARS:
            # The detail is sqlglot's English, for the audit trail only: people read line and column.
            # xgettext:no-python-format
            message = gettext_noop("parse error: %(detail)s (line %(line)s, col %(col)s)")
            return Reason(message, detail=description, **where)
        detail = description + at
    else:
        # TokenError messages embed the SQL; keep the reason short.
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    # xgettext:no-python-format
    message = gettext_noop("parse error: %(detail)s")
    return Reason(message, detail=detail[:_PARSE_ERROR_MAX_CHARS])


def _root_denial(statement: exp.Expr, first_token: Token | None) -> Reason | None:
    """The statement itself must be a query. sqlglot turns many statements it
    does not know into a bare Column or Alias (`ABORT`, `CHECKPOINT`,
    `LISTEN x`, `SAVEPOINT x`, ...) or into exp.Command, so an allowlist of
    root types is required: a denylist would miss those. A query-typed root
    must also be written as a query: sqlglot >= 30 parses `TABLE t` and `FROM t`
    into an ordinary SELECT tree."""
    first_word = first_token.text.upper() if first_token else ""
    node = statement
    while isinstance(node, exp.Subquery):  # (SELECT ...), ((SELECT ...))
        node = node.this
    if isinstance(node, (exp.Select, exp.SetOperation, exp.Values)):
        if first_token is not None and first_token.token_type in _QUERY_START_TOKENS:
            return None
        return _not_a_query(first_word)
    if isinstance(node, exp.Command):
        return Reason(gettext_noop("unsupported statement: %(sql)s"), sql=str(node.this).upper())
    type_denial = _denied_type_reason(type(node))
    if type_denial:
        return type_denial
    return _not_a_query(first_word)


def _not_a_query(first_word: str) -> Reason:
    if not first_word:
        return Reason(gettext_noop("not a query: "))
    return Reason(gettext_noop("not a query: %(sql)s"), sql=first_word)


# --------------------------------------------------------------------------
# Function calls as written
# --------------------------------------------------------------------------

_L_PAREN = TokenType.L_PAREN
_IDENTIFIER = TokenType.IDENTIFIER
_WORD = re.compile(r"\w+")


def _call_tokens(tokens: list[Token]) -> dict[int, Token]:
    """Start offset -> token, for every word directly followed by "(": the
    places where the server may call a function. Quoted identifiers count."""
    calls = {}
    for token, following in zip(tokens, tokens[1:], strict=False):
        if following.token_type == _L_PAREN and (token.token_type == _IDENTIFIER or _WORD.fullmatch(token.text)):
            calls[token.start] = token
    return calls


def _called_name(token: Token, dialect: str) -> str:
    """The function name the server resolves: PostgreSQL folds unquoted names
    to lower case and matches quoted ones exactly; MySQL and SQLite function
    names are case-insensitive."""
    if dialect == POSTGRES and token.token_type == _IDENTIFIER:
        return token.text
    return token.text.lower()


@functools.cache
def _type_tokens(dialect: str) -> frozenset:
    # Type names take parameters in parentheses: numeric(10, 2), varchar(20).
    return frozenset(_DIALECTS[dialect].parser_class.TYPE_TOKENS)


def _qualifier(node: exp.Expr) -> list[exp.Expr] | None:
    """The schema (and catalog) parts written before a called function, or
    None when the call is unqualified. `s.f(...)` parses as Dot(s, f(...));
    `FROM s.f(...)` as Table(this=f(...), db=s)."""
    parent = node.parent
    if isinstance(parent, exp.Dot) and node.arg_key == "expression":
        return [parent.this]
    if isinstance(parent, exp.Table) and node.arg_key == "this":
        parts = [parent.args.get("catalog"), parent.args.get("db")]
        parts = [part for part in parts if part is not None]
        return parts or None
    return None


def _qualifier_allowed(parts: list[exp.Expr], dialect: str) -> bool:
    # Only PostgreSQL's own schema, written as one plain name: a function in
    # any other schema is user-defined (or an extension's) and can do anything.
    if dialect != POSTGRES or len(parts) != 1:
        return False
    part = parts[0]
    if isinstance(part, exp.Column) and not part.table:
        part = part.this
    return isinstance(part, exp.Identifier) and _identifier_key(part, dialect) == "pg_catalog"


def _qualifier_text(parts: list[exp.Expr]) -> str:
    names = (part.name.lower() if isinstance(part, (exp.Identifier, exp.Column)) else part.sql() for part in parts)
    return ".".join(names)


# SQLite pragmas that only list schema or build facts, as table-valued
# functions named without arguments (the grant layer still decides whether a
# query may read them). Called with arguments they are function calls, denied
# by the function list.
_READ_ONLY_PRAGMA_TABLES = frozenset(
    {
        "pragma_database_list",
        "pragma_collation_list",
        "pragma_function_list",
        "pragma_module_list",
        "pragma_pragma_list",
        "pragma_compile_options",
        "pragma_table_list",
        "pragma_table_info",
        "pragma_table_xinfo",
        "pragma_index_list",
        "pragma_index_info",
        "pragma_index_xinfo",
        "pragma_foreign_key_list",
    }
)


def _setting_read(node: exp.Expr) -> str:
    """The setting current_setting('name' [, missing_ok]) reads, lower-cased,
    or "" when it is not one plain string literal."""
    args = list(node.expressions) if isinstance(node, exp.Anonymous) else []
    if not 1 <= len(args) <= 2:
        return ""
    first = args[0]
    if type(first) is not exp.Literal or not first.is_string:
        return ""
    if len(args) == 2 and not isinstance(args[1], exp.Boolean):
        return ""
    return str(first.this).lower()


# --------------------------------------------------------------------------
# Tree walk
# --------------------------------------------------------------------------


def _identifier_key(identifier: exp.Expr | None, dialect: str) -> str:
    """How the server would compare this name with a CTE name. When unsure we
    compare MORE strictly: a CTE reference misread as a table only makes the
    grant layer over-deny, while a table misread as a CTE would hide it."""
    if not isinstance(identifier, exp.Identifier):
        return ""
    name = identifier.name
    if dialect == "sqlite":  # identifiers are case-insensitive, quoted or not
        return name.lower()
    if dialect == "postgres":  # unquoted names fold to lower case
        return name if identifier.quoted else name.lower()
    return name  # mysql: exact match (conservative)


def _cte_keys(with_: exp.With, dialect: str) -> list[str]:
    keys = []
    for cte in with_.expressions:
        alias = cte.args.get("alias")
        keys.append(_identifier_key(alias.this if alias else None, dialect))
    return keys


# The arg holding a query's WITH clause. sqlglot 30 renamed it from "with" to
# "with_" (likewise "from" -> "from_"); with the wrong key every CTE reference
# is reported as a table. tests/test_sql_guard.py pins this name.
_WITH_ARG = "with_"


class _Walk:
    """One pass over a parsed statement: first denial reason, table names and
    called functions."""

    def __init__(self, dialect: str, tokens: list[Token]) -> None:
        self.dialect = dialect
        # TABLESAMPLE <method> (...): the method's position, explained by a
        # TableSample node (whose method is checked), never by a call.
        sample = _TABLE_SAMPLE
        self.sample_methods = {tokens[i + 1].start for i, t in enumerate(tokens[:-1]) if t.token_type == sample}
        self.allowed_functions = allowed_functions(dialect)
        self.denial: Reason | None = None
        self.tables: set[str] = set()
        self.functions: set[str] = set()
        self.calls = _call_tokens(tokens)
        # Call-like tokens the tree explains (a call node or an alias name).
        self.explained: set[int] = set()

    def _deny(self, reason: Reason) -> None:
        if self.denial is None:  # keep the first reason found
            self.denial = reason

    def run(self, root: exp.Expr) -> None:
        # Explicit stack instead of recursion: long OR chains / deep nesting
        # must not hit Python's recursion limit. Each entry carries the set of
        # CTE names visible at that node. Children are visited in reverse
        # order; the walk is still deterministic, which is all that matters
        # for the (first) reason.
        calls = self.calls
        never_a_call = _NEVER_A_CALL_BY_DIALECT[self.dialect]
        stack: list[tuple[exp.Expr, frozenset[str]]] = [(root, frozenset())]
        while stack:
            node, ctes = stack.pop()
            node_type = type(node)
            reason, kind = _classify(node_type)
            # Only a node that can stand for a call, or an alias name, can
            # explain a call position; skipping the rest keeps the walk cheap.
            # meta_get: the tree is shared (dialects.parsed), and reading
            # `meta` would give every such node an empty dict of its own.
            alias_name = kind == _KIND_IDENTIFIER and type(node.parent) is exp.TableAlias  # AS g(n), WITH r(n)
            if calls and (node_type not in never_a_call or alias_name):
                start = node.meta_get("start")
                if start is not None and start in calls:
                    self.explained.add(start)
                    if not alias_name:
                        # The parser made this node from the call written here:
                        # the written name decides, whatever class sqlglot chose.
                        self._check_call(node, calls[start])
                        reason = _denied_type_reason(node_type)
                elif kind == _KIND_ANONYMOUS_FUNC:
                    # An unknown function the parser built without a written
                    # name under it: nothing to check it against, so deny.
                    reason = _function(node.name.lower())
            elif kind == _KIND_ANONYMOUS_FUNC:
                reason = _function(node.name.lower())
            if kind == _KIND_OPERATOR:
                operator = str(node.args.get("operator") or "")
                if self.dialect != POSTGRES or operator.lower() not in BOUND_OPERATORS:
                    reason = _operator(f"OPERATOR({operator})")
            elif kind == _KIND_SAMPLE:
                reason = reason or _sample_denial(node, self.dialect)
                self.explained.update(self.sample_methods)
            if reason:
                self._deny(reason)
            if kind == _KIND_TABLE:
                self._record_table(node, ctes)
            elif kind == _KIND_ASSIGNMENT:
                if isinstance(node.this, (exp.Parameter, exp.SessionParameter)):
                    self._deny(Reason(gettext_noop("variable assignment not allowed")))  # MySQL @a := 1
            elif kind == _KIND_WITH:
                self._push_with(node, ctes, stack)
                continue

            # The query's own CTEs are visible in its body, not in the WITH
            # clause itself (_push_with scopes each CTE definition).
            with_ = node.args.get(_WITH_ARG)
            body_ctes = ctes.union(_cte_keys(with_, self.dialect)) if with_ else ctes
            for value in node.args.values():
                if isinstance(value, exp.Expr):
                    stack.append((value, ctes if value is with_ else body_ctes))
                elif type(value) is list:
                    stack.extend((item, body_ctes) for item in value if isinstance(item, exp.Expr))

    def _check_call(self, node: exp.Expr, token: Token) -> None:
        name = _called_name(token, self.dialect)
        self.functions.add(name)
        if name not in self.allowed_functions:
            self._deny(_function(name))
            return
        parts = _qualifier(node)
        if parts is not None and not _qualifier_allowed(parts, self.dialect):
            self._deny(_function(f"{_qualifier_text(parts)}.{name}"))
        if self.dialect == POSTGRES and name == "current_setting":
            setting = _setting_read(node)
            if setting not in allowed_settings():
                self._deny(Reason(gettext_noop("setting not readable: %(sql)s"), sql=setting or "(not a literal)"))

    def check_unexplained_calls(self) -> None:
        """Every word before "(" that the tree does not explain must be an
        allowed function (one sqlglot parses with dedicated syntax: CAST,
        EXTRACT, TRIM, STRING_AGG, ...), a keyword of the query syntax, or a
        type with parameters. Anything else is a call the walk did not see."""
        type_tokens = _type_tokens(self.dialect)
        for start, token in self.calls.items():
            if start in self.explained:
                continue
            name = _called_name(token, self.dialect)
            if name in self.allowed_functions:
                self.functions.add(name)
                continue
            if token.token_type != _IDENTIFIER and (name in _SYNTAX_WORDS or token.token_type in type_tokens):
                continue
            self._deny(_function(name))

    def _push_with(self, with_: exp.With, outer: frozenset[str], stack: list[tuple[exp.Expr, frozenset[str]]]) -> None:
        # CTE i sees the CTEs before it (and itself when RECURSIVE). Forward
        # references under RECURSIVE are treated as tables: over-reporting is
        # the safe direction.
        keys = _cte_keys(with_, self.dialect)
        recursive = bool(with_.args.get("recursive"))
        for index, cte in enumerate(with_.expressions):
            visible = keys[: index + 1] if recursive else keys[:index]
            stack.append((cte, outer.union(visible)))
        for child in with_.iter_expressions():
            if not isinstance(child, exp.CTE):  # e.g. a SEARCH/CYCLE clause
                stack.append((child, outer))

    def _record_table(self, table: exp.Table, ctes: frozenset[str]) -> None:
        if table.arg_key == "indexed":
            return  # SQLite `t INDEXED BY idx`: sqlglot 30 keeps idx as a Table
        this = table.this
        if this is None and table.args.get("rows_from"):
            return  # ROWS FROM (f(), g()): the functions are walked separately
        if isinstance(this, exp.Func):
            return  # table function: checked as a call (name and qualifier)
        if not isinstance(this, (exp.Identifier, exp.Dot)):
            self._deny(_table_reference(table.sql(self.dialect)[:80]))
            return
        parts = table.parts
        if not all(isinstance(part, exp.Identifier) for part in parts):
            self._deny(_table_reference(table.sql(self.dialect)[:80]))
            return
        name = parts[-1].name.lower()
        if self.dialect == "sqlite" and name.startswith("pragma_") and name not in _READ_ONLY_PRAGMA_TABLES:
            # A pragma read as a table: some change the database or the
            # session (optimize, journal_mode, wal_checkpoint, ...).
            self._deny(_control(f"PRAGMA ({name})"))
            return
        if len(parts) == 1:
            if _identifier_key(parts[0], self.dialect) in ctes:
                return  # reference to a CTE in scope, not a real table
            if self.dialect == "mysql" and not parts[0].quoted and parts[0].name.lower() == "dual":
                return  # MySQL's DUAL pseudo-table (a reserved word, never real)
        self.tables.add(".".join(part.name.lower() for part in parts))


# --------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------


def analyse_sql(sql: str, dialect: str) -> SqlVerdict:
    """Decide whether ``sql`` is a single read-only query in ``dialect``.

    Raises ValueError for an unsupported dialect (a programming error, not
    agent input). Every other failure yields a denied verdict.
    """
    if dialect not in SUPPORTED_DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r}; expected one of {SUPPORTED_DIALECTS}")
    try:
        return _analyse(sql, dialect)
    except Exception as error:  # fail closed on anything unexpected
        # The error class is for the audit trail; people read that the SQL could not be checked.
        # xgettext:no-python-format
        message = gettext_noop("internal error: %(error)s")
        return SqlVerdict(False, Reason(message, error=type(error).__name__), ())


_ARROW_ARGUMENT = Reason(
    gettext_noop("write a JSON arrow that is a function's argument in parentheses: f((x -> 'a'), ...)")
)


def _analyse(sql: str, dialect: str) -> SqlVerdict:
    if not isinstance(sql, str):
        return SqlVerdict(False, Reason(gettext_noop("sql must be a string")), ())
    try:
        # The process's one parse of this text (shared with lineage and the
        # binder, which get copies): read here, never changed.
        parsed = parsed_sql(dialect, sql)
    except (ParseError, TokenError) as error:
        return SqlVerdict(False, _parse_error_reason(error), ())
    tokens = parsed.tokens

    # Empty chunks (None) and trailing comments after the last `;`
    # (exp.Semicolon) are not statements.
    statements = [s for s in parsed.statements if s is not None and not isinstance(s, exp.Semicolon)]

    walk = _Walk(dialect, tokens)
    for statement in statements:
        walk.run(statement)
    walk.check_unexplained_calls()
    tables = tuple(sorted(walk.tables))
    functions = tuple(sorted(walk.functions))

    # Both counts must be 1: the tokens say what the server will run, the
    # parser output what the walk has checked.
    count = _count_statements(tokens)
    if count == 0 or not statements:
        return SqlVerdict(False, Reason(gettext_noop("empty statement")), tables, functions)
    if count != 1 or len(statements) != 1:
        reason = Reason(
            gettext_noop("expected exactly one statement, got %(count)s"), count=max(count, len(statements))
        )
        return SqlVerdict(False, reason, tables, functions)
    first_token = next((t for t in tokens if t.token_type != _SEMICOLON), None)
    # Most specific reason first; the TABLE-keyword rule also trips on
    # `INTO TEMPORARY TABLE`, which the walk names better.
    arrow = None if not parsed.rewritten or JSON_ARROW_FIX_EVERYWHERE else _ARROW_ARGUMENT
    reason = (
        arrow
        or _lexical_denial(sql, tokens, dialect)
        or _root_denial(statements[0], first_token)
        or walk.denial
        or _shorthand_denial(tokens)
    )
    if reason:
        return SqlVerdict(False, reason, tables, functions)
    return SqlVerdict(True, "", tables, functions)
