"""The trainer: ``telemetry.raw`` → each device's detector learns the new readings →
changed parameters on the compacted ``model.params`` topic.

Thin Spark glue around :func:`fleetwatch.streaming.trainer.learning.learn_device`:

- records are parsed and checked as the scorer checks them and packed into one row of arrays
  per device and Arrow batch (:mod:`fleetwatch.streaming.trainer.packing`: the processor's cost
  is per row it is handed), the watermark ``score.dedup_window`` behind the newest event time
  (:func:`fleetwatch.streaming.trainer.processor.readings_frame`), and grouped by bucket of
  devices
  (:mod:`fleetwatch.streaming.trainer.bucket_state`: its cost is also per key) into
  ``transformWithStateInPandas`` (time mode "EventTime", the readings' watermark);
- per bucket, a ``ValueState`` holds its devices' detector parameters (JSON) in the RocksDB
  state store. Each device's readings of the micro-batch are learned on top of its parameters
  (never refitted from history) and a row is emitted for each device whose parameters changed;
  ``version`` goes up by one per batch learned. A device silent for ``score.expire_after_s``
  of event time is forgotten by the bucket's timer, with a tombstone on ``model.params``
  (:mod:`~fleetwatch.streaming.trainer.expiry`). A Python worker keeps the detectors of the
  buckets of its latest partition that it wrote last
  (:class:`~fleetwatch.streaming.trainer.bucket_state.WarmBuckets`), so a bucket whose state is
  still that value is not read back from its text (decision 0027);
- the rows are written to ``model.params`` (key = device id, value
  :func:`~fleetwatch.contracts.model_params.encode_device`) inside ``foreachBatch``
  (:mod:`~fleetwatch.streaming.trainer.publisher`), which also tells the
  :class:`~fleetwatch.streaming.trainer.observer.TrainingObserver` what the batch did.

Restarts. The query is checkpointed under ``train-v{PLAN_VERSION}``: offsets and state resume
together, so a restart neither skips readings nor learns them twice, and publishes no old
version again. (A batch that was written but not committed when the process died is recomputed
from the same state and input on restart: it re-publishes the same versions with the same
parameters, which the compacted topic and every reader keyed by version absorb.) On a fresh
checkpoint — first start, a new plan version, a backfill — the state is seeded from the latest
parameters already on ``model.params``, so versions keep increasing per key.

Anomalies are kept out of the baseline. The policy is the detectors' own gate (see
:mod:`fleetwatch.models.base`): :func:`learn_device` calls ``learn`` with ``exclude=None``, and
a fitted detector then leaves out of its statistics every row that it scores as an alert with
its parameters *before* the batch. Those are the parameters the scorer holds for that batch
(it follows ``model.params``), so the rows left out are the rows the scorer flags, without a
stream-stream join of ``alerts`` back into the trainer (which would wait for the scorer, and
couple a stopped scorer to a stalled trainer). The detectors still advance their memory
through excluded rows (CUSUM sums, flat-line windows), so a long fault keeps alerting instead
of becoming the new normal. Two consequences, by design: readings learned before a device is
warmed up are all learned (there is no baseline to flag against yet), and a permanent change of
one metric keeps alerting until the device's parameters are reset — a lasting change of the
whole device (every metric, for ``adapt_s``) is learned instead
(:mod:`~fleetwatch.models.combiner`).

Backfill is the same plan: ``trigger(availableNow=True)`` over a range of the log (Kafka
``startingTimestamp`` for the start, since the record timestamp is the event time, and a filter
on event time for both ends) or over files of telemetry records, in its own checkpoint.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from fleetwatch.contracts.identifiers import FLEET_KEY_PREFIX
from fleetwatch.contracts.settings import Settings
from fleetwatch.models.registry import Tuning, default_detector
from fleetwatch.runtime import serve_metrics
from fleetwatch.streaming.checkpoint_files import CheckpointFiles, HadoopFiles, join
from fleetwatch.streaming.checkpoints import LOCAL, resume_offsets, versioned
from fleetwatch.streaming.kafka_io import kafka_stream, kafka_table
from fleetwatch.streaming.progress_metrics import progress_exported, progress_log
from fleetwatch.streaming.query_loop import wait_for_query, watch
from fleetwatch.streaming.readiness import QueryReadiness
from fleetwatch.streaming.spark_session import build_session
from fleetwatch.streaming.trainer.errors import TrainError
from fleetwatch.streaming.trainer.metrics import MeteredObserver, TrainerMetrics
from fleetwatch.streaming.trainer.observer import TrainingObserver
from fleetwatch.streaming.trainer.processor import readings_frame, updates_frame
from fleetwatch.streaming.trainer.publisher import BatchPublisher

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

logger = logging.getLogger(__name__)

PLAN_VERSION = 4
"""Bump when the query's stateful plan changes (Spark cannot reuse the old checkpoint). 4:
repeats told apart per device in the bucket's state, no de-duplication operator."""

JOB = "train"
ARROW_BATCH_ROWS = 200_000
"""Rows per Arrow batch in the trainer's session (Spark's default is 10,000): the readings of a
micro-batch's partition reach the packing step in one or a few batches, so most devices are
one row for the processor."""
ROCKSDB_MEMORY_MB = 64
"""The RocksDB stores' shared budget: the size of one of RocksDB's default write buffers
(``write_buffer_size``, 64 MB), for everything. A bucket value is read once a batch and then
rewritten, so a block cache has no second read to serve (the operating system's page cache
holds the files either way); what the budget holds is the memtables (Spark gives them
``writeBufferCacheRatio`` of it) and the files' index and filter blocks."""
STATE_STORE_CONF = {
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": str(ROCKSDB_MEMORY_MB),
}
"""The RocksDB state stores of the trainer's query (the buckets', one per shuffle partition)
share one memory budget, :data:`ROCKSDB_MEMORY_MB`, for their write buffers, block cache and
index and filter blocks, in place of a write buffer pair and a cache each with the index and
filter blocks outside any bound (Spark's own bound is 500 MB). What they hold is on disk; a
smaller cache costs reads from the page cache, not learning."""


MALLOC_ARENAS = "MALLOC_ARENA_MAX"
"""glibc's bound on its malloc arenas (by default 8 per core, each kept at its high-water mark):
the trainer's JVM allocates natively from many threads (RocksDB's and the tasks', Arrow's, the
codecs'), and each thread that finds the arenas busy takes another. The JVM that ``local[N]``
runs gets one arena per task slot, :func:`local_task_slots` (an operator's own value in the
environment wins; under ``spark-submit`` or on a cluster, the JVMs are started elsewhere)."""


def local_task_slots(master: str) -> int | None:
    """The task slots of a local master (``local``, ``local[N]``, ``local[*]``,
    ``local[N,F]``); ``None`` for any other master."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    if match.group(1) is None:
        return 1
    if match.group(1) == "*":
        return os.cpu_count() or 1
    return int(match.group(1))


MMAP_THRESHOLD = "MALLOC_MMAP_THRESHOLD_"
MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's size from which an allocation is a mapping of its own, returned to the system when
freed: its default, 128 KB, held there. Left to itself glibc raises the threshold (up to 32 MB)
each time such a block is freed; from then on the large blocks of a micro-batch (a bucket's
state value of 1-2 MB and a batch's arrays in the Python workers, the JVM's native buffers)
come from the heap and leave it at their high-water mark. The local JVM gets it, and its
Python workers inherit it (their Arrow buffers are pyarrow's own pool's)."""


def native_allocator(settings: Settings) -> dict[str, str]:
    """The environment the trainer's local JVM is launched with for glibc's allocator:
    :data:`MALLOC_ARENAS` and :data:`MMAP_THRESHOLD` (none off a local master)."""
    slots = local_task_slots(settings.spark.master)
    if slots is None:
        return {}
    return {MALLOC_ARENAS: str(slots), MMAP_THRESHOLD: str(MMAP_THRESHOLD_BYTES)}


@dataclass(frozen=True)
class Backfill:
    """A bounded run: readings with ``from_ms <= event_ms < to_ms`` (either end open), from the
    log, or from ``files`` (a file or a folder of JSON lines of telemetry records) when given."""

    from_ms: int | None = None
    to_ms: int | None = None
    files: Path | None = None

    def checkpoint(self, root: str) -> str:
        """Its own checkpoint: the same backfill resumes where it stopped, others start fresh."""
        what = f"{self.from_ms}-{self.to_ms}-{self.files.resolve() if self.files else ''}"
        digest = hashlib.sha256(what.encode()).hexdigest()[:12]
        return versioned(root, f"{JOB}-backfill-{digest}", PLAN_VERSION)


def published_params(spark: SparkSession, settings: Settings) -> DataFrame:
    """Every device's record on ``model.params`` (:data:`SEED_SCHEMA`), tombstones included,
    read once as a batch."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    return (
        kafka_table(spark, settings, settings.topics.model_params)
        .where(F.col("key").isNotNull())
        .where(~F.col("key").cast("string").startswith(FLEET_KEY_PREFIX))  # champions' records
        .select(
            F.col("key").cast("string").alias("device_id"),
            F.col("value").cast("string").alias("value"),
            F.col("offset"),
        )
    )


def source(spark: SparkSession, settings: Settings, backfill: Backfill | None) -> DataFrame:
    """Raw records with a ``value`` column: Kafka (live or from a timestamp) or files."""
    if backfill is not None and backfill.files is not None:
        files = backfill.files
        if files.is_dir():
            return spark.readStream.text(str(files))
        # Spark's file source reads folders: one file is its folder filtered to its name
        return spark.readStream.option("pathGlobFilter", files.name).text(str(files.parent))
    topic = settings.topics.telemetry_raw
    limit = settings.train.max_offsets_per_trigger
    if backfill is not None:
        return kafka_stream(
            spark,
            settings,
            topic,
            from_timestamp_ms=backfill.from_ms,
            max_offsets_per_trigger=limit,
        )
    root, store = settings.checkpoint_root, HadoopFiles(spark)
    starting = resume_offsets(root, JOB, PLAN_VERSION, topic, settings.kafka, store)
    return kafka_stream(spark, settings, topic, starting=starting, max_offsets_per_trigger=limit)


def run_config(settings: Settings, backfill: Backfill | None, checkpoint: str) -> dict[str, Any]:
    """What the observer is told at start (JSON-able)."""
    mode = "live" if backfill is None else ("files" if backfill.files else "backfill")
    return {
        "mode": mode,
        "plan_version": PLAN_VERSION,
        "source": str(backfill.files)
        if backfill and backfill.files
        else settings.topics.telemetry_raw,
        "params_topic": settings.topics.model_params,
        "from_ms": backfill.from_ms if backfill else None,
        "to_ms": backfill.to_ms if backfill else None,
        "trigger_interval": None if backfill else settings.train.trigger_interval,
        "dedup_window": settings.score.dedup_window,
        "detector": {
            "kind": default_detector().kind,
            "hyper": default_detector(Tuning.of(settings.score)).hyper_json(),
        },
        "checkpoint": checkpoint,
    }


@dataclass(frozen=True)
class Training:
    query: StreamingQuery
    publisher: BatchPublisher
    checkpoint: str
    files: CheckpointFiles = LOCAL

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop after the last batch handled is committed (or the query ended by itself)."""
        last = self.publisher.close()
        commit = None if last is None else join(self.checkpoint, "commits", str(last))

        def pending() -> bool:
            return commit is not None and not self.files.exists(commit)

        deadline = time.monotonic() + timeout_s
        while pending() and self.query.isActive and time.monotonic() < deadline:
            if wait_for_query(self.query, 1):
                break  # ended; failure() tells a refused batch from a real failure
        if pending() and self.query.isActive:
            logger.warning("batch %d not committed after %.0fs; stopping anyway", last, timeout_s)
        if self.query.isActive:
            self.query.stop()

    def failure(self) -> str | None:
        """Why the query failed, unless it ended because the stop refused a batch."""
        error = self.query.exception()
        if error is None or self.publisher.refused:
            return None
        return str(error)


def start(
    spark: SparkSession,
    settings: Settings,
    observer: TrainingObserver,
    backfill: Backfill | None = None,
    on_failed: Callable[[int], None] | None = None,
) -> Training:
    checkpoint = (
        versioned(settings.checkpoint_root, JOB, PLAN_VERSION)
        if backfill is None
        else backfill.checkpoint(settings.checkpoint_root)
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
    for key, value in STATE_STORE_CONF.items():
        if spark.conf.get(key, None) is None:  # an operator's own value (spark.conf) wins
            spark.conf.set(key, value)
    readings = readings_frame(
        source(spark, settings, backfill),
        settings.score.dedup_window,
        backfill.from_ms if backfill else None,
        backfill.to_ms if backfill else None,
    )
    expire_after_ms = settings.score.expire_after_s * 1000
    updates = updates_frame(
        readings,
        expire_after_ms,
        published_params(spark, settings),
        settings.score.max_metrics,
        Tuning.of(settings.score),
    )
    publisher = BatchPublisher(settings, observer, on_failed)
    writer = (
        updates.writeStream.queryName(f"fleetwatch-{JOB}")
        .foreachBatch(publisher)
        .option("checkpointLocation", checkpoint)
    )
    writer = (
        writer.trigger(processingTime=settings.train.trigger_interval)
        if backfill is None
        else writer.trigger(availableNow=True)
    )
    observer.on_start(run_config(settings, backfill, checkpoint))
    query = writer.start()
    logger.info(
        "training %s -> %s (checkpoint %s)",
        run_config(settings, backfill, checkpoint)["source"],
        settings.topics.model_params,
        checkpoint,
    )
    return Training(query, publisher, checkpoint, HadoopFiles(spark))


def run(
    settings: Settings,
    stop: threading.Event,
    observer: TrainingObserver,
    backfill: Backfill | None = None,
) -> None:
    """Live: run until ``stop`` is set. Backfill: run until the range is learned (or ``stop``).
    Either way the query stops cleanly: a batch being written completes and is committed, and
    one that had not started writing is left for the next run. A live trainer serves its
    metrics, health and readiness (:mod:`~fleetwatch.streaming.readiness`) on
    ``train.metrics_port`` (unless 0); a backfill, which may run beside it, none."""
    registry = CollectorRegistry()
    port = settings.train.metrics_port if backfill is None else 0
    on_failed = None
    if port:
        metrics = TrainerMetrics(registry)
        observer = MeteredObserver(observer, metrics)
        on_failed = metrics.failed.inc
    ready = QueryReadiness()
    with serve_metrics(registry, port, "FLEETWATCH_TRAIN__METRICS_PORT", ready):
        for name, value in native_allocator(settings).items():
            os.environ.setdefault(name, value)  # the JVM launched next inherits it
        spark = build_session(settings, f"fleetwatch-{JOB}")
        ready.follow_named(spark.streams, f"fleetwatch-{JOB}")
        try:
            log = progress_log(settings.spark.progress_log)
            with progress_exported(spark, JOB, registry if port else None, (log,)):
                _train(spark, settings, stop, observer, backfill, on_failed)
        finally:
            spark.stop()


def _train(
    spark: SparkSession,
    settings: Settings,
    stop: threading.Event,
    observer: TrainingObserver,
    backfill: Backfill | None,
    on_failed: Callable[[int], None] | None = None,
) -> None:
    training = start(spark, settings, observer, backfill, on_failed)
    try:
        watch(training.query, stop, logging.INFO)
        if training.query.isActive:
            logger.info("stopping the training query after its current batch")
            training.stop()
        if (failure := training.failure()) is not None:
            raise TrainError(f"training query failed: {failure}")
    finally:
        try:
            observer.on_stop()
        except Exception:
            logger.exception("the training observer failed to stop")
