"""Telling the person a run acts for that it waits for their approval or
failed: an in-app notice (the playbook page's badge and list) and an e-mail
through Django's e-mail backend (the console backend in the embedded
profile). The e-mail names the playbook and the run, never a value."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import translation
from django.utils.translation import gettext as _

from accounts.language import language_from, user_language

logger = logging.getLogger(__name__)

WAITING = "waiting_approval"
FAILED = "failed"


def notify(run, kind: str) -> None:
    """Inside the caller's transaction (the notice commits with the run's
    new state); the e-mail after commit, failures only logged."""
    from playbooks.models import Notification

    Notification.objects.create(user_id=run.actor_id, run=run, kind=kind)
    user = run.actor
    if not user.email:
        return
    language = language_from(stored=user_language(user=user), fallback=settings.LANGUAGE_CODE)
    with translation.override(language):
        if kind == WAITING:
            subject = _("Playbook %(name)s waits for your approval") % {"name": run.playbook.name}
        else:
            subject = _("Playbook %(name)s did not finish") % {"name": run.playbook.name}
        body = _("Run #%(run)d of playbook %(name)s: open the playbook page to see it.") % {
            "run": run.pk,
            "name": run.playbook.name,
        }

    def send() -> None:
        try:
            send_mail(subject, body, None, [user.email])
        except Exception:
            logger.exception("playbook run %s: notice e-mail not sent", run.pk)

    transaction.on_commit(send)
