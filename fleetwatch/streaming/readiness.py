"""A streaming job's readiness (``/readyz``): its query is running and making progress.

Ready once the query is active and has completed a micro-batch (``lastProgress``), or has
looked at its sources and found nothing new (a restart with nothing to read runs no batch).
Not ready when the query has stopped, or when one trigger has been running for more than
:data:`STALLED_AFTER_S` with no progress.

An idle query runs no micro-batch, so its last progress report ages without anything being
wrong (``deploy/prometheus/rules/streaming.yml``): the age of the report alone says nothing.
What tells a stuck batch is the trigger seen running, for the same last batch, since longer
than the bound; the clock of that starts at the first check that sees it running (a check
that sees the trigger idle, or a new batch, resets it). Each check is three quick calls to the
driver's JVM; a failing one (py4j) is an answer too: not ready, with the error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException

from fleetwatch.runtime import Readiness

logger = logging.getLogger(__name__)

STALLED_AFTER_S = 120.0
"""A trigger running this long since the last progress is stuck: the bound of the
FleetwatchStreamingNoProgress alert, twice the longest micro-batch the duration histograms
expect (60 s)."""

WAITING_FOR_DATA = "Waiting for data to arrive"
"""Spark's status message once a trigger has read its sources' offsets and found nothing new."""


class Query(Protocol):
    """What readiness reads of a ``StreamingQuery``."""

    @property
    def isActive(self) -> bool: ...

    @property
    def status(self) -> dict[str, Any]: ...

    @property
    def lastProgress(self) -> Any: ...


class QueryReadiness:
    """The readiness of the query handed to :meth:`follow`, or found by :meth:`follow_named`
    (none yet: not ready); call the object for a :class:`~fleetwatch.runtime.Readiness`.
    Thread-safe."""

    def __init__(
        self,
        stalled_after_s: float = STALLED_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stalled_after_s = stalled_after_s
        self.clock = clock
        self._query: Query | None = None
        self._find: Callable[[], Query | None] | None = None
        self._lock = threading.Lock()
        self._running: tuple[int | None, float] | None = None
        """(last batch id, when a check first saw a trigger running after it)."""

    def follow(self, query: Query) -> None:
        with self._lock:
            self._query, self._running = query, None

    def follow_named(self, streams: Any, name: str) -> None:
        """Follow the query called ``name`` once it is among ``streams.active`` (a session's
        ``StreamingQueryManager``), for a job that starts its query further down."""

        def find() -> Query | None:
            return next((q for q in streams.active if q.name == name), None)

        with self._lock:
            self._query, self._find, self._running = None, find, None

    def __call__(self) -> Readiness:
        with self._lock:
            try:
                if self._query is None and self._find is not None:
                    self._query = self._find()
                query = self._query
                if query is None:
                    return Readiness(False, {"query": "not started"})
                active = query.isActive
                status = dict(query.status) if active else {}
                progress = query.lastProgress if active else None
            except (Py4JError, PySparkException) as exc:  # the driver's JVM did not answer
                logger.warning("the query's readiness is unknown: %s", exc)
                return Readiness(False, {"query": f"unknown: {type(exc).__name__}: {exc}"})
            return self._judge(active, status, progress)

    def _judge(self, active: bool, status: dict[str, Any], progress: Any) -> Readiness:
        if not active:
            self._running = None
            return Readiness(False, {"query": "stopped"})
        batch = None if progress is None else int(progress.batchId)
        detail: dict[str, Any] = {"query": "active", "last_batch": batch}
        if not status.get("isTriggerActive"):
            self._running = None
            if batch is None and status.get("message") != WAITING_FOR_DATA:
                return Readiness(False, detail | {"reason": "no micro-batch completed yet"})
            return Readiness(True, detail)
        now = self.clock()
        if self._running is None or self._running[0] != batch:
            self._running = (batch, now)
        running_s = now - self._running[1]
        if batch is None:
            return Readiness(False, detail | {"reason": "first micro-batch running"})
        if running_s > self.stalled_after_s:
            reason = (
                f"a micro-batch has been running {running_s:.0f} s with no progress "
                f"(bound {self.stalled_after_s:.0f} s)"
            )
            return Readiness(False, detail | {"reason": reason})
        return Readiness(True, detail)
