"""Messages of the executor that reach people: refusals and failures.

A reason is kept as its English message id and parameters and rendered
twice: in the turn's language for the model (which relays it to the user;
the worker activates that language) and in English, the source language, for
the audit row, so the record reads the same whoever made the call and can be
searched by its words. Message ids are marked with gettext_noop where they
are written, so makemessages finds them.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.utils.translation import gettext


class Phrase(str):
    """A reason a check stated in its fixed English form (the SQL guard's
    "write statement: DELETE", re-identification's): recorded as written,
    put into the reader's language for the model and the person
    (governance.refusals.localize keeps the SQL it quotes), so a refusal is
    never half one language and half the other."""


class Unrecorded(str):
    """Text the model wrote (e.g. the name of an argument the tool does not
    have): the model is shown it, the audit row is not, since a name can
    carry a value as well as an argument can."""


WITHHELD = "(not recorded)"


class Reason:
    """`Reason(gettext_noop("no permission to read table(s): %(tables)s"), tables=...)`."""

    __slots__ = ("msgid", "params")

    def __init__(self, msgid: str, **params: object) -> None:
        self.msgid = msgid
        self.params: Mapping[str, object] = params

    def __repr__(self) -> str:
        return f"Reason({self.for_audit()!r})"

    def for_audit(self) -> str:
        if not self.params:
            return self.msgid
        return self.msgid % {k: _for_audit(v) for k, v in self.params.items()}

    def for_model(self) -> str:
        text = gettext(self.msgid)
        if not self.params:
            return text
        return text % {k: _for_model(v) for k, v in self.params.items()}


def _for_audit(value: object) -> object:
    if isinstance(value, Reason):
        return value.for_audit()
    if isinstance(value, Unrecorded):
        return WITHHELD
    return value


def _for_model(value: object) -> object:
    if isinstance(value, Reason):
        return value.for_model()
    if isinstance(value, Phrase):
        from governance.refusals import localize

        return localize(str(value))
    return value


class Refused(Exception):
    """A stage refused the call; nothing ran. `reason` is what the model is
    told (translated) and the audit row records (English)."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.for_audit())
        self.reason = reason


class Unavailable(Exception):
    """The visibility stage found no resource of the name the call asked for
    that this turn may use. Missing, not granted and hidden read the same to
    the model (the tool's `unavailable` reason, which never echoes the name);
    the audit row records the name asked for, and `audit_reason` (when the
    tool knows why: "connector hidden from this tier") instead of those words.
    `audit_reason` is a fixed English phrase, never anything the model wrote."""

    def __init__(self, asked: str, *, audit_reason: str = "") -> None:
        super().__init__(asked)
        self.asked = asked
        self.audit_reason = audit_reason


class ToolFailed(Exception):
    """The tool ran and failed. `reason` is value-free (the pipeline still
    masks it): it goes to the audit outcome and, after the tool's own
    failure words, to the model."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
