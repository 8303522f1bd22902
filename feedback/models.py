"""Thumbs up or down on one answer, with optional tags, a comment and the
conversation attached.

The attached conversation is not a copy: it is read, when an admin opens the
feedback, from the conversation's messages up to the rated turn, and only
while the conversation exists. When its owner deletes the conversation the
attachment goes with it at once (the rating, tags and comment stay): a
person's deletion is not undone by a feedback they gave earlier.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from chat.models import Conversation, Turn

COMMENT_MAX_CHARS = 2000


class Rating(models.TextChoices):
    UP = "up", _("Helpful")
    DOWN = "down", _("Not helpful")


# The tags a person may pick (one list: the page, the API and the admin).
TAGS = {
    "accurate": _("Accurate"),
    "clear": _("Clear"),
    "wrong": _("Wrong or made up"),
    "wrong_data": _("Wrong data or query"),
    "incomplete": _("Incomplete"),
    "unclear": _("Hard to follow"),
    "too_masked": _("Too much masked"),
    "other": _("Other"),
}
# Offered with a thumbs up / down (either may carry any tag through the API).
UP_TAGS = ("accurate", "clear", "other")
DOWN_TAGS = ("wrong", "wrong_data", "incomplete", "unclear", "too_masked", "other")


class AnswerFeedback(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="answer_feedback", verbose_name=_("user")
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.SET_NULL, null=True, related_name="+", verbose_name=_("conversation")
    )
    turn = models.ForeignKey(Turn, on_delete=models.SET_NULL, null=True, related_name="+", verbose_name=_("turn"))
    # The turn by value: the record of what was rated outlives the purge.
    turn_ref = models.BigIntegerField(_("turn id"))
    rating = models.CharField(_("rating"), max_length=10, choices=Rating.choices)
    tags = models.JSONField(_("tags"), default=list, blank=True)
    comment = models.TextField(_("comment"), max_length=COMMENT_MAX_CHARS, blank=True)
    attach_conversation = models.BooleanField(_("conversation attached"), default=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("answer feedback")
        verbose_name_plural = _("answer feedback")
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["user", "turn_ref"], name="uniq_feedback_per_answer")]

    def __str__(self) -> str:
        return str(self.pk)
