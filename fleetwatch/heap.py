"""A long-lived process's heap after start-up: frozen out of the cyclic garbage collector.

What such a process holds for its lifetime (modules and their tables: in the API, FastAPI's
routes and schemas, SQLAlchemy's mappers and pydantic's validators; in the scorer's Python
worker, pyspark, pandas, pyarrow and numpy: a hundred thousand tracked objects or more) is
nearly all of its heap, and a full (generation 2) collection walks every one of them, during
which nothing else runs in that process. ``gc.freeze()`` moves the objects alive after start-up
into the permanent generation, which collections skip; what the process allocates later is
still collected as usual.

- The API: request handling makes enough short-lived cycles to start a full collection every
  ten seconds or so under load, and each such pause lands in the latency of the requests in
  flight.
- The scorer's worker (:func:`settle_worker`): a micro-batch unpickles each bucket's state (a
  few thousand dicts and lists) and builds its output, so the young generation's default
  threshold (700 allocations) starts a collection every few devices, each walking the batch's
  live state. The state is acyclic dicts and lists, freed by reference counting whatever the
  collector does, so the worker collects its young generation every
  :data:`WORKER_YOUNG_THRESHOLD` allocations instead.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)

WORKER_YOUNG_THRESHOLD = 10_000
"""Allocations (net of frees) between two young-generation collections in a scorer worker
(the interpreter's default: 700): larger than a bucket's state, so a micro-batch sets off a
few collections, not one every few devices."""

_settled = False


def settle() -> None:
    """Collect once, then freeze what is left (once per process: later calls do nothing, so
    apps started again in one process, as in tests, do not pin each other's garbage)."""
    global _settled
    if _settled:
        return
    _settled = True
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    logger.info(
        "heap settled: %d objects frozen out of garbage collection in %.0f ms",
        gc.get_freeze_count(),
        (time.perf_counter() - started) * 1000,
    )


def settle_worker() -> None:
    """A scorer worker's heap: frozen once (:func:`settle`), its young generation collected
    every :data:`WORKER_YOUNG_THRESHOLD` allocations (the older generations' thresholds are
    kept)."""
    if _settled:
        return
    settle()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(WORKER_YOUNG_THRESHOLD, middle, old)
