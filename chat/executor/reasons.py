"""Messages of the executor that reach people: refusals and failures.

A reason is kept as its English message id and parameters and rendered
twice: in the turn's language for the model (which relays it to the user;
the worker activates that language) and in English, the source language, for
the audit row, so the record reads the same whoever made the call and can be
searched by its words. Message ids are marked with gettext_noop where they
are written, so makemessages finds them.
"""

from __future__ import annotations

# One Reason for every check: the executor's, the SQL guard's, the grants'.
from governance.refusals import WITHHELD, Phrase, Reason, Unrecorded

__all__ = ["WITHHELD", "Phrase", "Reason", "Refused", "ToolFailed", "Unavailable", "Unrecorded"]


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
