"""The run core's hand-written statements, each built once per process
(`functools.cache`) and run through owlai.prepared, so on PostgreSQL each is
parsed and planned once per connection. Each is here because it runs on
every turn (or every model or tool call) and the ORM would cost a round trip
or a plan more; the reason is on each.
"""

from __future__ import annotations

import logging
from functools import cache

from django.db import connection

from accounts.language import stored_language_sql
from chat.models import ACTIVE_TURN_STATUSES, Conversation, Message, Turn, TurnEvent, TurnStatus
from chat.protocol import ServerEvent
from governance.models import FeatureDefault, LlmModel, Provider
from owlai import prepared

logger = logging.getLogger(__name__)


@cache
def lock(for_update: bool) -> str:
    """The conversation, locked, whether a turn of it is active, and the
    user's stored language (prepared: every turn starts here)."""
    statuses = ", ".join(f"'{status}'" for status in ACTIVE_TURN_STATUSES)
    return (
        f"SELECT {prepared.columns(Conversation, 'c')}, EXISTS (SELECT 1 FROM {Turn._meta.db_table} t"
        f" WHERE t.conversation_id = c.id AND t.status IN ({statuses})), {stored_language_sql()}"
        f" FROM {Conversation._meta.db_table} c WHERE c.id = %s" + (" FOR UPDATE OF c" if for_update else "")
    )


@cache
def touch() -> str:
    """The conversation's title and time at a turn's start (elsewhere than
    PostgreSQL; there `start` does it in the same statement)."""
    return f"UPDATE {Conversation._meta.db_table} SET title = %s, updated_at = %s WHERE id = %s RETURNING id"


@cache
def message_turn_index() -> int:
    """Where the turn id sits among a message's INSERT values: `start` takes
    it from the new turn, not from a parameter."""
    return [f.name for f in prepared.insert_fields(Message)].index("turn")


@cache
def start() -> str:
    """PostgreSQL: INSERT the turn, INSERT its user message (with the new
    turn's id) and touch the conversation (`touch`), in one statement;
    returns the two new ids."""
    turn_sql = prepared.insert_sql(Turn)
    fields = prepared.insert_fields(Message)
    selected = ["new_turn.id" if f.name == "turn" else "%s" for f in fields]
    return (
        f"WITH new_turn AS ({turn_sql}),"
        f" new_message AS (INSERT INTO {Message._meta.db_table} ({', '.join(f.column for f in fields)})"
        f" SELECT {', '.join(selected)} FROM new_turn RETURNING {Message._meta.pk.column}),"
        f" touched AS ({touch()})"
        f" SELECT new_turn.id, new_message.{Message._meta.pk.column} FROM new_turn, new_message"
    )


@cache
def chat_default() -> str:
    """The chat default model with its provider, in one read: most turns
    use the default."""
    return (
        f"SELECT {prepared.columns(LlmModel, 'm')}, {prepared.columns(Provider, 'p')}"
        f" FROM {FeatureDefault._meta.db_table} f JOIN {LlmModel._meta.db_table} m ON m.id = f.model_id"
        f" JOIN {Provider._meta.db_table} p ON p.id = m.provider_id WHERE f.feature = %s"
    )


@cache
def history() -> str:
    # Prepared: every turn sends the history again.
    return (
        f"SELECT {prepared.columns(Message, 'm')} FROM {Message._meta.db_table} m"
        f" JOIN {Turn._meta.db_table} t ON t.id = m.turn_id"
        f" WHERE m.conversation_id = %s AND (t.status = '{TurnStatus.COMPLETED}' OR t.id = %s)"
        # An earlier version (regenerated, or its message edited) leaves the history.
        f" AND NOT EXISTS (SELECT 1 FROM {Turn._meta.db_table} v WHERE v.supersedes_id = t.id)"
        " ORDER BY m.created_at, m.id"
    )


@cache
def claim() -> str:
    # Prepared: it runs on every turn (owlai.prepared).
    table = Turn._meta.db_table
    return (
        f"UPDATE {table} SET status = '{TurnStatus.RUNNING}', started_at = COALESCE(started_at, %s),"
        f" heartbeat_at = %s WHERE id = %s AND status = '{TurnStatus.QUEUED}' RETURNING *"
    )


@cache
def claim_and_read() -> str:
    """`claim` and the read of the claimed turn with its conversation and
    owner, one statement: the worker's first round trip of every turn."""
    return f"WITH claimed AS ({claim()}) " + claimed_turn(from_claim=True)


@cache
def claimed_turn(*, from_claim: bool) -> str:
    """The claimed turn with its conversation, owner and last seq: read from
    the claim's WITH (`claimed`), or from the turn table by id (one
    parameter)."""
    user_model = Conversation._meta.get_field("owner").related_model
    source = "claimed" if from_claim else Turn._meta.db_table
    return (
        f"SELECT {prepared.columns(Turn, 't')}, {prepared.columns(Conversation, 'c')},"
        f" {prepared.columns(user_model, 'u')}"
        f" FROM {source} t JOIN {Conversation._meta.db_table} c ON c.id = t.conversation_id"
        f" JOIN {user_model._meta.db_table} u ON u.{user_model._meta.pk.column} = c.owner_id"
        + ("" if from_claim else " WHERE t.id = %s")
    )


@cache
def pin(with_model: bool) -> str:
    """Pin the conversation's tier (and model), unless deleted or already
    pinned to another tier (prepared: every turn, as the guard of its
    `turn.accepted`, chat.turns.runner)."""
    model = ", model_id = %s" if with_model else ""
    return (
        f"UPDATE {Conversation._meta.db_table} SET tier = %s, updated_at = %s{model}"
        " WHERE id = %s AND deleted_at IS NULL AND (tier = '' OR tier = %s) RETURNING id"
    )


def conversation_key(conversation_id):
    """A conversation id as a raw statement's parameter (a UUID is text on SQLite)."""
    return Conversation._meta.pk.get_db_prep_value(conversation_id, connection)


@cache
def deleted() -> str:
    """Whether the conversation was deleted while the turn ran: read after
    every turn, to drop what it put in the vault."""
    return f"SELECT 1 FROM {Conversation._meta.db_table} WHERE id = %s AND deleted_at IS NOT NULL"


@cache
def interruption() -> str:
    # Prepared: it runs before every model and tool call (owlai.prepared).
    return (
        f"SELECT t.status, t.cancel_requested_at, c.deleted_at FROM {Turn._meta.db_table} t"
        f" JOIN {Conversation._meta.db_table} c ON c.id = t.conversation_id WHERE t.id = %s"
    )


@cache
def turns() -> str:
    """A conversation's turns: every socket's connect and every resync reads them."""
    return f"SELECT {prepared.columns(Turn, 't')} FROM {Turn._meta.db_table} t WHERE t.conversation_id = %s"


@cache
def timeline_messages() -> str:
    """A conversation's messages in order, only the columns the timeline
    shows: read on every connect and resync."""
    return (
        f"SELECT m.role, m.content, m.turn_id, m.tool_call_id FROM {Message._meta.db_table} m"
        " WHERE m.conversation_id = %s ORDER BY m.created_at, m.id"
    )


@cache
def step_events() -> str:
    """The tool-step and approval events of a conversation's turns, from
    which the timeline renders each step as it was streamed."""
    kinds = ", ".join(
        f"'{kind}'"
        for kind in (
            ServerEvent.TOOL_STARTED,
            ServerEvent.TOOL_FINISHED,
            ServerEvent.APPROVAL_REQUESTED,
            ServerEvent.APPROVAL_DECIDED,
        )
    )
    return (
        f"SELECT {prepared.columns(TurnEvent, 'e')} FROM {TurnEvent._meta.db_table} e"
        f" JOIN {Turn._meta.db_table} t ON t.id = e.turn_id"
        f" WHERE t.conversation_id = %s AND e.type IN ({kinds}) ORDER BY e.turn_id, e.seq"
    )
