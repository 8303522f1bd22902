"""A user's language and personal API tokens."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class UserPreference(models.Model):
    """What a user chose with the language switcher. The worker reads it when
    a turn starts, so answers, reasons and errors come in that language even
    though the worker has no browser to ask."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="owlai_preference",
        verbose_name=_("user"),
    )
    language = models.CharField(_("language"), max_length=10, choices=settings.LANGUAGES, blank=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("user preference")
        verbose_name_plural = _("user preferences")

    def __str__(self) -> str:
        return f"{self.user} ({self.language or '-'})"


class TokenScope(models.TextChoices):
    """What a token may do beyond the read-and-manage API every token has.
    A token carries the scopes it was created with; they are never widened
    afterwards (a new token is made instead), so a leaked old token cannot
    start turns."""

    AGENT = "agent", _("Ask the agent (start turns, answer approvals)")


class ApiTokenQuerySet(models.QuerySet):
    def usable(self):
        """Neither revoked nor expired, and its user still active."""
        now = timezone.now()
        return self.filter(revoked_at__isnull=True, user__is_active=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A personal API token. Only a SHA-256 digest of the key is stored: the
    key is shown once, when it is created, and cannot be read back. Revoked
    tokens stay (revoked_at set) so the list says what existed and when it
    ended; the audit trail has their creation, revocation and every use."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens", verbose_name=_("user")
    )
    name = models.CharField(_("name"), max_length=100)
    # The key's first characters: enough to tell tokens apart, far too few to use.
    prefix = models.CharField(_("prefix"), max_length=16)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    created_by_username = models.CharField(_("created by"), max_length=150, blank=True)
    expires_at = models.DateTimeField(_("expires"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)
    revoked_by_username = models.CharField(_("revoked by"), max_length=150, blank=True)
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    # TokenScope values; empty for the read-and-manage API only.
    scopes = models.JSONField(_("scopes"), default=list, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def has_scope(self, scope: str) -> bool:
        return isinstance(self.scopes, list) and scope in self.scopes

    @property
    def active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())
