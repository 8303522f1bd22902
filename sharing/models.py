"""Share links: a read-only view of a conversation up to one turn.

The snapshot is not a copy: it is the conversation's own turns up to
`up_to_turn`, which never change once ended (a later turn, a regenerated
answer, has a later id and is not shared). So deleting the conversation, or
revoking the link, ends every viewer's access at once, and the originals
behind its tokens stay in the owner's vault only.
"""

from __future__ import annotations

import secrets
import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from chat.models import Conversation, Turn


def new_key() -> str:
    # The link's address: unguessable, so a link id on an audit row or a
    # conversation id does not open anything.
    return secrets.token_urlsafe(24)


class ShareLinkQuerySet(models.QuerySet):
    def open(self) -> ShareLinkQuerySet:
        """Not revoked, not expired, of a conversation its owner has not deleted."""
        return self.filter(
            revoked_at__isnull=True, expires_at__gt=timezone.now(), conversation__deleted_at__isnull=True
        )


class ShareLink(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    key = models.CharField(max_length=40, unique=True, default=new_key, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="share_links", verbose_name=_("conversation")
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="share_links", verbose_name=_("owner")
    )
    # The last turn shown; turns after it are not part of the snapshot.
    up_to_turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="+", verbose_name=_("up to turn"))
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    expires_at = models.DateTimeField(_("expires"))
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)

    objects = ShareLinkQuerySet.as_manager()

    class Meta:
        verbose_name = _("share link")
        verbose_name_plural = _("share links")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        # Never the title (content) nor the key (it opens the link).
        return str(self.id)

    @property
    def is_open(self) -> bool:
        return self.revoked_at is None and self.expires_at > timezone.now() and self.conversation.deleted_at is None

    def status_label(self) -> str:
        if self.revoked_at is not None:
            return str(_("Revoked"))
        if self.conversation.deleted_at is not None:
            return str(_("Conversation deleted"))
        if self.expires_at <= timezone.now():
            return str(_("Expired"))
        return str(_("Open"))
