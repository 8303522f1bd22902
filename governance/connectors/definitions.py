"""Connector tool definitions: the pin (hash), the name the model sees, and
what of a server's text reaches the model (pure, no Django).

A server's tool list is untrusted input. Its description and input schema go
into the prompt, so a server that swaps a harmless description for an
instruction would talk straight to the model: the definition is pinned by a
hash at first sight, a different one waits for an admin's review, and what
is shown is cut short and stripped to the schema's structure.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

# Providers limit function names to [A-Za-z0-9_-]{1,64}: `<connector>__<slug>`
# with a connector name of at most 30 characters leaves 32 for the slug.
SEPARATOR = "__"
MODEL_NAME_MAX = 64
SLUG_MAX = 32
DESCRIPTION_MAX = 300
PROPERTY_DESCRIPTION_MAX = 120
SCHEMA_MAX_DEPTH = 6
SCHEMA_MAX_PROPERTIES = 60
SCHEMA_MAX_ENUM = 50
SCHEMA_MAX_CHARS = 8_000
# Structural JSON Schema keywords kept for the model; everything else a
# server puts into a schema (titles, examples, defaults, $comment, vendor
# keys) is dropped, so it cannot carry text past the cut-down description.
_SCHEMA_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "const",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "pattern",
        "additionalProperties",
        "anyOf",
        "oneOf",
        "allOf",
        "description",
    }
)
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_REPEATED_UNDERSCORES = re.compile(r"_{2,}")
_BLANKS = re.compile(r"\s+")


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as a server lists it. Equal definitions have equal hashes."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return definition_hash(name=self.name, description=self.description, input_schema=self.input_schema)


def definition_hash(*, name: str, description: str, input_schema: Any) -> str:
    """sha256 over the canonical JSON of the three fields that reach the model
    (key order and whitespace do not matter; any other change does)."""
    canonical = json.dumps(
        {"name": name, "description": description or "", "input_schema": input_schema},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def tool_slug(name: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """The tool's part of the model-facing name: [A-Za-z0-9_-], no double
    underscore (that separates connector and tool), at most SLUG_MAX long,
    not in `taken`. A name that had to be changed gets a short hash of the
    original, so two names that sanitise alike stay apart."""
    slug = _REPEATED_UNDERSCORES.sub("_", _SLUG_UNSAFE.sub("_", name)).strip("_-")
    if slug == name and len(slug) <= SLUG_MAX and slug not in taken:
        return slug
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()
    for width in (6, 10, 16, 24):
        candidate = f"{slug[: SLUG_MAX - width - 1]}-{digest[:width]}".strip("_-") if slug else f"t{digest[:width]}"
        if candidate not in taken:
            return candidate
    raise ValueError("no free name for the tool")  # 2**96 collisions: not reachable by accident


def model_tool_name(connector_name: str, slug: str) -> str:
    return f"{connector_name}{SEPARATOR}{slug}"[:MODEL_NAME_MAX]


def untrusted_text(text: Any, limit: int) -> str:
    """One line of at most `limit` characters of printable text: control and
    format characters (bidi overrides, zero-width) removed, blanks collapsed."""
    if not isinstance(text, str):
        return ""
    kept = "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in text)
    flat = _BLANKS.sub(" ", kept).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def description_for_model(description: Any, *, connector_name: str) -> str:
    """The server's description, cut short and labelled as the server's words
    (the model is told it is a description, not an instruction)."""
    text = untrusted_text(description, DESCRIPTION_MAX)
    label = f"[connector {connector_name}; description from the connector's server]"
    return f"{label} {text}" if text else label


def schema_for_model(schema: Any) -> dict[str, Any]:
    """The input schema reduced to its structure (see _SCHEMA_KEYWORDS), with
    descriptions cut short, depth, size and enum lengths bounded. Anything
    unusable becomes an object with no declared properties."""
    reduced = _reduce(schema, 0)
    if not isinstance(reduced, dict) or reduced.get("type") != "object":
        reduced = {"type": "object", "properties": reduced.get("properties", {}) if isinstance(reduced, dict) else {}}
    if len(json.dumps(reduced, ensure_ascii=False)) > SCHEMA_MAX_CHARS:
        return {"type": "object"}
    return reduced


def _reduce(node: Any, depth: int) -> Any:
    if depth > SCHEMA_MAX_DEPTH or not isinstance(node, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _SCHEMA_KEYWORDS:
            continue
        if key == "description":
            text = untrusted_text(value, PROPERTY_DESCRIPTION_MAX)
            if text:
                out[key] = text
        elif key == "properties" and isinstance(value, dict):
            props = {}
            for prop_name, prop in list(value.items())[:SCHEMA_MAX_PROPERTIES]:
                if isinstance(prop_name, str) and len(prop_name) <= 64:
                    props[prop_name] = _reduce(prop, depth + 1)
            out[key] = props
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _reduce(value, depth + 1)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [_reduce(v, depth + 1) for v in value[:10]]
        elif key == "enum" and isinstance(value, list):
            out[key] = [_scalar(v) for v in value[:SCHEMA_MAX_ENUM]]
        elif key == "required" and isinstance(value, list):
            out[key] = [v for v in value if isinstance(v, str) and len(v) <= 64][:SCHEMA_MAX_PROPERTIES]
        elif key == "type" and (isinstance(value, str) or isinstance(value, list)):
            out[key] = value if isinstance(value, str) else [v for v in value if isinstance(v, str)][:8]
        elif key in ("pattern", "format", "const"):
            out[key] = _scalar(value)
        elif key == "additionalProperties" and isinstance(value, bool):
            out[key] = value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value
    return out


def _scalar(value: Any) -> Any:
    if isinstance(value, str):
        return untrusted_text(value, PROPERTY_DESCRIPTION_MAX)
    if value is None or isinstance(value, bool | int | float):
        return value
    return untrusted_text(json.dumps(value, ensure_ascii=False, default=str), PROPERTY_DESCRIPTION_MAX)
