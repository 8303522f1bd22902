"""Where a run's time goes, measured in the worker: the time it spent in a
worker (from its claim to its end, wait or handover) and, of that, the time
spent waiting for the model. The difference is the platform's own: building
context and prompts, the executor's checks, audit and masking, the tools'
queries, storing events. Stored on the turn when its part of the run ends
(chat.turns.lifecycle), summed over the parts of a resumed run; /metrics
reads them (owlai.metrics)."""

from __future__ import annotations

import time


class TurnClock:
    def __init__(self, *, run_ms: int | None = None, model_ms: int | None = None) -> None:
        self._started = time.perf_counter()
        self._run_before = run_ms or 0
        self._model_before = model_ms or 0
        self._model = 0.0

    def timed(self, client):
        """`client` with every `complete` call counted as waiting for the model."""
        return _TimedClient(client, self)

    def changes(self) -> dict[str, int]:
        """The turn's fields as of now (chat.turns.lifecycle writes them)."""
        run = (time.perf_counter() - self._started) * 1000
        model = min(self._model * 1000, run)
        return {"run_ms": self._run_before + round(run), "model_ms": self._model_before + round(model)}


class _TimedClient:
    def __init__(self, client, clock: TurnClock) -> None:
        self._client = client
        self._clock = clock

    def complete(self, **kwargs):
        started = time.perf_counter()
        try:
            return self._client.complete(**kwargs)
        finally:
            self._clock._model += time.perf_counter() - started


def clock_changes(turn) -> dict[str, int]:
    """The timing fields to store with a transition of `turn` ({} when no
    clock runs for it here: the recovery job, an approval decision)."""
    clock = getattr(turn, "clock", None)
    return clock.changes() if clock is not None else {}
