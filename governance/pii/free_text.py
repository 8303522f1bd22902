"""Which unclassified columns are free text, for lineage taint.

A column nobody classified as one kind of personal data can still hold it
inside text: a memo with the odd phone number, an account in a comment, a
document in a blob. Read as itself such a column is scanned by the format
detectors; anything computed from it (a cast to binary and back, a text
search vector, a piece cut out, an aggregate) no longer looks like the value
to a detector, so lineage masks it whole (governance.pii.lineage.FREE_TEXT).

Which columns: every unclassified column whose type can hold text or bytes
(character, text, CLOB, JSON, XML, binary types), and every column whose type
is unknown (SQLite declares none; a classification stored without a type):
when in doubt, taint. Numbers, dates, booleans and the like carry no text;
nor does a text column the schema analysis found to hold only single short
words with no personal data in them (codes, statuses, dates stored as text:
`strftime('%Y-%m', ordered_on)` stays readable), the `structured` columns.

Pure module: no Django.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from governance.pii.lineage import FREE_TEXT

# Parts of a type name that can hold text or bytes, in any supported engine's
# spelling ("character varying", "varchar(40)", "longtext", "nvarchar",
# "mediumblob", "bytea", "varbinary", "jsonb", "tsvector", "citext", ...).
_TEXT_TYPE_PARTS = (
    "char",
    "text",
    "clob",
    "string",
    "json",
    "xml",
    "blob",
    "bytea",
    "binary",
    "tsvector",
    "user-defined",
)
# Types that hold no free text even where a part above matches ("character"
# is in none of them).
_NOT_TEXT_TYPES = frozenset({"enum", "set", "boolean", "bool", "bit", "uuid"})


def holds_text(data_type: str | None) -> bool:
    """Can a column of this type hold free text? Unknown (empty) types: yes.
    An array or a domain of a text type counts as text ("text[]", "ARRAY")."""
    spelled = (data_type or "").strip().lower()
    if not spelled or spelled == "array":
        return True
    base = spelled.split("(", 1)[0].strip()
    if base in _NOT_TEXT_TYPES:
        return False
    return any(part in spelled for part in _TEXT_TYPE_PARTS)


def with_free_text(
    schema: Mapping[str, Mapping[str, str | None]],
    types: Mapping[tuple[str, str], str | None],
    structured: Collection[tuple[str, str]] = frozenset(),
) -> dict[str, dict[str, str | None]]:
    """`schema` (table -> column -> kind or None) with every unclassified
    column that may hold text marked FREE_TEXT. `types`: (table, column) ->
    data type, both lowercased as in the schema; a column missing from it has
    an unknown type (marked). `structured`: columns the analysis found to
    hold no free text (not marked). A new dict: the schema given is shared."""
    marked: dict[str, dict[str, str | None]] = {}
    for table, columns in schema.items():
        marked[table] = {
            column: kind
            if kind
            else (FREE_TEXT if (table, column) not in structured and holds_text(types.get((table, column))) else None)
            for column, kind in columns.items()
        }
    return marked


def unknown_types(schema: Mapping[str, Mapping[str, str | None]], types: Mapping[tuple[str, str], str | None]) -> bool:
    """Does any unclassified column of `schema` lack a stored type?"""
    return any(
        not kind and not (types.get((table, column)) or "").strip()
        for table, columns in schema.items()
        for column, kind in columns.items()
    )
