"""What a change to a role's grants opened and closed (pure).

A grant is a set of atoms: a whole database, one table of a database, one
document collection, one connector (allowed as a whole). Opened = atoms after minus before; closed = before minus
after. Moving a grant from "whole database" to chosen tables therefore reads
as: closed the whole database, opened those tables.
"""

from __future__ import annotations

from dataclasses import dataclass

WHOLE = "*"


@dataclass(frozen=True)
class RoleGrants:
    databases: dict[str, frozenset[str]]  # connection name -> {WHOLE} or table names
    collections: frozenset[str]
    members: frozenset[str]
    reveal_pii: bool = False  # members may reveal masked personal data
    connectors: frozenset[str] = frozenset()


def _atoms(grants: RoleGrants) -> set[tuple[str, str, str]]:
    atoms: set[tuple[str, str, str]] = set()
    for connection, tables in grants.databases.items():
        for table in tables:
            atoms.add(("db", connection, table))
    for collection in grants.collections:
        atoms.add(("collection", collection, ""))
    for connector in grants.connectors:
        atoms.add(("connector", connector, ""))
    if grants.reveal_pii:
        atoms.add(("permission", "reveal_personal_data", ""))
    return atoms


def grant_atoms(grants: RoleGrants) -> set[tuple[str, str, str]]:
    """The atoms a role's grants are made of (governance.impact compares members' holdings)."""
    return _atoms(grants)


def _describe(atom: tuple[str, str, str]) -> dict:
    kind, resource, table = atom
    if kind == "collection":
        return {"kind": "document_collection", "resource": resource}
    if kind == "connector":
        return {"kind": "connector", "resource": resource}
    if kind == "permission":
        return {"kind": "permission", "resource": resource}
    if table == WHOLE:
        return {"kind": "db_connection", "resource": resource, "scope": "whole_database"}
    return {"kind": "db_connection", "resource": resource, "scope": "table", "table": table}


def grant_changes(before: RoleGrants, after: RoleGrants) -> dict:
    """{"opened": [...], "closed": [...], "members_added": [...], "members_removed": [...]}, sorted."""
    old, new = _atoms(before), _atoms(after)
    return {
        "opened": [_describe(a) for a in sorted(new - old)],
        "closed": [_describe(a) for a in sorted(old - new)],
        "members_added": sorted(after.members - before.members),
        "members_removed": sorted(before.members - after.members),
    }


def has_changes(changes: dict) -> bool:
    return any(changes[key] for key in ("opened", "closed", "members_added", "members_removed"))


EMPTY = RoleGrants(databases={}, collections=frozenset(), members=frozenset())
