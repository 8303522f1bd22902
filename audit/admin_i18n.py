"""Admin strings of other packages whose Korean comes from our catalogue
(locale/, which Django reads before any app's). Marked here only so that
`makemessages` keeps them; nothing imports this module.

* django-admin-rangefilter ships no Korean catalogue: its template and
  placeholders use these strings.
* Django's own Korean for "Select %s to view" reads "보기위한 1%s 를(을) 선택",
  and "View %s" reads "뷰 %s".
"""

from django.utils.translation import gettext_noop

THIRD_PARTY_STRINGS = (
    gettext_noop("From date"),
    gettext_noop("To date"),
    gettext_noop("Reset"),
    gettext_noop("Select %s to view"),
    gettext_noop("View %s"),
)
