"""A list's search term on the record, without the term.

An admin searching a list types what they look for — a phone number, a
name — and the view event of that list would keep it as typed: the audit
trail holding the very values it exists to keep out. The record keeps a
keyed fingerprint instead (HMAC with the installation's SECRET_KEY over the
case-folded, space-collapsed term), and its length. Nobody reading the
trail learns the term; a compliance officer who asks "did anyone search
for X?" types X into the events list's search, which also matches the
events whose search has X's fingerprint (AuditEventAdmin). Rotating
SECRET_KEY makes older fingerprints unmatchable (never readable)."""

from __future__ import annotations

from django.utils.crypto import salted_hmac
from django.utils.translation import gettext as _

SEARCH_PARAM = "q"  # Django admin's search parameter
_SALT = "owlai.audit.search-term"


def search_fingerprint(term: str) -> str:
    normal = " ".join(str(term).casefold().split())
    return "#" + salted_hmac(_SALT, normal, algorithm="sha256").hexdigest()[:16]


def search_in_words(term: str) -> str:
    """The search as a filter label shows it (in the active language)."""
    return _("%(count)d characters, fingerprint %(fingerprint)s") % {
        "count": len(str(term).strip()),
        "fingerprint": search_fingerprint(term),
    }


def recordable_filters(params, *, navigation=()) -> dict:
    """A list request's query parameters as its view or export event keeps
    them: navigation left out, the search term replaced by its fingerprint."""
    kept = {k: v for k, v in params.items() if k not in navigation}
    if kept.get(SEARCH_PARAM):
        kept[SEARCH_PARAM] = search_fingerprint(kept[SEARCH_PARAM])
    return kept
