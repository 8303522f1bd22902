"""The run core: one home for a run's life, whatever its origin.

    start.py / cancel.py   how a run begins (a chat turn, another origin) and Stop
    dispatch.py            the only place a run is handed to a worker or run in-process
    runner.py              what a worker does with a claimed run (model, tier, loop, end)
    lifecycle.py           every state transition: one conditional UPDATE plus its events
    journal.py             the one writer of numbered events, published after commit
    emitter.py             the loop's `emit`: delta coalescing in front of the journal
    recovery.py            what a lost worker or message left (beat)
    heartbeat.py           a running turn's heartbeat thread
    timeline.py            what a client is shown (selectors)
    model_choice.py        which model a run uses
    origins.py             where runs come from (chat, script, ...): audit origin, vault scope
    statements.py          the hand-written statements, each with its reason

Nothing here is imported by this package file: each module is imported by name.
"""
