"""Why a tool call was refused: a message id and its parameters.

The checks that refuse (SQL guard, table grants, personal-data row counts,
the connection's account, argument checks, the executor) state a reason as
a `Reason`: an English message id (marked with gettext_noop where it is
written, so the catalogs know it) and the values it quotes from the SQL or
the call (keywords, function, table and privilege names). A reason is
rendered twice from that structure, never parsed back from text:

- `for_audit()`: the message id filled in, untranslated. That fixed English
  form is what the audit trail records, what admins search for and what
  tests compare; a `Reason` is also a `str` of exactly that form, so code
  that compares or stores the text keeps working.
- `render()`: the message in the active language (the catalog may word it
  for people: locale/en gives "writing is not allowed (DELETE)" for
  "write statement: DELETE"), with the quoted values as written and nested
  reasons rendered in turn, so a refusal is never half one language and half
  the other.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.utils.translation import gettext


def gettext_noop(message: str) -> str:
    """Marks a msgid for extraction (Django's own needs settings at import;
    the SQL guard imports this module without Django, e.g. in bench/)."""
    return message


# The executor's frame around a refusal for the model ("refused: <reason>").
# The person's screen already says the step was refused, so `localize` drops it.
REFUSED_FRAME = gettext_noop("refused: %(reason)s")


class Unrecorded(str):
    """Text the model wrote (e.g. the name of an argument the tool does not
    have): the model is shown it, the audit row is not, since a name can
    carry a value as well as an argument can."""


WITHHELD = "(not recorded)"


class Reason(str):
    """`Reason(gettext_noop("function not allowed: %(sql)s"), sql="pg_sleep")`.

    The string value is the audit form; `msgid` and `params` are the
    structure every rendering starts from."""

    msgid: str
    params: Mapping[str, object]

    def __new__(cls, msgid: str, **params: object) -> Reason:
        self = super().__new__(cls, _fill(msgid, {k: _for_audit(v) for k, v in params.items()}))
        self.msgid = msgid
        self.params = params
        return self

    def __str__(self) -> str:
        # str(reason) (and str(exception_carrying_it)) keeps the structure.
        return self

    def __repr__(self) -> str:
        return f"Reason({self.for_audit()!r})"

    def for_audit(self) -> str:
        """The fixed English form, as a plain str."""
        return str.__str__(self)

    def render(self) -> str:
        """The message in the active language."""
        return _fill(gettext(self.msgid), {k: _rendered(v) for k, v in self.params.items()})

    # The executor's name for it: what the model reads.
    for_model = render


class Phrase(str):
    """A reason a check stated, quoted inside another: a `Reason` stays one
    (its structure is what the model and the person read); plain text (a
    fixed phrase of a module that states reasons as text, e.g.
    re-identification's) is recorded as written and rendered through the
    catalog as one message id."""

    def __new__(cls, value: object = "") -> str:
        if isinstance(value, Reason):
            return value
        return super().__new__(cls, value)

    def render(self) -> str:
        return gettext(str.__str__(self))


def _fill(template: str, values: Mapping[str, object]) -> str:
    return template % values if values else template


def _for_audit(value: object) -> object:
    if isinstance(value, Reason):
        return value.for_audit()
    if isinstance(value, Unrecorded):
        return WITHHELD
    return value


def _rendered(value: object) -> object:
    if isinstance(value, (Reason, Phrase)):
        return value.render()
    return value


def localize(reason: str) -> str:
    """A refusal as a person reads it, in the active language.

    A `Reason` is rendered from its structure (its "refused" frame dropped).
    Text is what the model was told, already in the turn's language: its
    frame ("refused: ", "거부됨: ") is dropped, and a fixed phrase with no
    parameters is looked up in the catalog; anything else is kept as written
    (it is never parsed back into a message)."""
    if isinstance(reason, Reason):
        if reason.msgid == REFUSED_FRAME and isinstance(reason.params.get("reason"), str):
            return localize(reason.params["reason"])
        return reason.render()
    text = str(reason).strip()
    for frame in {REFUSED_FRAME, gettext(REFUSED_FRAME)}:
        head = frame.partition("%(reason)s")[0]
        if head and text.startswith(head):
            return localize(text[len(head) :])
    return gettext(text) if text and "%" not in text else text
