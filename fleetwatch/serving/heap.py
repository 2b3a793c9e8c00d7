"""The API process's heap after start-up: frozen out of the cyclic garbage collector.

What an API process holds for its lifetime (modules, FastAPI's routes and schemas, SQLAlchemy's
mappers, pydantic's validators: about 145,000 tracked objects) is nearly all of its heap, and a
full (generation 2) collection walks every one of them, about 95 ms of CPU here — during which
no request is served. Request handling makes enough short-lived cycles to trigger one every ten
seconds or so under load, and those pauses were the API's whole latency tail
(``bench/micro/api.py``). ``gc.freeze()`` moves the objects alive after start-up into the permanent
generation, which collections skip; what requests allocate is still collected as before.
"""

from __future__ import annotations

import gc
import logging
import time

logger = logging.getLogger(__name__)

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
