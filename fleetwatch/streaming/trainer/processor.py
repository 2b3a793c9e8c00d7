"""The trainer's ``StatefulProcessor`` and the plan around it: readings packed per device
(:mod:`~fleetwatch.streaming.trainer.packing`), grouped by bucket of devices
(:mod:`~fleetwatch.streaming.trainer.bucket_state`), each device learning its readings on top of
its parameters (:func:`~fleetwatch.streaming.trainer.learning.learn_update`), one row per device
whose parameters changed; a device silent for ``score.expire_after_s`` of event time is
forgotten, one tombstone row (no value) each (:mod:`~fleetwatch.streaming.trainer.expiry`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fleetwatch.contracts import model_params
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.errors import ParamsRecordError
from fleetwatch.contracts.telemetry import DEVICE_METRICS
from fleetwatch.models import params
from fleetwatch.models.base import Detector
from fleetwatch.models.batch import Batch
from fleetwatch.models.registry import DEFAULT_TUNING, Tuning
from fleetwatch.streaming.buckets import bucket_of
from fleetwatch.streaming.trainer.bucket_state import (
    BUCKETS,
    Bucket,
    WarmBuckets,
    decode,
    encode,
    merge_newer,
)
from fleetwatch.streaming.trainer.device_rows import per_device_rows
from fleetwatch.streaming.trainer.expiry import arm_timer, forget_due, note
from fleetwatch.streaming.trainer.learning import detector_of, learn_update
from fleetwatch.streaming.trainer.packing import PACKED_SCHEMA, RECORD_COLUMN, pack_batches
from fleetwatch.streaming.trainer.repeats import new_readings
from fleetwatch.streaming.trainer.seen_state import Seen, decode_seen, encode_seen
from fleetwatch.streaming.worker_memory import release_freed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

UPDATE_SCHEMA = (
    "device_id STRING, version BIGINT, batch_from_ms BIGINT, batch_to_ms BIGINT, value STRING"
)
"""What the per-device processor emits for a device whose parameters changed: the record value
for ``model.params`` and the event-time range of the readings it learned in this batch. A
forgotten device's row has only its ``device_id``: a tombstone."""
UPDATE_COLUMNS = ("device_id", "version", "batch_from_ms", "batch_to_ms", "value")
FAILED = -1
"""The ``version`` of a device's row when its learning raised: counted by the publisher
(``fleetwatch_train_device_failures_total``), never written."""
SEED_SCHEMA = "device_id STRING, value STRING, offset BIGINT"
"""``model.params`` records of devices (``value`` null: a tombstone), in offset order per key."""
_WARM = WarmBuckets()


def readings_frame(
    raw: DataFrame, dedup_window: str, from_ms: int | None = None, to_ms: int | None = None
) -> DataFrame:
    """Kafka rows of ``telemetry.raw`` (or lines of files: a ``value`` column) → each device's
    readings packed per Arrow batch (:data:`~fleetwatch.streaming.trainer.packing.PACKED_SCHEMA`,
    records parsed and checked by :func:`~fleetwatch.streaming.trainer.packing.pack`), in event
    time: the watermark ``dedup_window`` behind the newest event time. Only readings with
    ``from_ms <= event_ms < to_ms`` (either end open) are kept.

    Bytes that are not UTF-8 reach no Python worker (its Arrow conversion would fail the whole
    batch on them): such a record is left out here, as the scorer dead-letters it. Repeats of a
    reading (the raw log is at-least-once) are told apart per device in the bucket's state
    (:mod:`~fleetwatch.streaming.trainer.repeats`), and readings behind the watermark are not
    learned.
    """
    # lazy: pyspark is imported only where Spark runs
    from pyspark.sql import functions as F

    value = F.col("value").cast("string")
    records = raw.select(F.when(F.is_valid_utf8(value), value).alias(RECORD_COLUMN))
    return (
        records.where(F.col(RECORD_COLUMN).isNotNull())
        .mapInArrow(partial(pack_batches, from_ms=from_ms, to_ms=to_ms), PACKED_SCHEMA)
        .withColumn("event_time", F.timestamp_millis("newest_ms"))
        .withWatermark("event_time", dedup_window)
    )


def warm_buckets() -> WarmBuckets:
    """The detectors of the buckets of its latest partition this Python worker last wrote (see
    :mod:`fleetwatch.streaming.trainer.bucket_state`): a reused worker skips reading their
    parameters. (A function of the module, so that the processor is pickled with a reference to
    it, not with the object.)"""
    return _WARM


def _bucket_trainer(
    expire_after_ms: int, max_metrics: int = DEVICE_METRICS, tuning: Tuning = DEFAULT_TUNING
) -> Any:
    """The ``StatefulProcessor`` (built lazily: pyspark is imported only where Spark runs)."""
    # lazy: pyspark is imported only where Spark runs
    from pyspark import TaskContext
    from pyspark.sql.streaming.stateful_processor import (
        ExpiredTimerInfo,
        StatefulProcessor,
        StatefulProcessorHandle,
        TimerValues,
    )
    from pyspark.sql.types import StringType, StructField, StructType

    state_schema = StructType(
        [StructField("params", StringType(), False), StructField("seen", StringType(), False)]
    )

    class BucketTrainer(StatefulProcessor):
        """Per bucket of devices: their parameters, and when each was last heard with the
        sequence numbers it sent (:class:`~fleetwatch.streaming.trainer.seen_state.Seen`), in one
        ``ValueState``; each device with new readings learns them; the updates are emitted
        together. The bucket's event-time timer forgets the devices silent for
        ``expire_after_ms``."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.params = handle.getValueState("params", state_schema)
            task = TaskContext.get()  # None where the plan is made (the driver's init)
            if task is not None:
                warm_buckets().enter(task.partitionId())

        def _stored(self) -> tuple[str | None, Seen]:
            held = self.params.get()
            if held is None:
                return None, decode_seen(None)
            return str(held[0]), decode_seen(str(held[1]))

        def _save(self, value: str, seen: Seen) -> None:
            due = arm_timer(seen, expire_after_ms)
            if due is not None:
                self.handle.registerTimer(due)
            self.params.update((value, encode_seen(seen)))

        def _take(self, key: tuple[int]) -> tuple[str | None, Seen, Bucket]:
            """The bucket's state value, what it holds of when each of its devices was last heard
            and of the numbers it sent, and its devices' parameters and detectors (warm when
            this worker wrote that value last)."""
            stored, seen = self._stored()
            return stored, seen, warm_buckets().take(key, stored)

        def _put(self, key: tuple[int], value: str, seen: Seen, bucket: Bucket) -> None:
            """Write the bucket's new state value, and keep its detectors warm for it."""
            self._save(value, seen)
            warm_buckets().keep(key, value, bucket)

        def handleInputRows(
            self, key: tuple[int], rows: Any, timerValues: TimerValues
        ) -> Iterator[pd.DataFrame]:
            stored, seen, bucket = self._take(key)
            batches = new_batches(seen, rows, timerValues.getCurrentWatermarkInMs())
            note(seen, ((d, int(batch.event_ms.max())) for d, batch in batches))
            updates = learn_bucket(bucket.texts, batches, bucket.detectors, max_metrics, tuning)
            value = stored if updates.empty and stored is not None else encode(bucket.texts)
            self._put(key, value, seen, bucket)
            if not updates.empty:
                yield updates

        def handleExpiredTimer(
            self, key: tuple[int], timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
        ) -> Iterator[pd.DataFrame]:
            stored, seen, bucket = self._take(key)
            watermark = timerValues.getCurrentWatermarkInMs()
            gone = forget_due(bucket.texts, seen, watermark, expire_after_ms)
            for device_id in gone:
                bucket.detectors.pop(device_id, None)
            value = encode(bucket.texts) if gone or stored is None else stored
            self._put(key, value, seen, bucket)
            if gone:
                logger.info(
                    "bucket %s: %d devices silent for expire_after forgotten", key, len(gone)
                )
                yield tombstones(gone)

        def handleInitialState(
            self, key: tuple[int], initialState: Any, timerValues: TimerValues
        ) -> None:
            stored, seen = self._stored()
            bucket = decode(stored)
            merge_newer(bucket, seeds(initialState))
            note(seen, last_heard(bucket))
            self._save(encode(bucket), seen)

        def close(self) -> None:
            """A task's end (and once where the plan is made): the memory the worker freed goes
            back to the system (the warm buckets stay)."""
            release_freed()

    return BucketTrainer()


def new_batches(
    seen: Seen, chunks: Iterable[pd.DataFrame], watermark_ms: int
) -> list[tuple[str, Batch]]:
    """Each device's new readings within the watermark in packed ``chunks``
    (:func:`~fleetwatch.streaming.trainer.repeats.new_readings`), as a batch per device that has
    any; what ``seen`` holds of their sequence numbers is updated. A device with nothing new
    that the bucket does not know leaves nothing in it (its expiry would never forget it)."""
    held, heard = seen["seqs"], seen["devices"]
    batches = []
    for device_id, rows in per_device_rows(chunks):
        last_ms = heard.get(device_id)
        batch, after = new_readings(rows, held.get(device_id), watermark_ms, last_ms)
        if len(batch):
            batches.append((device_id, batch))
        if len(batch) or last_ms is not None:
            held[device_id] = after
    return batches


def tombstones(devices: Iterable[str]) -> pd.DataFrame:
    """One row (:data:`UPDATE_SCHEMA`) per forgotten device: its id, nothing else."""
    ids = list(devices)
    missing = pd.array([None] * len(ids), dtype="Int64")
    return pd.DataFrame(
        {
            "device_id": ids,
            "version": missing,
            "batch_from_ms": missing,
            "batch_to_ms": missing,
            "value": pd.Series([None] * len(ids), dtype=object),
        },
        columns=list(UPDATE_COLUMNS),
    )


def last_heard(bucket: dict[str, str]) -> Iterator[tuple[str, int]]:
    """Seeded devices, each with the newest event time its parameters learned (what the trainer
    last heard of it before its checkpoint was new)."""
    for device_id, text in bucket.items():
        trained_to = params.loads(text).get("trained_to_ms")
        if trained_to is not None:
            yield device_id, int(trained_to)


def learn_bucket(
    bucket: dict[str, str],
    batches: Iterable[tuple[str, Batch]],
    detectors: dict[str, Detector] | None = None,
    max_metrics: int = DEVICE_METRICS,
    tuning: Tuning = DEFAULT_TUNING,
) -> pd.DataFrame:
    """Each device learns its batch on top of its parameters in ``bucket`` (updated in place);
    one row (:data:`UPDATE_SCHEMA`) per device whose parameters changed.

    ``detectors`` (device id → the detector of its parameters in ``bucket``) is used where it
    has the device and filled in as devices learn, so that the next batch does not read their
    parameters text again.

    A device whose learning raises is logged and left as it was: one device never fails the
    bucket's batch (the scorer dead-letters and quarantines such a device; the trainer only
    skips it). A device learns at most ``max_metrics`` metric names (``score.max_metrics``, the
    scorer's bound): those it has learned, then new ones in the order they come; readings of
    the others are not learned (the scorer dead-letters them with the reason). A new device
    starts with the default detector with ``tuning`` (``score.false_alerts_per_device_day``,
    ``score.new_normal_after_s``)."""
    rows: list[tuple[str, int, int, int, str | None]] = []
    for device_id, batch in batches:
        previous = bucket.get(device_id)
        detector = None if detectors is None else detectors.pop(device_id, None)
        try:
            if detector is None:
                detector = detector_of(previous, tuning)
            batch = within_metrics(device_id, batch, detector.learned_metrics(), max_metrics)
            update = learn_update(previous, batch, detector)
        except Exception:
            # its parameters stay as they were (the detector, maybe half-taught, is dropped:
            # the next batch reads them from their text)
            logger.exception(
                "device %s: learning %d readings failed; its parameters are unchanged",
                device_id,
                len(batch),
            )
            rows.append((device_id, FAILED, int(batch.event_ms[0]), int(batch.event_ms[-1]), None))
            continue
        if detectors is not None:
            detectors[device_id] = detector
        if update is None:
            continue
        bucket[device_id] = update.params_json
        published_ms = now_ms()
        value = model_params.encode_device(
            device_id, update.params_json, published_ms, update.header
        )
        version = int(update.header["version"])
        rows.append((device_id, version, int(batch.event_ms[0]), int(batch.event_ms[-1]), value))
    return pd.DataFrame(rows, columns=list(UPDATE_COLUMNS))


def within_metrics(device_id: str, batch: Batch, learned: list[str], limit: int) -> Batch:
    """``batch`` without the rows of metric names beyond the ``limit`` a device may have:
    those in ``learned``, then the batch's new names in the order they come (the rest logged)."""
    if len(set(learned) | set(batch.names)) <= limit:
        return batch
    allowed = set(learned)
    for code in dict.fromkeys(batch.codes.tolist()):
        if len(allowed) < limit:
            allowed.add(batch.names[code])
    keep = np.isin(batch.codes, [i for i, name in enumerate(batch.names) if name in allowed])
    names = np.asarray(batch.names, dtype=object)
    left = sorted(set(batch.names) - allowed)
    logger.warning(
        "device %s: %d metric names beyond the %d a device may have are not learned: %s",
        device_id,
        len(left),
        limit,
        ", ".join(left[:5]) + (", …" if len(left) > 5 else ""),
    )
    return Batch.from_arrays(batch.event_ms[keep], names[batch.codes[keep]], batch.value[keep])


def seeds(records: pd.DataFrame) -> Iterator[tuple[str, str]]:
    """``(device_id, parameters)`` of the highest version per device among ``model.params``
    rows (:data:`SEED_SCHEMA`) after the device's last tombstone (a device forgotten, and
    not heard again since, is not seeded)."""
    if "offset" in records.columns:
        records = records.sort_values("offset", kind="stable")
    for device_id, values in records.groupby("device_id", sort=False)["value"]:
        latest = latest_params(str(device_id), values)
        if latest is not None:
            yield str(device_id), latest


def latest_params(device_id: str, values: Iterable[str | None]) -> str | None:
    """The parameters of the highest version among ``model.params`` record values in offset
    order, after the last tombstone (``None``: the device was forgotten) — records that are not
    a device's parameters are logged and skipped."""
    best: tuple[int, dict[str, Any]] | None = None
    for value in values:
        if value is None or (isinstance(value, float) and value != value):  # pandas' NaN
            best = None  # a tombstone: what came before it is forgotten
            continue
        try:
            record = model_params.decode(value)
        except ParamsRecordError as exc:
            logger.warning("device %s: skipping a model.params record: %s", device_id, exc)
            continue
        if "scope" in record:
            logger.warning("device %s: skipping a fleet champion's record", device_id)
            continue
        if best is None or record["version"] > best[0]:
            best = (record["version"], record["params"])
    return None if best is None else params.dumps(best[1])


def updates_frame(
    readings: DataFrame,
    expire_after_ms: int,
    seed: DataFrame | None = None,
    max_metrics: int = DEVICE_METRICS,
    tuning: Tuning = DEFAULT_TUNING,
) -> DataFrame:
    """Packed readings (:func:`readings_frame`) → one row per device whose parameters changed,
    and a tombstone row per device forgotten after ``expire_after_ms`` of event-time silence
    (:data:`UPDATE_SCHEMA`; the watermark is the readings'). ``seed`` (:data:`SEED_SCHEMA`,
    ``model.params`` record values) initialises the state of a fresh checkpoint."""
    bucketed = readings.withColumn("bucket", bucket_of(readings["device_id"], BUCKETS))
    initial = None
    if seed is not None:
        seeded = seed.withColumn("bucket", bucket_of(seed["device_id"], BUCKETS))
        initial = seeded.groupBy("bucket")
    return bucketed.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=_bucket_trainer(expire_after_ms, max_metrics, tuning),
        outputStructType=UPDATE_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
        initialState=initial,
    )
