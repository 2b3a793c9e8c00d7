"""Every progress report of a streaming query as Prometheus metrics ``fleetwatch_streaming_*``,
labelled ``query`` with the job's name (``score``, ``train``).

Spark keeps a progress report of every micro-batch it runs (an idle trigger makes none since
Spark 3.5) on the driver. :func:`following` reads each new one for the life of a job;
:meth:`ProgressMetrics.record` is the pure part, a
progress report (``StreamingQueryProgress.json``, parsed: the shape of ``query.lastProgress``)
to metric updates, which the tests feed with recorded reports.

Label values are bounded by the plan, never by the data: ``part`` is one of
:data:`BATCH_PARTS`, ``operator`` a state operator's name, ``source`` a source's topics.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

BATCH_PARTS = (
    "latestOffset",
    "getOffset",
    "getBatch",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)
"""The parts of a micro-batch's ``durationMs`` that are exported (others are left out, so the
label stays bounded if a Spark version adds some)."""
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds: a phase of a few ms up to a trainer's batch of tens of seconds."""

_SUBSCRIBED = re.compile(r"Subscribe(?:Pattern)?\[(.*?)\]")


class ProgressMetrics:
    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._watermarks: dict[str, float] = {}
        self.batches = Counter(
            "fleetwatch_streaming_batches",
            "Micro-batches run (each progress report)",
            ["query"],
            registry=registry,
        )
        self.input_rows = Counter(
            "fleetwatch_streaming_input_rows",
            "Rows read from the query's sources",
            ["query"],
            registry=registry,
        )
        self.input_rate = Gauge(
            "fleetwatch_streaming_input_rows_per_second",
            "Rows arriving per second, over the last micro-batch's interval",
            ["query"],
            registry=registry,
        )
        self.processed_rate = Gauge(
            "fleetwatch_streaming_processed_rows_per_second",
            "Rows processed per second of the last micro-batch",
            ["query"],
            registry=registry,
        )
        self.batch_seconds = Histogram(
            "fleetwatch_streaming_batch_duration_seconds",
            "Duration of a micro-batch (batchDuration)",
            ["query"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.part_seconds = Histogram(
            "fleetwatch_streaming_batch_part_duration_seconds",
            "Duration of a part of a micro-batch (durationMs: latestOffset, queryPlanning, "
            "walCommit, addBatch, commitOffsets, triggerExecution, ...)",
            ["query", "part"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.watermark = Gauge(
            "fleetwatch_streaming_watermark_timestamp_seconds",
            "The query's event-time watermark (epoch seconds)",
            ["query"],
            registry=registry,
        )
        self.watermark_lag = Gauge(
            "fleetwatch_streaming_watermark_lag_seconds",
            "Now minus the event-time watermark (grows while the query makes no progress)",
            ["query"],
            registry=registry,
        )
        self.event_time_lag = Gauge(
            "fleetwatch_streaming_event_time_lag_seconds",
            "When the last micro-batch with rows was reported, minus the newest event time in it",
            ["query"],
            registry=registry,
        )
        self.state_rows = Gauge(
            "fleetwatch_streaming_state_rows",
            "Rows (keys) held in the state store, per state operator",
            ["query", "operator"],
            registry=registry,
        )
        self.state_memory = Gauge(
            "fleetwatch_streaming_state_memory_bytes",
            "Memory used by the state store, per state operator",
            ["query", "operator"],
            registry=registry,
        )
        self.state_commit = Histogram(
            "fleetwatch_streaming_state_commit_duration_seconds",
            "State store commit time of a micro-batch, summed over partitions, per operator",
            ["query", "operator"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.behind = Gauge(
            "fleetwatch_streaming_source_offsets_behind_latest",
            "Offsets between the last micro-batch's end and the latest available, summed over "
            "the source's partitions (records not read yet)",
            ["query", "source"],
            registry=registry,
        )
        self.max_behind = Gauge(
            "fleetwatch_streaming_source_max_partition_offsets_behind_latest",
            "The most offsets behind the latest of any one partition of the source (Kafka)",
            ["query", "source"],
            registry=registry,
        )
        self.reported = Gauge(
            "fleetwatch_streaming_last_progress_timestamp_seconds",
            "When the last progress report was handled (epoch seconds)",
            ["query"],
            registry=registry,
        )

    def record(self, query: str, progress: Mapping[str, Any]) -> None:
        """One progress report of ``query`` to metric updates (the report's fields that are
        missing or null update nothing)."""
        now = self.clock()
        self.batches.labels(query).inc()
        self.reported.labels(query).set(now)
        rows = _number(progress.get("numInputRows"))
        if rows:
            self.input_rows.labels(query).inc(rows)
        for gauge, field in (
            (self.input_rate, "inputRowsPerSecond"),
            (self.processed_rate, "processedRowsPerSecond"),
        ):
            if (rate := _number(progress.get(field))) is not None:
                gauge.labels(query).set(rate)
        if (batch_ms := _number(progress.get("batchDuration"))) is not None:
            self.batch_seconds.labels(query).observe(batch_ms / 1000)
        durations = progress.get("durationMs") or {}
        for part in BATCH_PARTS:
            if (ms := _number(durations.get(part))) is not None:
                self.part_seconds.labels(query, part).observe(ms / 1000)
        self._event_time(query, progress.get("eventTime") or {}, now)
        self._state(query, progress.get("stateOperators") or [])
        for source in progress.get("sources") or []:
            self._source(query, source)

    def _event_time(self, query: str, event_time: Mapping[str, Any], now: float) -> None:
        watermark = _epoch_s(event_time.get("watermark"))
        if watermark:  # 0: no watermark yet (Spark reports the epoch)
            self.watermark.labels(query).set(watermark)
            if query not in self._watermarks:
                self.watermark_lag.labels(query).set_function(
                    lambda: self.clock() - self._watermarks[query]
                )
            self._watermarks[query] = watermark
        newest = _epoch_s(event_time.get("max"))
        if newest is not None:
            self.event_time_lag.labels(query).set(now - newest)

    def _state(self, query: str, operators: list[Mapping[str, Any]]) -> None:
        totals: dict[str, list[float]] = {}
        for op in operators:
            name = str(op.get("operatorName") or "state")
            summed = totals.setdefault(name, [0.0, 0.0, 0.0])
            for i, field in enumerate(("numRowsTotal", "memoryUsedBytes", "commitTimeMs")):
                summed[i] += _number(op.get(field)) or 0.0
        for name, (rows, memory, commit_ms) in totals.items():
            self.state_rows.labels(query, name).set(rows)
            self.state_memory.labels(query, name).set(memory)
            self.state_commit.labels(query, name).observe(commit_ms / 1000)

    def _source(self, query: str, source: Mapping[str, Any]) -> None:
        name = source_label(str(source.get("description") or ""))
        behind = offsets_behind(source.get("endOffset"), source.get("latestOffset"))
        if behind is not None:
            self.behind.labels(query, name).set(behind)
        metrics = source.get("metrics") or {}
        if (most := _number(metrics.get("maxOffsetsBehindLatest"))) is not None:
            self.max_behind.labels(query, name).set(most)


def source_label(description: str) -> str:
    """A source's label: the topics of a Kafka source (``KafkaV2[Subscribe[telemetry.raw]]``
    → ``telemetry.raw``), else the kind of source (``FileStreamSource[file:/…]`` →
    ``FileStreamSource``)."""
    found = _SUBSCRIBED.search(description)
    if found:
        return found.group(1)
    return description.split("[", 1)[0] or "source"


def offsets_behind(end: Any, latest: Any) -> int | None:
    """Latest minus end offset, summed over a Kafka source's partitions: ``{topic:
    {partition: offset}}`` on each side (Spark reports them parsed, or as JSON text; a
    partition not read yet counts from 0); ``None`` when the source reports no such offsets
    (a file source)."""
    end, latest = _offsets(end), _offsets(latest)
    if end is None or latest is None:
        return None
    total = 0
    for topic, partitions in latest.items():
        read = end.get(topic) or {}
        for partition, offset in partitions.items():
            total += max(0, int(offset) - int(read.get(partition, 0)))
    return total


def _offsets(value: Any) -> dict[str, dict[str, int]] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        return None
    return value


def _number(value: Any) -> float | None:
    """A report's number (Spark writes some as text, and NaN for a rate with no interval)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _epoch_s(iso: Any) -> float | None:
    """Spark's event-time strings (``2026-11-24T10:00:00.000Z``) in epoch seconds."""
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


POLL_S = 0.5
"""How often :func:`following` reads a query's newest progress reports."""


def new_reports(reports: Sequence[Any], after: int | None) -> list[tuple[int, str]]:
    """``(batchId, JSON)`` of the reports (Spark's ``StreamingQueryProgress`` objects, oldest
    first, as ``recentProgress`` holds them) whose batch is after ``after``, oldest first.
    Read from the newest back, so a poll costs a call or two per new report, not one per
    report held."""
    found: list[tuple[int, str]] = []
    for i in range(len(reports) - 1, -1, -1):
        report = reports[i]
        batch = int(report.batchId())
        if after is not None and batch <= after:
            break
        found.append((batch, str(report.json())))
    return found[::-1]


@contextmanager
def following(
    spark: SparkSession,
    query_name: str,
    handle: Callable[[dict[str, Any]], None],
    every_s: float = POLL_S,
) -> Iterator[None]:
    """Hand every progress report of the query named ``query_name`` to ``handle`` (parsed
    JSON, in batch order, on a thread of the driver) while the block runs, and the last
    ones when it ends. A failing ``handle`` is logged; it never reaches the query.

    The reports are read from the query's recent progress every ``every_s``, not taken from a
    Python ``StreamingQueryListener``: Spark calls such a listener back for every report, and
    pyspark rebuilds the report from the JVM object field by field, each a round trip in
    which the JVM looks classes up by name through every jar on its classpath: under load, a
    large share of the scorer's JVM time, competing with the micro-batches for the cores."""
    done = threading.Event()
    queries: dict[str, Any] = {}  # run id → the JVM's query, while it has reports to read
    handled: dict[str, int] = {}  # run id → the last batch handed on

    def poll() -> None:
        for query in spark.streams.active:
            if query.name == query_name:
                queries.setdefault(str(query.runId), query._jsq)  # the JVM object
        for run, jquery in list(queries.items()):
            active = bool(jquery.isActive())
            for batch, text in new_reports(jquery.recentProgress(), handled.get(run)):
                handled[run] = batch
                try:
                    handle(json.loads(text))
                except Exception:  # metrics must never disturb the query
                    logger.exception("could not export the progress of %s", query_name)
            if not active:
                del queries[run]  # its reports are all read

    def loop() -> None:
        while not done.wait(every_s):
            try:
                poll()
            except Exception:  # a py4j failure: the next poll reads what this one missed
                logger.warning("could not read the progress of %s", query_name, exc_info=True)

    thread = threading.Thread(target=loop, name=f"progress-{query_name}")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        try:
            poll()
        except Exception:
            logger.debug("reading the last progress of %s", query_name, exc_info=True)


@contextmanager
def progress_exported(
    spark: SparkSession,
    job: str,
    registry: CollectorRegistry | None,
    also: Sequence[Callable[[dict[str, Any]], None] | None] = (),
    beside: Sequence[str] = (),
) -> Iterator[None]:
    """While the block runs, the progress of the job's query (``fleetwatch-{job}``) goes to
    :class:`ProgressMetrics` on ``registry`` (if any), labelled ``query={job}``, and to each
    handler of ``also`` that is not None; so does the progress of each query
    ``fleetwatch-{name}`` of ``beside`` that runs in the same session (the scorer's rules
    query), labelled ``query={name}``, to the metrics alone. Nothing listens when there is
    nothing to hand to."""
    handlers = [h for h in also if h is not None]
    metrics = ProgressMetrics(registry) if registry is not None else None
    if metrics is not None:
        handlers.insert(0, partial(metrics.record, job))

    def handle(report: dict[str, Any]) -> None:
        for handler in handlers:
            handler(report)

    with ExitStack() as stack:
        if handlers:
            stack.enter_context(following(spark, f"fleetwatch-{job}", handle))
        for name in beside:
            if metrics is not None:
                record = partial(metrics.record, name)
                stack.enter_context(following(spark, f"fleetwatch-{name}", record))
        yield


class ProgressLog:
    """Appends each progress report it is handed to ``path`` as one JSON line
    (:attr:`~fleetwatch.contracts.settings.SparkSettings.progress_log`)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path

    def __call__(self, report: dict[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(report, separators=(",", ":")) + "\n")


def progress_log(path: Path | None) -> ProgressLog | None:
    return None if path is None else ProgressLog(path)
