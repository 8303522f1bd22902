"""The websocket protocol in one place: every frame type a client may send,
every event the server sends, and the channel-layer messages that carry them
between a worker and the sockets (README "Websocket protocol"; a test keeps
the README's tables and these enumerations the same).

Members are `str`, so they go into JSON, the database and the channel layer
as their plain value."""

from __future__ import annotations

from enum import StrEnum


class ServerEvent(StrEnum):
    """Server -> client. All but STATE and TURN_STARTED are stored with their
    turn (TurnEvent) and numbered before they are sent (chat.turns.journal)."""

    # Not stored: the conversation as the database has it (connect, resync).
    STATE = "state"
    # Not stored: only to the socket whose `turn.start` carried a `ref`.
    TURN_STARTED = "turn.started"
    TURN_ACCEPTED = "turn.accepted"
    TURN_REJECTED = "turn.rejected"
    TOOL_STARTED = "tool.started"
    TOOL_FINISHED = "tool.finished"
    MESSAGE_DELTA = "message.delta"
    MESSAGE_COMPLETED = "message.completed"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_DECIDED = "approval.decided"
    TURN_FINISHED = "turn.finished"
    ERROR = "error"
    # Not stored: on a run's socket (a surface's, e.g. playbooks.consumers),
    # the run or one of its steps changed state; ids and states only, the
    # page reads the run itself from its API.
    RUN_CHANGED = "run.changed"


# The events a socket is sent without a stored row behind them.
UNSTORED_EVENTS = frozenset({ServerEvent.STATE, ServerEvent.TURN_STARTED, ServerEvent.RUN_CHANGED})


class ClientFrame(StrEnum):
    """Client -> server frame types (chat.consumers)."""

    TURN_START = "turn.start"
    TURN_CANCEL = "turn.cancel"
    SYNC = "sync"
    APPROVAL_DECIDE = "approval.decide"


class LayerMessage(StrEnum):
    """Channel-layer message types; a consumer handles each in the method
    named after it (dots as underscores)."""

    TURN_EVENT = "turn.event"  # one stored event
    TURN_EVENTS = "turn.events"  # events stored together, in order
    CONVERSATION_DELETED = "conversation.deleted"
    LAYER_RECOVERED = "layer.recovered"  # the layer's connection came back: resync
