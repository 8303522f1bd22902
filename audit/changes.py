"""The before and after of what a change changed, for its audit record.

A governed model names its recorded fields once (a `Fields` value); three
sorts, so a record never holds a secret:

* plain fields: their values, before and after;
* secret fields (a password hash, a DSN, an encrypted value): only that they
  changed (`secrets_changed`), never a value;
* keyed fields (a mapping of names to secrets, e.g. header name -> the
  environment variable holding its value): the names, before and after; a
  changed value under the same name only as `secrets_changed`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fields:
    plain: tuple[str, ...] = ()
    secret: tuple[str, ...] = ()
    keyed: tuple[str, ...] = ()

    @property
    def all(self) -> tuple[str, ...]:
        return self.plain + self.secret + self.keyed


def json_value(value: Any) -> Any:
    """A value the JSON column holds and a reader can compare."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in sorted(value.items(), key=lambda i: str(i[0]))}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted(json_value(item) for item in value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    return str(value)


def change_record(before: dict | None, after: dict | None, fields: Fields) -> dict:
    """{"before": {...}, "after": {...}, "secrets_changed": [...]} of the
    fields that differ. `before` None: a creation (every field after);
    `after` None: a deletion (every field before). Empty dicts: no change."""
    old, new = before or {}, after or {}
    record: dict[str, Any] = {"before": {}, "after": {}}
    secrets: list[str] = []
    for name in fields.plain:
        a, b = json_value(old.get(name)), json_value(new.get(name))
        if before is None or after is None or a != b:
            if before is not None:
                record["before"][name] = a
            if after is not None:
                record["after"][name] = b
    for name in fields.secret:
        # Whether it is set, and whether it changed: never the value.
        if before is None or after is None or old.get(name) != new.get(name):
            secrets.append(name)
            if before is not None:
                record["before"][name] = _set(old.get(name))
            if after is not None:
                record["after"][name] = _set(new.get(name))
    for name in fields.keyed:
        a, b = dict(old.get(name) or {}), dict(new.get(name) or {})
        if before is None or after is None or sorted(a) != sorted(b):
            if before is not None:
                record["before"][name] = sorted(map(str, a))
            if after is not None:
                record["after"][name] = sorted(map(str, b))
        if any(a[key] != b[key] for key in a.keys() & b.keys()):
            secrets.append(name)
    if secrets:
        record["secrets_changed"] = sorted(secrets)
    return record


def has_change(record: dict) -> bool:
    return bool(record.get("before") or record.get("after") or record.get("secrets_changed"))


def _set(value: Any) -> str:
    return "set" if value else "unset"
