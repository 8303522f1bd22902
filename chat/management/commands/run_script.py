"""`manage.py run_script`: one governed run that is not a chat turn (origin
`script`, chat.turns.origins): the same lifecycle, runner, agent loop,
executor and audit as a chat turn of the same user, with every audit row
naming the script's origin and reference. Prints the run's answer.

A call that needs a person's approval is refused (nobody is there to ask),
and the originals behind the run's tokens are gone when it ends."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from chat.models import Message, MessageRole, Turn, TurnStatus
from chat.services import conversation_delete
from chat.turns import dispatch, origins
from chat.turns.start import run_start


class Command(BaseCommand):
    help = "Run the agent once for a user, as a scripted run (audited with origin 'script')."

    def add_arguments(self, parser) -> None:
        parser.add_argument("text", help="What the run is asked.")
        parser.add_argument("--user", required=True, help="The username the run acts for (their roles apply).")
        parser.add_argument("--model", default="", help="Model id, provider/name or a unique name (default: chat's).")
        parser.add_argument("--ref", default="", help="The script's reference, written on every audit row.")

    def handle(self, *args, text: str, user: str, model: str, ref: str, **options) -> None:
        text = text.strip()
        if not text or len(text) > settings.OWLAI_MAX_MESSAGE_CHARS:
            raise CommandError(f"the text must have 1 to {settings.OWLAI_MAX_MESSAGE_CHARS} characters")
        actor = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: user}, is_active=True).first()
        if actor is None:
            raise CommandError(f"no active user {user!r}")
        turn = run_start(
            origin=origins.SCRIPT, user=actor, text=text, title=f"run_script {ref}".strip(), origin_ref=ref, model=model
        )
        try:
            dispatch.run_now(turn.pk)
        finally:
            # Nobody comes back to it: out of the user's conversation list.
            conversation_delete(conversation=turn.conversation)
        turn = Turn.objects.get(pk=turn.pk)
        answer = (
            Message.objects.filter(turn=turn, role=MessageRole.ASSISTANT).exclude(content="").order_by("-id").first()
        )
        if answer is not None:
            self.stdout.write(answer.content)
        self.stdout.write(f"run {turn.pk}: {turn.status}" + (f" ({turn.error})" if turn.error else ""))
        if turn.status != TurnStatus.COMPLETED:
            raise CommandError(f"the run ended {turn.status}")
