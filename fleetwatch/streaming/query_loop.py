"""The run loop every streaming job shares: wait for the query while logging each finished
micro-batch's anatomy, and the ways to stop a query cleanly."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

logger = logging.getLogger(__name__)

BATCH_PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
"""The parts of a micro-batch's ``durationMs`` on every reading's path (``getBatch`` is ~0)."""


def batch_anatomy(progress: dict[str, Any]) -> str:
    """One line of where a micro-batch's time went, from a progress report
    (``StreamingQueryProgress.json``, parsed): the trigger's total, its phases, and each state
    operator's commit (summed over the partitions, inside ``addBatch``), rows and memory."""
    durations = progress.get("durationMs") or {}
    phases = " ".join(f"{k}={durations[k]}" for k in BATCH_PHASES if k in durations)
    line = (
        f"batch {progress.get('batchId')}: {progress.get('numInputRows', 0)} rows, "
        f"{durations.get('triggerExecution', '?')} ms ({phases})"
    )
    for op in progress.get("stateOperators") or []:
        line += (
            f"; state {op.get('operatorName', '?')}: commit {op.get('commitTimeMs', '?')} ms, "
            f"updates {op.get('allUpdatesTimeMs', '?')} ms, {op.get('numRowsTotal', '?')} rows, "
            f"{int(op.get('memoryUsedBytes', 0)) // 1_000_000} MB"
        )
    return line


def log_progress(progress: dict[str, Any] | None, logged: int | None, level: int) -> int | None:
    """Log a finished micro-batch's anatomy once per batch at ``level``; returns its id (only
    the latest report is read, so at back-to-back batches some are skipped)."""
    if not progress or progress.get("batchId") == logged:
        return logged
    if logger.isEnabledFor(level):
        logger.log(level, "%s", batch_anatomy(progress))
    return int(progress["batchId"])


def watch(query: StreamingQuery, stop: threading.Event, level: int = logging.DEBUG) -> None:
    """Return when ``stop`` is set or the query has ended, logging each batch on the way."""
    logged: int | None = None
    while query.isActive and not stop.is_set():
        if wait_for_query(query, 1):
            break
        report = query.lastProgress
        logged = log_progress(None if report is None else json.loads(report.json), logged, level)


def wait_for_query(query: StreamingQuery, timeout_s: int) -> bool:
    """Wait up to ``timeout_s`` for the query to end; True if it has ended. A query that ends
    with an error ends too: the caller reads ``query.exception()`` to tell why, instead of
    the error escaping from here mid-shutdown."""
    # lazy: pyspark is imported only where Spark runs
    from pyspark.errors import StreamingQueryException

    try:
        return bool(query.awaitTermination(timeout_s))
    except StreamingQueryException:
        return True


def stop_after_batch(query: StreamingQuery, timeout_s: float = 60.0, poll_s: float = 0.1) -> bool:
    """Stop the query once the micro-batch under way, if any, has completed: Spark's
    ``stop()`` alone interrupts it, and its work is then done again on the next start. True if
    that batch completed (with back-to-back triggers the next one may have just begun, and is
    cut short at its start); after ``timeout_s`` the query is stopped regardless. A batch cut
    short runs again from the checkpoint, with the same results."""
    deadline = time.monotonic() + timeout_s
    started = _last_batch_id(query)
    finished = True
    while query.isActive and query.status.get("isTriggerActive"):
        if _last_batch_id(query) != started:
            break
        if time.monotonic() >= deadline:
            finished = False
            break
        time.sleep(poll_s)
    if query.isActive:
        query.stop()
    return finished


def _last_batch_id(query: StreamingQuery) -> int:
    progress = query.lastProgress
    return -1 if progress is None else int(progress.batchId)
