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

from django.utils.translation import gettext, gettext_noop

# (pattern over the whole reason, message template). A group named `inner`
# holds a reason of its own and is localized in turn; other groups are SQL,
# names or numbers and are kept as written. First match wins.
_RULES: list[tuple[str, str | None]] = [
    # --- What the executor tells the model, around a reason -------------------
    # (None: the inner reason alone says it; "refused" adds nothing for people.)
    (r"refused: (?P<inner>.+)", None),
    (r"not a read-only query: (?P<inner>.+)", gettext_noop("not a read-only query: %(inner)s")),
    (r"query failed: (?P<message>.+)", gettext_noop("the database reported an error: %(message)s")),
    (r"query failed", gettext_noop("the query failed")),
    (r"search failed", gettext_noop("the search failed")),
    (r"no permission to read table\(s\): (?P<tables>.+)", gettext_noop("you have no permission to read %(tables)s")),
    (
        r"personal data would decide how many rows this query returns; count or aggregate instead",
        gettext_noop("personal data would decide how many rows this query returns; count or aggregate instead"),
    ),
    (
        r"the call could not be checked and was refused",
        gettext_noop("the call could not be checked, so it was refused"),
    ),
    (
        r"arguments longer than (?P<limit>\d+) characters; send a shorter call",
        gettext_noop("the call is longer than %(limit)s characters; send a shorter one"),
    ),
    (r"arguments longer than (?P<limit>\d+) characters", gettext_noop("the call is longer than %(limit)s characters")),
    (r"unknown tool: (?P<name>.*)", gettext_noop("unknown tool: %(name)s")),
    (r"unknown tool", gettext_noop("unknown tool")),
    (r"arguments are not valid JSON", gettext_noop("the call's arguments are not valid JSON")),
    (r"arguments must be a JSON object", gettext_noop("the call's arguments must be a JSON object")),
    (r"sql is empty", gettext_noop("the SQL is empty")),
    (r"connection is required", gettext_noop("name a connection")),
    (r"collection is required", gettext_noop("name a document collection")),
    (r"no connection of that name is available", gettext_noop("no connection of that name is available")),
    (r"no collection of that name is available", gettext_noop("no document collection of that name is available")),
    (r"query is empty", gettext_noop("the search words are empty")),
    (
        r"query is longer than (?P<limit>\d+) characters",
        gettext_noop("the search words are longer than %(limit)s characters"),
    ),
    (
        r"the query with the masked values filled in did not pass the checks; .*",
        gettext_noop(
            "with the masked values filled in, the query did not pass the checks; compare with the value differently"
        ),
    ),
    (
        r"the statement could not be parsed for re-identification",
        gettext_noop("the SQL could not be parsed to fill in masked values"),
    ),
    (
        r"re-identification needs exactly one statement",
        gettext_noop("masked values can only be filled into exactly one statement"),
    ),
    (
        r"the re-identified statement could not be rendered",
        gettext_noop("the SQL with the masked values filled in could not be written"),
    ),
    (
        r"the re-identified statement does not read back as written",
        gettext_noop("the SQL with the masked values filled in does not read back as written"),
    ),
    (
        r"the connection's account could not be checked \((?P<code>[^)]*)\)",
        gettext_noop("the connection's database account could not be checked (%(code)s)"),
    ),
    (
        r"the connection's database account may do more than read \((?P<risks>.*)\); "
        r"an admin must give it an account with only SELECT on its schemas",
        gettext_noop(
            "the connection's database account may do more than read (%(risks)s); "
            "an admin must give it an account with only SELECT on its schemas"
        ),
    ),
    # --- The SQL guard (governance.sql.guard) ---------------------------------
    (r"write statement: (?P<sql>.+)", gettext_noop("writing is not allowed (%(sql)s)")),
    (r"statement not allowed: (?P<sql>.+)", gettext_noop("this statement is not allowed (%(sql)s)")),
    (r"SELECT INTO not allowed", gettext_noop("SELECT INTO is not allowed")),
    (r"locking clause not allowed", gettext_noop("locking clauses (FOR UPDATE, FOR SHARE) are not allowed")),
    (r"unsupported statement: (?P<sql>.+)", gettext_noop("unsupported statement (%(sql)s)")),
    (r"unsupported statement", gettext_noop("unsupported statement")),
    (r"optimizer hint not allowed", gettext_noop("optimizer hints are not allowed")),
    (r"setting not readable: (?P<sql>.+)", gettext_noop("this setting cannot be read: %(sql)s")),
    (r"sampling method not allowed: (?P<sql>.+)", gettext_noop("sampling method not allowed: %(sql)s")),
    (r"sampling clause not allowed: (?P<sql>.+)", gettext_noop("sampling clause not allowed: %(sql)s")),
    (
        r"write a JSON arrow that is a function's argument in parentheses: .*",
        gettext_noop("write a JSON arrow that is a function's argument in parentheses, e.g. f((x -> 'a'), ...)"),
    ),
    (r"function not allowed: (?P<sql>.+)", gettext_noop("function not allowed: %(sql)s")),
    (r"function not allowed", gettext_noop("a function that is not allowed")),
    (r"operator not allowed: (?P<sql>.+)", gettext_noop("operator not allowed: %(sql)s")),
    (r"unsupported expression: (?P<sql>.+)", gettext_noop("unsupported expression: %(sql)s")),
    (r"server or session variable not allowed", gettext_noop("server and session variables are not allowed")),
    (r"placeholder not allowed", gettext_noop("placeholders are not allowed")),
    (r"variable assignment not allowed", gettext_noop("variable assignments are not allowed")),
    (
        r"ambiguous backslash-escaped quote \(use doubled quotes\)",
        gettext_noop("ambiguous backslash-escaped quote; double the quote instead"),
    ),
    (
        r"unicode escape strings/identifiers not allowed",
        gettext_noop("Unicode escape strings and identifiers are not allowed"),
    ),
    (r"executable or ambiguous comment not allowed", gettext_noop("executable or ambiguous comments are not allowed")),
    (
        r"TABLE query shorthand not allowed: .*",
        gettext_noop('the TABLE shorthand is not allowed: write SELECT * FROM … (quote a column named "table")'),
    ),
    (r"pipe syntax not allowed", gettext_noop("pipe syntax (|>) is not allowed")),
    (
        r"parse error: .*\(line (?P<line>\d+), col (?P<col>\d+)\)",
        gettext_noop("the SQL could not be parsed (line %(line)s, column %(col)s)"),
    ),
    (r"parse error: .*", gettext_noop("the SQL could not be parsed")),
    (r"not a query: (?P<sql>.+)", gettext_noop("not a query (%(sql)s)")),
    (r"not a query: ?", gettext_noop("not a query")),
    (r"unsupported table reference: (?P<sql>.+)", gettext_noop("unsupported table reference: %(sql)s")),
    (r"empty statement", gettext_noop("the SQL is empty")),
    (
        r"expected exactly one statement, got (?P<count>\d+)",
        gettext_noop("send exactly one statement (this has %(count)s)"),
    ),
    (r"internal error: .*", gettext_noop("the SQL could not be checked")),
    (r"sql must be a string", gettext_noop("the SQL must be a string")),
]
_COMPILED = [(re.compile(pattern, re.DOTALL), template) for pattern, template in _RULES]


def localize(reason: str) -> str:
    """`reason` (the checks' fixed English form) in the active language."""
    text = str(reason).strip()
    # The executor's frame, already in the turn's language ("거부됨: …"):
    # dropped like its English form below, so both languages read alike.
    refused = gettext("refused: %(reason)s").partition("%(reason)s")[0]
    if refused and refused != "refused: " and text.startswith(refused):
        return localize(text[len(refused) :])
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
