"""The trainer: ``telemetry.raw`` → each device's detector learns the new readings →
changed parameters on the compacted ``model.params`` topic.

Thin Spark glue around :func:`fleetwatch.streaming.training.learn_device`:

- readings are parsed and de-duplicated by ``(device_id, seq)`` exactly as the scorer does
  (:func:`fleetwatch.streaming.score.readings_frame`, ``score.dedup_window``), packed into one
  row of arrays per device and Arrow batch (:mod:`fleetwatch.streaming.device_batches`: the
  processor's cost is per row it is handed) and grouped by bucket of devices
  (:mod:`fleetwatch.streaming.device_buckets`: its cost is also per key) into
  ``transformWithStateInPandas`` (time mode "None");
- per bucket, a ``ValueState`` holds its devices' detector parameters (JSON) in the RocksDB
  state store. Each device's readings of the micro-batch are learned on top of its parameters
  (never refitted from history) and a row is emitted for each device whose parameters changed;
  ``version`` goes up by one per batch learned. A Python worker keeps the detectors of the
  buckets it wrote last (:class:`~fleetwatch.streaming.device_buckets.WarmBuckets`), so a
  bucket whose state is still that value is not read back from its text;
- the rows are written to ``model.params`` (key = device id, value
  :func:`~fleetwatch.streaming.training.publication`) inside ``foreachBatch``, which also tells
  the :class:`~fleetwatch.streaming.observer.TrainingObserver` what the batch did.

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
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.settings import Settings
from fleetwatch.models import params
from fleetwatch.models.base import Detector
from fleetwatch.models.batch import Batch
from fleetwatch.models.errors import ModelError
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.checkpoints import resume_offsets, versioned
from fleetwatch.streaming.device_batches import (
    PACKED_SCHEMA,
    READING_COLUMNS,
    pack_batches,
    per_device,
)
from fleetwatch.streaming.device_buckets import (
    WarmBuckets,
    bucket_of,
    decode,
    encode,
    merge_newer,
)
from fleetwatch.streaming.observer import TrainingObserver
from fleetwatch.streaming.score import readings_frame
from fleetwatch.streaming.session import wait_for_query
from fleetwatch.streaming.training import detector_of, learn_update, params_of, publication

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

logger = logging.getLogger(__name__)

PLAN_VERSION = 2
"""Bump when the query's stateful plan changes (Spark cannot reuse the old checkpoint)."""

JOB = "train"
ARROW_BATCH_ROWS = 200_000
"""Rows per Arrow batch in the trainer's session (Spark's default is 10,000): the readings of a
micro-batch's partition reach the packing step in one or a few batches, so most devices are
one row for the processor."""
UPDATE_SCHEMA = (
    "device_id STRING, version BIGINT, batch_from_ms BIGINT, batch_to_ms BIGINT, value STRING"
)
"""What the per-device processor emits for a device whose parameters changed: the record value
for ``model.params`` and the event-time range of the readings it learned in this batch."""
UPDATE_COLUMNS = ("device_id", "version", "batch_from_ms", "batch_to_ms", "value")
SEED_SCHEMA = "device_id STRING, value STRING"
_WARM = WarmBuckets()


def warm_buckets() -> WarmBuckets:
    """The detectors of the buckets this Python worker last wrote (see
    :mod:`fleetwatch.streaming.device_buckets`): a reused worker skips reading their parameters.
    (A function of the module, so that the processor is pickled with a reference to it, not
    with the object.)"""
    return _WARM


class TrainError(FleetwatchError):
    """The training query failed or was configured with something it cannot run."""


@dataclass(frozen=True)
class Backfill:
    """A bounded run: readings with ``from_ms <= event_ms < to_ms`` (either end open), from the
    log, or from ``files`` (a file or a folder of JSON lines of telemetry records) when given."""

    from_ms: int | None = None
    to_ms: int | None = None
    files: Path | None = None

    def checkpoint(self, root: Path) -> Path:
        """Its own checkpoint: the same backfill resumes where it stopped, others start fresh."""
        what = f"{self.from_ms}-{self.to_ms}-{self.files.resolve() if self.files else ''}"
        digest = hashlib.sha256(what.encode()).hexdigest()[:12]
        return versioned(root, f"{JOB}-backfill-{digest}", PLAN_VERSION)


def _bucket_trainer() -> Any:
    """The ``StatefulProcessor`` (built lazily: pyspark is imported only where Spark runs)."""
    from pyspark.sql.streaming.stateful_processor import (
        StatefulProcessor,
        StatefulProcessorHandle,
        TimerValues,
    )
    from pyspark.sql.types import StringType, StructField, StructType

    state_schema = StructType([StructField("params", StringType(), False)])

    class BucketTrainer(StatefulProcessor):
        """Per bucket of devices: their parameters in one ``ValueState``; each device with
        readings learns them; the updates are emitted together."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.params = handle.getValueState("params", state_schema)

        def handleInputRows(
            self, key: tuple[int], rows: Any, timerValues: TimerValues
        ) -> Iterator[pd.DataFrame]:
            stored = None if (held := self.params.get()) is None else str(held[0])
            warm = warm_buckets()
            bucket = warm.take(key, stored)
            updates = learn_bucket(bucket.texts, per_device(rows), bucket.detectors)
            if updates.empty:
                if stored is not None:
                    warm.keep(key, stored, bucket)
                return
            value = encode(bucket.texts)
            self.params.update((value,))
            warm.keep(key, value, bucket)
            yield updates

        def handleInitialState(
            self, key: tuple[int], initialState: Any, timerValues: TimerValues
        ) -> None:
            stored = self.params.get()
            bucket = decode(None if stored is None else str(stored[0]))
            merge_newer(bucket, seeds(initialState))
            self.params.update((encode(bucket),))

        def close(self) -> None:
            return None

    return BucketTrainer()


def learn_bucket(
    bucket: dict[str, str],
    batches: Iterable[tuple[str, Batch]],
    detectors: dict[str, Detector] | None = None,
) -> pd.DataFrame:
    """Each device learns its batch on top of its parameters in ``bucket`` (updated in place);
    one row (:data:`UPDATE_SCHEMA`) per device whose parameters changed.

    ``detectors`` (device id → the detector of its parameters in ``bucket``) is used where it
    has the device and filled in as devices learn, so that the next batch does not read their
    parameters text again."""
    rows: list[tuple[str, int, int, int, str]] = []
    for device_id, batch in batches:
        previous = bucket.get(device_id)
        detector = None if detectors is None else detectors.pop(device_id, None)
        if detector is None:
            detector = detector_of(previous)
        update = learn_update(previous, batch, detector)
        if detectors is not None:
            detectors[device_id] = detector
        if update is None:
            continue
        bucket[device_id] = update.params_json
        published_ms = time.time_ns() // 1_000_000
        value = publication(device_id, update.params_json, published_ms, update.header)
        version = int(update.header["version"])
        rows.append((device_id, version, int(batch.event_ms[0]), int(batch.event_ms[-1]), value))
    return pd.DataFrame(rows, columns=list(UPDATE_COLUMNS))


def seeds(records: pd.DataFrame) -> Iterator[tuple[str, str]]:
    """``(device_id, parameters)`` of the highest version per device among ``model.params``
    rows (:data:`SEED_SCHEMA`)."""
    for device_id, values in records.groupby("device_id", sort=False)["value"]:
        latest = latest_params(str(device_id), values)
        if latest is not None:
            yield str(device_id), latest


def latest_params(device_id: str, values: Iterable[str]) -> str | None:
    """The parameters of the highest version among ``model.params`` record values (records
    that do not hold detector parameters are logged and skipped)."""
    best: dict[str, Any] | None = None
    for value in values:
        try:
            candidate = params_of(value)
            version = int(candidate["version"])
        except (ModelError, KeyError, TypeError, ValueError) as exc:
            logger.warning("device %s: skipping a model.params record: %s", device_id, exc)
            continue
        if best is None or version > int(best["version"]):
            best = candidate
    return None if best is None else params.dumps(best)


def updates_frame(readings: DataFrame, seed: DataFrame | None = None) -> DataFrame:
    """Readings (:func:`readings_frame`) → one row per device whose parameters changed
    (:data:`UPDATE_SCHEMA`). ``seed`` (:data:`SEED_SCHEMA`, ``model.params`` record values)
    initialises the state of a fresh checkpoint."""
    packed = readings.select(*READING_COLUMNS).mapInArrow(pack_batches, PACKED_SCHEMA)
    bucketed = packed.withColumn("bucket", bucket_of(packed["device_id"]))
    initial = None
    if seed is not None:
        initial = seed.withColumn("bucket", bucket_of(seed["device_id"])).groupBy("bucket")
    return bucketed.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=_bucket_trainer(),
        outputStructType=UPDATE_SCHEMA,
        outputMode="Append",
        timeMode="None",
        initialState=initial,
    )


def within(readings: DataFrame, from_ms: int | None, to_ms: int | None) -> DataFrame:
    from pyspark.sql import functions as F

    if from_ms is not None:
        readings = readings.where(F.col("event_ms") >= F.lit(from_ms))
    if to_ms is not None:
        readings = readings.where(F.col("event_ms") < F.lit(to_ms))
    return readings


def published_params(spark: SparkSession, settings: Settings) -> DataFrame:
    """Every device's record on ``model.params`` (:data:`SEED_SCHEMA`), read once as a batch."""
    from pyspark.sql import functions as F

    from fleetwatch.contracts.fleet import FLEET_KEY_PREFIX

    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
        .option("subscribe", settings.topics.model_params)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .where(F.col("key").isNotNull() & F.col("value").isNotNull())
        .where(~F.col("key").cast("string").startswith(FLEET_KEY_PREFIX))  # champions' records
        .select(
            F.col("key").cast("string").alias("device_id"),
            F.col("value").cast("string").alias("value"),
        )
    )


class StopRequested(TrainError):
    """Raised into a micro-batch that starts after the stop began: it writes nothing and is
    not committed, so the next run learns it."""


class BatchPublisher:
    """The ``foreachBatch`` function: write the batch's updates, then tell the observer.

    A clean stop (:meth:`close`) waits for a batch being written, and refuses the batches that
    start after it, so the query never stops between a write and its commit (which would
    re-publish that batch's versions on restart)."""

    def __init__(self, settings: Settings, observer: TrainingObserver) -> None:
        self.bootstrap = settings.kafka.bootstrap_servers
        self.topic = settings.topics.model_params
        self.observer = observer
        self.last_batch: int | None = None
        """The id of the last batch handled (written or empty)."""
        self.refused = False
        self._lock = threading.Lock()
        self._closing = False

    def close(self) -> int | None:
        """Refuse new batches; returns the last batch handled, once it is done."""
        with self._lock:
            self._closing = True
            return self.last_batch

    def write(self, records: DataFrame) -> None:
        """Write ``key, value`` rows to ``model.params`` (a batch Kafka write)."""
        (
            records.write.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", self.topic)
            .save()
        )

    def __call__(self, updates: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closing:
                self.refused = True
                raise StopRequested(f"batch {batch_id} refused: the trainer is stopping")
            self._publish(updates, batch_id)
            self.last_batch = batch_id

    def _publish(self, updates: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        updates.persist()
        try:
            summary = updates.agg(
                F.count("*").alias("n"),
                F.min("batch_from_ms").alias("lo"),
                F.max("batch_to_ms").alias("hi"),
            ).first()
            if summary is None or not summary["n"]:
                return
            self.write(updates.select(F.col("device_id").alias("key"), "value"))
        finally:
            updates.unpersist()
        n, lo, hi = int(summary["n"]), int(summary["lo"]), int(summary["hi"])
        logger.info("batch %d: parameters of %d devices published to %s", batch_id, n, self.topic)
        try:
            self.observer.on_batch(batch_id, n, lo, hi)
        except Exception:
            logger.exception("the training observer failed on batch %d; training goes on", batch_id)


def source(spark: SparkSession, settings: Settings, backfill: Backfill | None) -> DataFrame:
    """Raw records with a ``value`` column: Kafka (live or from a timestamp) or files."""
    if backfill is not None and backfill.files is not None:
        files = backfill.files
        if files.is_dir():
            return spark.readStream.text(str(files))
        # Spark's file source reads folders: one file is its folder filtered to its name
        return spark.readStream.option("pathGlobFilter", files.name).text(str(files.parent))
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
        .option("subscribe", settings.topics.telemetry_raw)
        .option("failOnDataLoss", "false")
    )
    if settings.train.max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", settings.train.max_offsets_per_trigger)
    if backfill is None:
        reader = reader.option(
            "startingOffsets",
            resume_offsets(
                settings.checkpoint_root,
                JOB,
                PLAN_VERSION,
                settings.topics.telemetry_raw,
                settings.kafka.bootstrap_servers,
            ),
        )
    elif backfill.from_ms is not None:
        reader = reader.option("startingTimestamp", str(backfill.from_ms)).option(
            "startingOffsetsByTimestampStrategy", "latest"
        )
    else:
        reader = reader.option("startingOffsets", "earliest")
    return reader.load()


def run_config(settings: Settings, backfill: Backfill | None, checkpoint: Path) -> dict[str, Any]:
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
        "detector": {"kind": default_detector().kind, "hyper": default_detector().hyper_json()},
        "checkpoint": str(checkpoint),
    }


@dataclass(frozen=True)
class Training:
    query: StreamingQuery
    publisher: BatchPublisher
    checkpoint: Path

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop after the last batch handled is committed (or the query ended by itself)."""
        last = self.publisher.close()
        commit = None if last is None else self.checkpoint / "commits" / str(last)
        deadline = time.monotonic() + timeout_s
        while (
            commit is not None
            and not commit.exists()
            and self.query.isActive
            and time.monotonic() < deadline
        ):
            if wait_for_query(self.query, 1):
                break  # ended; failure() tells a refused batch from a real failure
        if commit is not None and not commit.exists() and self.query.isActive:
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
) -> Training:
    checkpoint = (
        versioned(settings.checkpoint_root, JOB, PLAN_VERSION)
        if backfill is None
        else backfill.checkpoint(settings.checkpoint_root)
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
    readings = readings_frame(source(spark, settings, backfill), settings.score.dedup_window)
    if backfill is not None:
        readings = within(readings, backfill.from_ms, backfill.to_ms)
    updates = updates_frame(readings, published_params(spark, settings))
    publisher = BatchPublisher(settings, observer)
    writer = (
        updates.writeStream.queryName(f"fleetwatch-{JOB}")
        .foreachBatch(publisher)
        .option("checkpointLocation", str(checkpoint))
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
    return Training(query, publisher, checkpoint)


def log_progress(progress: dict[str, Any] | None, logged: int | None) -> int | None:
    """Log where a finished micro-batch's time went, once per batch; returns its id."""
    if not progress or progress.get("batchId") == logged:
        return logged
    durations = progress.get("durationMs", {})
    state = progress.get("stateOperators") or [{}]
    logger.info(
        "batch %s: %s readings in %s ms (add batch %s ms, of it state commits %s ms); "
        "state %s rows, %s MB",
        progress.get("batchId"),
        progress.get("numInputRows"),
        durations.get("triggerExecution"),
        durations.get("addBatch"),
        sum(int(op.get("commitTimeMs", 0)) for op in state),
        sum(int(op.get("numRowsTotal", 0)) for op in state),
        sum(int(op.get("memoryUsedBytes", 0)) for op in state) // 1_000_000,
    )
    return int(progress["batchId"])


def run(
    settings: Settings,
    stop: threading.Event,
    observer: TrainingObserver,
    backfill: Backfill | None = None,
) -> None:
    """Live: run until ``stop`` is set. Backfill: run until the range is learned (or ``stop``).
    Either way the query stops cleanly: a batch being written completes and is committed, and
    one that had not started writing is left for the next run."""
    from fleetwatch.streaming.session import build_session

    spark = build_session(settings, f"fleetwatch-{JOB}")
    try:
        training = start(spark, settings, observer, backfill)
        try:
            logged: int | None = None
            while training.query.isActive and not stop.is_set():
                if wait_for_query(training.query, 1):
                    break
                logged = log_progress(training.query.lastProgress, logged)
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
    finally:
        spark.stop()
