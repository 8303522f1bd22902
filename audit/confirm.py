"""Impact preview and confirmation for governed changes that widen what
reaches a model or a person.

Before such a change applies, the admin sees an intermediate page (Django's
confirmation-page pattern, as for delete_selected) listing what it changes
(`Impact`, computed by the owning app: governance.impact, accounts.impact).
Cancel changes nothing; confirm applies through the existing service, and
what the page showed is recorded in the `confirmation` of that change's audit
event, in the service's transaction. Narrowing changes apply directly.

Two halves:

* `confirmation_recorded(impacts)` — while it is open, `audit_event_write`
  adds each impact's facts to the first event written for its resource (and
  event kind): the service stays as it is and the record still happens in its
  transaction.
* `ImpactConfirmAdminMixin` — the page flow for change forms and actions.

What was shown is tied to what is recorded by a digest of the facts: the page
posts it back and the change applies only if the impact computed again then
has the same digest (otherwise the page is shown again with the new figures).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

CONFIRM_FIELD = "_impact_confirmed"  # the POST field holding the digest of what was shown
TEMPLATE = "admin/confirm_impact.html"


@dataclass(frozen=True)
class ImpactLine:
    """One thing the page shows: a label and a count or a list of names."""

    key: str  # the fact it shows (the page's data-fact, for a reader and tests)
    label: Any  # a (lazy) translated string
    value: Any  # int, str, or a list of names
    warn: bool = False  # shown emphasised (e.g. values that go out in clear)

    @property
    def is_list(self) -> bool:
        return isinstance(self.value, list | tuple)


@dataclass(frozen=True)
class Impact:
    """What one change to one resource widens.

    `facts` is what is recorded (JSON: counts and names, no translated text);
    `lines` is how the page shows the same facts. `resource_id` None: the
    resource is being created (matches the first event of its kind)."""

    change: str  # e.g. "column_unmask", "resource_open", "role_grant"
    resource_kind: str
    resource_id: Any
    event_kinds: tuple[str, ...]
    title: str
    facts: dict
    lines: list[ImpactLine] = field(default_factory=list)

    def key(self) -> list:
        return [self.change, self.resource_kind, _id(self.resource_id), self.facts]


def impacts_digest(impacts: Sequence[Impact]) -> str:
    text = json.dumps([impact.key() for impact in impacts], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _id(value) -> str | None:
    return None if value is None else str(value)


# --- recording the confirmation with the change's event --------------------------------


@dataclass
class _Pending:
    impacts: list[Impact]
    digest: str
    attached: set[int] = field(default_factory=set)  # indexes of impacts already recorded


_PENDING: ContextVar[_Pending | None] = ContextVar("owlai_pending_confirmation", default=None)


@contextlib.contextmanager
def confirmation_recorded(impacts: Sequence[Impact]) -> Iterator[None]:
    """Inside: the events the change writes carry what was confirmed."""
    token = _PENDING.set(_Pending(list(impacts), impacts_digest(impacts)))
    try:
        yield
    finally:
        _PENDING.reset(token)


def confirmation_details(*, kind: str, resource_kind: str, resource_id, details: dict) -> dict:
    """`details` with the confirmation of the pending impact this event
    records (called by audit_event_write); unchanged when none matches."""
    pending = _PENDING.get()
    if pending is None:
        return details
    for index, impact in enumerate(pending.impacts):
        if index in pending.attached or kind not in impact.event_kinds or impact.resource_kind != resource_kind:
            continue
        if impact.resource_id is not None and _id(impact.resource_id) != str(resource_id):
            continue
        pending.attached.add(index)
        confirmation = {
            "change": impact.change,
            "shown": impact.facts,
            "digest": pending.digest,
            "confirmed_together": len(pending.impacts),
        }
        return {**details, "confirmation": confirmation}
    return details


# --- the admin page flow ---------------------------------------------------------------------


class ConfirmationNeeded(Exception):
    """Raised inside a change form's save to stop it (the admin's transaction
    rolls back) and show the impact page instead."""

    def __init__(self, impacts: list[Impact], *, stale: bool) -> None:
        super().__init__("confirmation needed")
        self.impacts = impacts
        self.stale = stale


def _confirmed(request, impacts: Sequence[Impact]) -> bool:
    return request.POST.get(CONFIRM_FIELD, "") == impacts_digest(impacts)


class ImpactConfirmAdminMixin:
    """A ModelAdmin whose widening changes need a confirmation.

    Change forms: define `change_impacts(request, form, formsets, change)`
    returning the impacts of saving the form as posted ([] : applies
    directly); the check runs in save_related (the form and its inlines are
    validated, nothing is saved yet). Put this mixin before
    GovernedAdminMixin, so the service runs inside `confirmation_recorded`.

    Actions: call `self.confirm_action(request, queryset, impacts, apply)`
    and return what it returns (the page, or None once applied)."""

    # Write-only fields (a replaced secret) are never echoed into the page's
    # hidden inputs: a confirmed change applies without them, and the page
    # says so (enter them again afterwards).
    impact_dropped_fields: tuple[str, ...] = ()

    def change_impacts(self, request, form, formsets, change) -> list[Impact]:
        return []

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ConfirmationNeeded as needed:
            dropped = [name for name in self.impact_dropped_fields if request.POST.get(name)]
            return self.impact_page(
                request,
                needed.impacts,
                stale=needed.stale,
                cancel_url=request.get_full_path(),
                keep=_posted(request, drop=tuple(self.impact_dropped_fields)),
                dropped=dropped,
            )

    def save_related(self, request, form, formsets, change) -> None:
        impacts = self.change_impacts(request, form, formsets, change)
        if not impacts:
            return self.apply_change(request, form, formsets, change)
        if not _confirmed(request, impacts):
            raise ConfirmationNeeded(impacts, stale=CONFIRM_FIELD in request.POST)
        with confirmation_recorded(impacts):
            return self.apply_change(request, form, formsets, change)

    def apply_change(self, request, form, formsets, change) -> None:
        """The save itself (default: the next save_related, e.g.
        GovernedAdminMixin's service call). An admin that saves in
        save_model instead overrides this (and makes save_model a no-op)."""
        return super().save_related(request, form, formsets, change)

    def confirm_action(self, request, queryset, impacts: list[Impact], apply: Callable[[], Any]):
        """An action's confirmation: no impact, or confirmed: `apply()` (with
        the confirmation recorded) and None; otherwise the page."""
        if not impacts:
            apply()
            return None
        if _confirmed(request, impacts):
            with confirmation_recorded(impacts):
                apply()
            return None
        from django.contrib.admin import helpers

        # As delete_selected does: the page posts back the chosen action and
        # the rows it was shown for (the whole selection resolved to ids).
        keep = _posted(request, drop=("index", "action", helpers.ACTION_CHECKBOX_NAME, "select_across"))
        keep += [("action", _chosen_action(request))]
        keep += [(helpers.ACTION_CHECKBOX_NAME, str(pk)) for pk in queryset.values_list("pk", flat=True)]
        return self.impact_page(
            request, impacts, stale=CONFIRM_FIELD in request.POST, cancel_url=request.get_full_path(), keep=keep
        )

    def impact_page(self, request, impacts, *, stale: bool, cancel_url: str, keep: list[tuple[str, str]], dropped=()):
        from django.template.response import TemplateResponse
        from django.utils.translation import gettext as _

        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "title": _("Confirm the change"),
            "opts": opts,
            "app_label": opts.app_label,
            "impacts": impacts,
            "digest": impacts_digest(impacts),
            "confirm_field": CONFIRM_FIELD,
            "stale": stale,
            "keep": keep,
            "cancel_url": cancel_url,
            "dropped": list(dropped),
        }
        return TemplateResponse(request, TEMPLATE, context)


def _chosen_action(request) -> str:
    # Two action bars post two `action` values; `index` says whose button it was.
    actions = request.POST.getlist("action")
    try:
        return actions[int(request.POST.get("index", 0))]
    except (ValueError, IndexError):
        return actions[0] if actions else ""


def _posted(request, *, drop: tuple[str, ...]) -> list[tuple[str, str]]:
    """The POST as (name, value) pairs to post again, less the CSRF token
    (the page renders its own) and the previous confirmation."""
    skipped = {"csrfmiddlewaretoken", CONFIRM_FIELD, *drop}
    return [(name, value) for name, values in request.POST.lists() if name not in skipped for value in values]
