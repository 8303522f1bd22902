"""What a playbook is made of, checked: its typed parameters, the values a
run is given for them, and its nodes with their templates. No database.

Templates are `string.Template` (``$name`` / ``${name}``): a parameter's
name or an earlier node's key; nothing else can be evaluated in them. An
earlier node's output is what that node's run produced as the model saw it
(masked: tokens, not values), so a later node receives tokens too.
"""

from __future__ import annotations

import datetime
import json
import re
from decimal import Decimal, InvalidOperation
from string import Template
from typing import Any

from django.utils.translation import gettext as _

PARAMETER_KINDS = ("text", "number", "date", "choice")
NODE_KINDS = ("agent", "tool")
MAX_PARAMETERS = 20
MAX_NODES = 20
MAX_TEXT = 4000
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class SpecError(ValueError):
    """What is wrong, for the person editing or starting a playbook (translated)."""


def check_parameters(parameters: Any) -> list[dict]:
    """The parameter definitions, normalised; raises SpecError."""
    if not isinstance(parameters, list) or len(parameters) > MAX_PARAMETERS:
        raise SpecError(_("Parameters must be a list of at most %(max)d.") % {"max": MAX_PARAMETERS})
    seen: set[str] = set()
    out = []
    for item in parameters:
        if not isinstance(item, dict):
            raise SpecError(_("Each parameter must be an object."))
        name = str(item.get("name") or "")
        if not _NAME.match(name) or name in seen:
            raise SpecError(
                _('Parameter name "%(name)s" must be unique, lower-case letters, digits and _.') % {"name": name}
            )
        seen.add(name)
        kind = item.get("kind", "text")
        if kind not in PARAMETER_KINDS:
            raise SpecError(_("Parameter %(name)s has an unknown type.") % {"name": name})
        choices = [str(c) for c in item.get("choices") or []]
        if kind == "choice" and not choices:
            raise SpecError(_("Parameter %(name)s needs its choices.") % {"name": name})
        out.append(
            {
                "name": name,
                "label": str(item.get("label") or name)[:200],
                "kind": kind,
                "required": bool(item.get("required", True)),
                "choices": choices,
                "default": item.get("default"),
            }
        )
    return out


def parameter_values(parameters: list[dict], given: Any) -> dict[str, str]:
    """The values a run is started with, checked against the definitions;
    as text for the templates. Raises SpecError naming the parameter."""
    given = given if isinstance(given, dict) else {}
    unknown = set(given) - {p["name"] for p in parameters}
    if unknown:
        raise SpecError(_("Unknown parameter: %(name)s.") % {"name": sorted(unknown)[0]})
    values: dict[str, str] = {}
    for p in parameters:
        raw = given.get(p["name"], p.get("default"))
        if raw is None or str(raw).strip() == "":
            if p["required"]:
                raise SpecError(_("%(label)s is required.") % {"label": p["label"]})
            values[p["name"]] = ""
            continue
        values[p["name"]] = _value(p, raw)
    return values


def _value(p: dict, raw: Any) -> str:
    text = str(raw).strip()
    if p["kind"] == "number":
        try:
            number = Decimal(text)
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite():
            raise SpecError(_("%(label)s must be a number.") % {"label": p["label"]})
        return text
    if p["kind"] == "date":
        try:
            return datetime.date.fromisoformat(text).isoformat()
        except ValueError:
            raise SpecError(_("%(label)s must be a date (YYYY-MM-DD).") % {"label": p["label"]}) from None
    if p["kind"] == "choice":
        if text not in p["choices"]:
            raise SpecError(_("%(label)s must be one of its choices.") % {"label": p["label"]})
        return text
    if len(text) > MAX_TEXT:
        raise SpecError(_("%(label)s is too long.") % {"label": p["label"]})
    return text


def check_nodes(nodes: Any, parameters: list[dict]) -> list[dict]:
    """The nodes, normalised: each template names only parameters and
    earlier nodes. Raises SpecError. (Whether a tool node's tool is visible
    to a run is asked when it runs, by the executor, and when the playbook
    is saved: playbooks.services.)"""
    if not isinstance(nodes, list) or not nodes or len(nodes) > MAX_NODES:
        raise SpecError(_("A playbook needs 1 to %(max)d steps.") % {"max": MAX_NODES})
    known = {p["name"] for p in parameters}
    # Each step's key by position, to name the step a template refers to
    # when it comes later (the editor reorders steps; a moved step may now
    # come before the output it uses, which does not exist when it runs).
    positions = {
        str(node.get("key") or f"step{index + 1}"): index for index, node in enumerate(nodes) if isinstance(node, dict)
    }
    out = []
    for index, node in enumerate(nodes):
        if not isinstance(node, dict) or node.get("kind") not in NODE_KINDS:
            raise SpecError(_("Step %(n)d has an unknown kind.") % {"n": index + 1})
        key = str(node.get("key") or f"step{index + 1}")
        if not _NAME.match(key) or key in known:
            raise SpecError(_("Step %(n)d needs a unique key.") % {"n": index + 1})
        if node["kind"] == "agent":
            prompt = str(node.get("prompt") or "").strip()
            if not prompt or len(prompt) > MAX_TEXT:
                raise SpecError(_("Step %(n)d needs a prompt.") % {"n": index + 1})
            _check_template(prompt, known, index, positions)
            out.append({"key": key, "kind": "agent", "prompt": prompt})
        else:
            tool = str(node.get("tool") or "").strip()
            arguments = node.get("arguments") if isinstance(node.get("arguments"), dict) else None
            if not tool or arguments is None:
                raise SpecError(_("Step %(n)d needs a tool and its arguments.") % {"n": index + 1})
            for text in _strings(arguments):
                _check_template(text, known, index, positions)
            out.append({"key": key, "kind": "tool", "tool": tool, "arguments": arguments})
        known.add(key)
    return out


def _check_template(text: str, known: set[str], index: int, positions: dict[str, int]) -> None:
    template = Template(text)
    if not template.is_valid():
        raise SpecError(_("Step %(n)d has a malformed $ placeholder (write $$ for a dollar sign).") % {"n": index + 1})
    missing = [name for name in template.get_identifiers() if name not in known]
    if missing and positions.get(missing[0], -1) > index:
        raise SpecError(
            _(
                "Step %(n)d uses the output of step %(later)d (%(name)s), which runs only after it:"
                " a step can use the outputs of the steps above it."
            )
            % {"n": index + 1, "later": positions[missing[0]] + 1, "name": missing[0]}
        )
    if missing:
        raise SpecError(
            _("Step %(n)d refers to %(name)s, which is not a parameter or an earlier step.")
            % {"n": index + 1, "name": missing[0]}
        )


def _strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def render(text: str, values: dict[str, str]) -> str:
    return Template(text).substitute(values)


def render_arguments(arguments: Any, values: dict[str, str]) -> Any:
    if isinstance(arguments, str):
        return render(arguments, values)
    if isinstance(arguments, dict):
        return {k: render_arguments(v, values) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [render_arguments(v, values) for v in arguments]
    return arguments


def arguments_json(arguments: Any, values: dict[str, str]) -> str:
    return json.dumps(render_arguments(arguments, values), ensure_ascii=False)
