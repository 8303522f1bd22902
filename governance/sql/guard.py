"""Parser layer of the read-only SQL guard.

An AI agent writes SQL that will run against a company database. Before it is
executed, :func:`analyse_sql` decides whether the text is a single, read-only
query and reports which tables it reads. A second layer (a read-only
transaction) runs elsewhere; this module must nevertheless stand on its own and
FAIL CLOSED: anything it does not positively understand as a plain query is
denied, and any unexpected exception turns into a denial.

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
   Python stack): deny writes, locking clauses, SELECT INTO, session/transaction
   control, procedural blocks and dangerous functions anywhere; collect real
   table names while tracking which CTE names are in scope.

Only public sqlglot API is used (Dialect.tokenize / Dialect.parser, Token
fields, node ``args`` / ``arg_key``): with sqlglotc installed the tokenizer,
parser and expression classes are mypyc-compiled, so private internals may
differ from the pure-Python package.

Table names are reported lowercased, qualified as written ("public.customers"
or "customers"). Quoted identifiers are lowercased too, so the grant layer must
(and does) match table names case-insensitively.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from governance.sql.dialects import SUPPORTED_DIALECTS


@dataclass(frozen=True)
class SqlVerdict:
    allowed: bool
    reason: str  # "" when allowed
    tables: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"allowed": self.allowed, "reason": self.reason, "tables": list(self.tables)}


# --------------------------------------------------------------------------
# Denylists
# --------------------------------------------------------------------------

# Functions denied anywhere in the tree, matched on the lowercased bare name
# (schema qualification and identifier quoting are ignored). One list for all
# dialects: a name that is harmless in one dialect is just an unusual name in
# another, so denying it everywhere costs nothing and keeps the rule simple.
_DENIED_FUNCTIONS = frozenset(
    {
        # PostgreSQL: files and server programs
        "pg_stat_file",
        "pg_logdir_ls",
        "pg_execute_server_program",
        "pg_read_server_files",
        # PostgreSQL: configuration, signalling, server control
        "set_config",
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_switch_wal",
        "pg_switch_xlog",
        "pg_create_restore_point",
        "pg_promote",
        "pg_wal_replay_pause",
        "pg_wal_replay_resume",
        "pg_xlog_replay_pause",
        "pg_xlog_replay_resume",
        "pg_backup_start",
        "pg_backup_stop",
        "pg_start_backup",
        "pg_stop_backup",
        "pg_log_backend_memory_contexts",
        "pg_import_system_collations",
        "pg_notify",
        "pg_logical_emit_message",
        "pg_replication_slot_advance",
        "pg_sync_replication_slots",
        "pg_log_standby_snapshot",
        "pg_stat_statements_reset",
        "pg_nextoid",
        # PostgreSQL: index maintenance functions write to indexes
        "brin_summarize_new_values",
        "brin_summarize_range",
        "brin_desummarize_range",
        "gin_clean_pending_list",
        # pg_cron: schedules arbitrary SQL outside this transaction
        "schedule",
        "schedule_in_database",
        "unschedule",
        "alter_job",
        # PostgreSQL: sequences / transaction ids (they write or assign an xid).
        # currval/lastval only read session state and stay allowed.
        "nextval",
        "setval",
        "txid_current",
        "pg_current_xact_id",
        # PostgreSQL: run a query given as a string -> bypasses table checks
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "table_to_xml",
        "table_to_xmlschema",
        "table_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "schema_to_xml",
        "schema_to_xmlschema",
        "schema_to_xml_and_xmlschema",
        "database_to_xml",
        "database_to_xmlschema",
        "database_to_xml_and_xmlschema",
        "ts_stat",
        # PostgreSQL large objects without the lo_ prefix
        "loread",
        "lowrite",
        # pgsql-http
        "http",
        # MySQL
        "load_file",
        "sleep",
        "benchmark",
        "get_lock",
        "release_lock",
        "release_all_locks",
        "sys_exec",
        "sys_eval",
        "sys_get",
        "sys_set",
        "master_pos_wait",
        "source_pos_wait",
        "wait_for_executed_gtid_set",
        "wait_until_sql_thread_after_gtids",
        # SQLite (core, fileio, zipfile and shell extensions)
        "load_extension",
        "writefile",
        "readfile",
        "edit",
        "fts3_tokenizer",
        "fsdir",
        "zipfile",
    }
)

# Whole families, denied by prefix.
_DENIED_FUNCTION_PREFIXES = (
    "lo_",  # lo_import, lo_export, lo_get, lo_put, lo_unlink, lo_from_bytea, ...
    "dblink",  # dblink, dblink_exec, dblink_connect, ...
    "pg_read_",  # pg_read_file, pg_read_binary_file
    "pg_ls_",  # pg_ls_dir, pg_ls_logdir, pg_ls_waldir, pg_ls_tmpdir, ...
    "pg_file_",  # adminpack: pg_file_write, pg_file_rename, pg_file_unlink, ...
    "pg_sleep",  # pg_sleep, pg_sleep_for, pg_sleep_until
    "pg_advisory_",
    "pg_try_advisory_",
    "pg_replication_origin_",
    "pg_logical_slot_",  # consumes / exposes replication changes of all tables
    "pg_stat_reset",
    "pg_background_",  # runs arbitrary SQL in a background worker
    "http_",  # pgsql-http / pg_net
    "binary_upgrade_",  # pg_upgrade internals
)


def _function_name_denied(name: str) -> bool:
    return (
        name in _DENIED_FUNCTIONS
        or name.startswith(_DENIED_FUNCTION_PREFIXES)
        # pg_create_physical_replication_slot, pg_drop_replication_slot, ...
        or (name.startswith("pg_") and name.endswith("_replication_slot"))
    )


# Node types denied anywhere in the tree -> reason. Checked with issubclass, so
# base classes (exp.DML, exp.DDL) cover their subclasses.
_WRITE = "write statement"
_CONTROL = "statement not allowed"
_DENIED_NODE_TYPES: tuple[tuple[type[exp.Expr], str], ...] = (
    (exp.Insert, f"{_WRITE}: INSERT"),
    (exp.Update, f"{_WRITE}: UPDATE"),
    (exp.Delete, f"{_WRITE}: DELETE"),
    (exp.Merge, f"{_WRITE}: MERGE"),
    (exp.Copy, f"{_WRITE}: COPY"),
    (exp.Create, f"{_WRITE}: CREATE"),
    (exp.DML, f"{_WRITE}: DML"),
    (exp.DDL, f"{_WRITE}: DDL"),
    (exp.Drop, f"{_WRITE}: DROP"),
    (exp.Alter, f"{_WRITE}: ALTER"),
    (exp.AlterSession, f"{_WRITE}: ALTER"),
    (exp.TruncateTable, f"{_WRITE}: TRUNCATE"),
    (exp.LoadData, f"{_WRITE}: LOAD DATA"),
    (exp.Comment, f"{_WRITE}: COMMENT"),
    (exp.Refresh, f"{_WRITE}: REFRESH"),
    (exp.Cache, f"{_WRITE}: CACHE"),
    (exp.Uncache, f"{_WRITE}: UNCACHE"),
    (exp.SwapTable, f"{_WRITE}: SWAP"),
    (exp.Put, f"{_WRITE}: PUT"),
    (exp.Export, f"{_WRITE}: EXPORT"),
    (exp.Install, f"{_WRITE}: INSTALL"),
    (exp.Returning, f"{_WRITE}: RETURNING"),
    (exp.OnConflict, f"{_WRITE}: ON CONFLICT"),
    (exp.MultitableInserts, f"{_WRITE}: INSERT"),
    (exp.ConditionalInsert, f"{_WRITE}: INSERT"),
    # SELECT ... INTO new_table / INTO @var / INTO OUTFILE creates or writes.
    (exp.Into, "SELECT INTO not allowed"),
    # FOR UPDATE / FOR SHARE / FOR [NO] KEY ... / LOCK IN SHARE MODE take row
    # locks that block the company's writers.
    (exp.Lock, "locking clause not allowed"),
    (exp.LockingStatement, f"{_CONTROL}: LOCKING"),
    # sqlglot's fallback for statements it does not understand (EXPLAIN,
    # CALL, DO, VACUUM, SET ROLE, REPLACE INTO, ...).
    (exp.Command, "unsupported statement"),
    # Optimizer hints can change session limits (MySQL SET_VAR /
    # MAX_EXECUTION_TIME, pg_hint_plan Set(statement_timeout 0)).
    (exp.Hint, "optimizer hint not allowed"),
    (exp.NextValueFor, "function not allowed: next value for"),
    (exp.Set, f"{_CONTROL}: SET"),
    (exp.SetItem, f"{_CONTROL}: SET"),
    (exp.Transaction, f"{_CONTROL}: BEGIN"),
    (exp.Commit, f"{_CONTROL}: COMMIT"),
    (exp.Rollback, f"{_CONTROL}: ROLLBACK"),
    (exp.Pragma, f"{_CONTROL}: PRAGMA"),
    (exp.Attach, f"{_CONTROL}: ATTACH"),
    (exp.Detach, f"{_CONTROL}: DETACH"),
    (exp.Use, f"{_CONTROL}: USE"),
    (exp.Grant, f"{_CONTROL}: GRANT"),
    (exp.Revoke, f"{_CONTROL}: REVOKE"),
    (exp.Analyze, f"{_CONTROL}: ANALYZE"),
    (exp.Kill, f"{_CONTROL}: KILL"),
    (exp.Declare, f"{_CONTROL}: DECLARE"),
    (exp.Show, f"{_CONTROL}: SHOW"),
    (exp.Describe, f"{_CONTROL}: DESCRIBE"),
    (exp.Summarize, f"{_CONTROL}: SUMMARIZE"),
    (exp.Get, f"{_CONTROL}: GET"),
    # Statement nodes new in sqlglot 30 (T-SQL EXEC, procedural blocks, ...).
    # They cannot reach an allowed root in the supported dialects today, but a
    # node that runs SQL must be denied wherever a future parser puts it.
    (exp.Execute, f"{_CONTROL}: EXECUTE"),  # also ExecuteSql
    (exp.StoredProcedure, f"{_CONTROL}: PROCEDURE"),
    (exp.Block, f"{_CONTROL}: BLOCK"),
    (exp.WhileBlock, f"{_CONTROL}: BLOCK"),
    (exp.IfBlock, f"{_CONTROL}: BLOCK"),
    (exp.LoopBlock, f"{_CONTROL}: BLOCK"),
    (exp.RepeatBlock, f"{_CONTROL}: BLOCK"),
    (exp.CaseStatement, f"{_CONTROL}: BLOCK"),
    (exp.EndStatement, f"{_CONTROL}: END"),
    (exp.Undrop, f"{_WRITE}: UNDROP"),
    (exp.ConnectTo, f"{_CONTROL}: CONNECT"),
    (exp.Disconnect, f"{_CONTROL}: DISCONNECT"),
)


# What the walk must do with a node beyond the per-type verdict.
_KIND_PLAIN, _KIND_ANONYMOUS_FUNC, _KIND_TABLE, _KIND_ASSIGNMENT, _KIND_WITH = range(5)


@functools.cache
def _classify(node_type: type[exp.Expr]) -> tuple[str | None, int]:
    """(reason to deny every node of this type or None, per-node work kind).

    Cached per type: the issubclass scans run once per type per process, so
    the walk pays one dict lookup per node for everything decidable by type,
    including typed functions (their names are fixed by their class)."""
    for denied_type, reason in _DENIED_NODE_TYPES:
        if issubclass(node_type, denied_type):
            return reason, _KIND_PLAIN
    if issubclass(node_type, (exp.Anonymous, exp.AnonymousAggFunc)):
        # The written name lives on the node (str or quoted Identifier).
        return None, _KIND_ANONYMOUS_FUNC
    if issubclass(node_type, exp.Func):
        for name in node_type.sql_names():
            if _function_name_denied(name.lower()):
                return f"function not allowed: {name.lower()}", _KIND_PLAIN
        return None, _KIND_PLAIN
    if issubclass(node_type, exp.Table):
        return None, _KIND_TABLE
    if issubclass(node_type, exp.PropertyEQ):
        return None, _KIND_ASSIGNMENT
    if issubclass(node_type, exp.With):
        return None, _KIND_WITH
    return None, _KIND_PLAIN


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


def _lexical_denial(sql: str, tokens: list[Token], dialect: str) -> str | None:
    if _BACKSLASH_QUOTE.search(sql):
        return "ambiguous backslash-escaped quote (use doubled quotes)"
    if _HINT_COMMENT.search(sql):
        return "optimizer hint not allowed"
    if dialect == "postgres" and _PG_UNICODE_ESCAPE.search(sql):
        return "unicode escape strings/identifiers not allowed"
    if dialect == "mysql" and _MYSQL_HIDDEN_CODE.search(_text_between_tokens(sql, tokens)):
        return "executable or ambiguous comment not allowed"
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
    TokenType.TABLE: 'TABLE query shorthand not allowed: write SELECT * FROM ... (quote a column named "table")',
    TokenType.PIPE_GT: "pipe syntax not allowed",
}


def _shorthand_denial(tokens: list[Token]) -> str | None:
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


def _parse_error_reason(error: Exception) -> str:
    if isinstance(error, ParseError) and error.errors:
        first = error.errors[0]
        detail = f"{first.get('description')} (line {first.get('line')}, col {first.get('col')})"
    else:
        # TokenError messages embed the SQL; keep the reason short.
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"parse error: {detail[:160]}"


def _root_denial(statement: exp.Expr, first_token: Token | None) -> str | None:
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
        return f"not a query: {first_word}"
    if isinstance(node, exp.Command):
        return f"unsupported statement: {str(node.this).upper()}"
    type_denial, _ = _classify(type(node))
    if type_denial:
        return type_denial
    return f"not a query: {first_word}"


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
    """One pass over a parsed statement: first denial reason + table names."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.denial: str | None = None
        self.tables: set[str] = set()

    def _deny(self, reason: str) -> None:
        if self.denial is None:  # keep the first reason found
            self.denial = reason

    def run(self, root: exp.Expr) -> None:
        # Explicit stack instead of recursion: long OR chains / deep nesting
        # must not hit Python's recursion limit. Each entry carries the set of
        # CTE names visible at that node. Children are visited in reverse
        # order; the walk is still deterministic, which is all that matters
        # for the (first) reason.
        stack: list[tuple[exp.Expr, frozenset[str]]] = [(root, frozenset())]
        while stack:
            node, ctes = stack.pop()
            reason, kind = _classify(type(node))
            if reason:
                self._deny(reason)
            if kind == _KIND_ANONYMOUS_FUNC:
                name = node.name.lower()
                if _function_name_denied(name):
                    self._deny(f"function not allowed: {name}")
            elif kind == _KIND_TABLE:
                self._record_table(node, ctes)
            elif kind == _KIND_ASSIGNMENT:
                if isinstance(node.this, (exp.Parameter, exp.SessionParameter)):
                    self._deny("variable assignment not allowed")  # MySQL @a := 1
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
            return  # table function: generate_series(...), json_each(...), ...
        if not isinstance(this, (exp.Identifier, exp.Dot)):
            self._deny(f"unsupported table reference: {table.sql(self.dialect)[:80]}")
            return
        parts = table.parts
        if not all(isinstance(part, exp.Identifier) for part in parts):
            self._deny(f"unsupported table reference: {table.sql(self.dialect)[:80]}")
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
        return SqlVerdict(False, f"internal error: {type(error).__name__}", ())


def _analyse(sql: str, dialect: str) -> SqlVerdict:
    if not isinstance(sql, str):
        return SqlVerdict(False, "sql must be a string", ())
    parser_dialect = _DIALECTS[dialect]
    try:
        tokens = parser_dialect.tokenize(sql)
        parsed = parser_dialect.parser().parse(tokens, sql)
    except (ParseError, TokenError) as error:
        return SqlVerdict(False, _parse_error_reason(error), ())

    # Empty chunks (None) and trailing comments after the last `;`
    # (exp.Semicolon) are not statements.
    statements = [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]

    walk = _Walk(dialect)
    for statement in statements:
        walk.run(statement)
    tables = tuple(sorted(walk.tables))

    # Both counts must be 1: the tokens say what the server will run, the
    # parser output what the walk has checked.
    count = _count_statements(tokens)
    if count == 0 or not statements:
        return SqlVerdict(False, "empty statement", tables)
    if count != 1 or len(statements) != 1:
        return SqlVerdict(False, f"expected exactly one statement, got {max(count, len(statements))}", tables)
    first_token = next((t for t in tokens if t.token_type != _SEMICOLON), None)
    # Most specific reason first; the TABLE-keyword rule also trips on
    # `INTO TEMPORARY TABLE`, which the walk names better.
    reason = (
        _lexical_denial(sql, tokens, dialect)
        or _root_denial(statements[0], first_token)
        or walk.denial
        or _shorthand_denial(tokens)
    )
    if reason:
        return SqlVerdict(False, reason, tables)
    return SqlVerdict(True, "", tables)
