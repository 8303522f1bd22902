"""Why a tool call was refused, in the words of the person reading it.

The checks (SQL guard, table grants, personal-data row counts, the
connection's account, argument checks) and the executor state their reasons
in one fixed English form: that form is what the audit trail records, what
admins search for and what tests compare. A person reads a reason in their
own language: `localize` turns a reason of that form into the active
language, keeping what it quotes from the SQL (keywords, function, table and
privilege names) as written, so the result is never half one language and
half the other. Text it does not recognise (e.g. a reason a caller has
already translated) is kept; a known reason inside it is still translated.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext
from django.utils.translation import gettext_noop as N_

# (pattern over the whole reason, message template). A group named `inner`
# holds a reason of its own and is localized in turn; other groups are SQL,
# names or numbers and are kept as written. First match wins.
_RULES: list[tuple[str, str | None]] = [
    # --- What the executor tells the model, around a reason -------------------
    # (None: the inner reason alone says it; "refused" adds nothing for people.)
    (r"refused: (?P<inner>.+)", None),
    (r"not a read-only query: (?P<inner>.+)", N_("not a read-only query: %(inner)s")),
    (r"query failed: (?P<message>.+)", N_("the database reported an error: %(message)s")),
    (r"query failed", N_("the query failed")),
    (r"search failed", N_("the search failed")),
    (r"no permission to read table\(s\): (?P<tables>.+)", N_("you have no permission to read %(tables)s")),
    (
        r"personal data would decide how many rows this query returns; count or aggregate instead",
        N_("personal data would decide how many rows this query returns; count or aggregate instead"),
    ),
    (r"the call could not be checked and was refused", N_("the call could not be checked, so it was refused")),
    (
        r"arguments longer than (?P<limit>\d+) characters; send a shorter call",
        N_("the call is longer than %(limit)s characters; send a shorter one"),
    ),
    (r"arguments longer than (?P<limit>\d+) characters", N_("the call is longer than %(limit)s characters")),
    (r"unknown tool: (?P<name>.*)", N_("unknown tool: %(name)s")),
    (r"unknown tool", N_("unknown tool")),
    (r"arguments are not valid JSON", N_("the call's arguments are not valid JSON")),
    (r"arguments must be a JSON object", N_("the call's arguments must be a JSON object")),
    (r"sql is empty", N_("the SQL is empty")),
    (r"connection is required", N_("name a connection")),
    (r"collection is required", N_("name a document collection")),
    (r"no connection of that name is available", N_("no connection of that name is available")),
    (r"no collection of that name is available", N_("no document collection of that name is available")),
    (r"query is empty", N_("the search words are empty")),
    (r"query is longer than (?P<limit>\d+) characters", N_("the search words are longer than %(limit)s characters")),
    (
        r"the query with the masked values filled in did not pass the checks; .*",
        N_("with the masked values filled in, the query did not pass the checks; compare with the value differently"),
    ),
    (
        r"the statement could not be parsed for re-identification",
        N_("the SQL could not be parsed to fill in masked values"),
    ),
    (
        r"re-identification needs exactly one statement",
        N_("masked values can only be filled into exactly one statement"),
    ),
    (
        r"the re-identified statement could not be rendered",
        N_("the SQL with the masked values filled in could not be written"),
    ),
    (
        r"the re-identified statement does not read back as written",
        N_("the SQL with the masked values filled in does not read back as written"),
    ),
    (
        r"the connection's account could not be checked \((?P<code>[^)]*)\)",
        N_("the connection's database account could not be checked (%(code)s)"),
    ),
    (
        r"the connection's database account may do more than read \((?P<risks>.*)\); "
        r"an admin must give it an account with only SELECT on its schemas",
        N_(
            "the connection's database account may do more than read (%(risks)s); "
            "an admin must give it an account with only SELECT on its schemas"
        ),
    ),
    # --- The SQL guard (governance.sql.guard) ---------------------------------
    (r"write statement: (?P<sql>.+)", N_("writing is not allowed (%(sql)s)")),
    (r"statement not allowed: (?P<sql>.+)", N_("this statement is not allowed (%(sql)s)")),
    (r"SELECT INTO not allowed", N_("SELECT INTO is not allowed")),
    (r"locking clause not allowed", N_("locking clauses (FOR UPDATE, FOR SHARE) are not allowed")),
    (r"unsupported statement: (?P<sql>.+)", N_("unsupported statement (%(sql)s)")),
    (r"unsupported statement", N_("unsupported statement")),
    (r"optimizer hint not allowed", N_("optimizer hints are not allowed")),
    (r"function not allowed: (?P<sql>.+)", N_("function not allowed: %(sql)s")),
    (r"function not allowed", N_("a function that is not allowed")),
    (r"operator not allowed: (?P<sql>.+)", N_("operator not allowed: %(sql)s")),
    (r"unsupported expression: (?P<sql>.+)", N_("unsupported expression: %(sql)s")),
    (r"server or session variable not allowed", N_("server and session variables are not allowed")),
    (r"placeholder not allowed", N_("placeholders are not allowed")),
    (r"variable assignment not allowed", N_("variable assignments are not allowed")),
    (
        r"ambiguous backslash-escaped quote \(use doubled quotes\)",
        N_("ambiguous backslash-escaped quote; double the quote instead"),
    ),
    (r"unicode escape strings/identifiers not allowed", N_("Unicode escape strings and identifiers are not allowed")),
    (r"executable or ambiguous comment not allowed", N_("executable or ambiguous comments are not allowed")),
    (
        r"TABLE query shorthand not allowed: .*",
        N_('the TABLE shorthand is not allowed: write SELECT * FROM … (quote a column named "table")'),
    ),
    (r"pipe syntax not allowed", N_("pipe syntax (|>) is not allowed")),
    (
        r"parse error: .*\(line (?P<line>\d+), col (?P<col>\d+)\)",
        N_("the SQL could not be parsed (line %(line)s, column %(col)s)"),
    ),
    (r"parse error: .*", N_("the SQL could not be parsed")),
    (r"not a query: (?P<sql>.+)", N_("not a query (%(sql)s)")),
    (r"not a query: ?", N_("not a query")),
    (r"unsupported table reference: (?P<sql>.+)", N_("unsupported table reference: %(sql)s")),
    (r"empty statement", N_("the SQL is empty")),
    (r"expected exactly one statement, got (?P<count>\d+)", N_("send exactly one statement (this has %(count)s)")),
    (r"internal error: .*", N_("the SQL could not be checked")),
    (r"sql must be a string", N_("the SQL must be a string")),
]
_COMPILED = [(re.compile(pattern, re.DOTALL), template) for pattern, template in _RULES]


def localize(reason: str) -> str:
    """`reason` (the checks' fixed English form) in the active language."""
    text = str(reason).strip()
    for pattern, template in _COMPILED:
        match = pattern.fullmatch(text)
        if match is None:
            continue
        values = {name: (localize(value) if name == "inner" else value) for name, value in match.groupdict().items()}
        if template is None:
            return values["inner"]
        return gettext(template) % values if values else gettext(template)
    # Not ours as a whole: perhaps "<already translated>: <a reason of ours>".
    head, sep, tail = text.partition(": ")
    if sep and tail:
        return f"{head}: {localize(tail)}"
    return text
