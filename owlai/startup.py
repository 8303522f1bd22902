"""Start-up of the long-running processes (web, workers)."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Move every object the process holds once started (modules, settings,
    models, URL patterns, translations: about 250,000) out of the cyclic
    garbage collector's reach, and return how many are frozen.

    They live as long as the process, yet each full collection walked them
    all: about 110 ms on the benchmark machine, with the interpreter lock
    held, so every turn and socket of the process stood still meanwhile (the
    spikes in bench/load.py's p95). Frozen, a full collection walks only what
    was allocated since; prefork children also keep sharing those pages
    (copy-on-write) instead of each touching them. Objects created later are
    collected as before."""
    gc.collect()  # what start-up already dropped is not kept for good
    gc.freeze()
    return gc.get_freeze_count()
