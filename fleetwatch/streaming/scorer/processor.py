"""The scorer's ``StatefulProcessor``: Spark's side of
:mod:`~fleetwatch.streaming.scorer.bucket_step`, which does the work of a bucket's micro-batch.

The operator is keyed by a *bucket* of devices (a hash of the device id:
:func:`~fleetwatch.streaming.buckets.bucket_of` into
:data:`~fleetwatch.streaming.buckets.BUCKETS`), not by device: every
state call of ``transformWithStateInPandas`` is a round trip between the Python worker and the
JVM, and per key the framework adds a few more, which at one key per device cost more than the
scoring itself. Per bucket:

- ``live`` (``ValueState``): one value holding every device's state of the bucket
  (:class:`~fleetwatch.streaming.scorer.bucket_step.BucketState`, a
  :class:`~fleetwatch.streaming.scorer.device_state.DeviceScoringState` each) — one read and one
  write per bucket per micro-batch — pickled, each device's state a pickle of its own inside
  it, unpickled only for the devices the batch reads
  (:mod:`~fleetwatch.streaming.scorer.bucket_value`): the state holds only JSON's types (dicts
  with string keys, lists, strings, numbers, None; tested), which pickle gives back exactly, NaN
  included, faster and smaller than JSON text. It is read back only from the query's own
  checkpoint. The value is ``BINARY``, not text: Spark hands it to Python as a latin-1 string that
  Pyrolite builds a byte at a time and UTF-8 encodes, over twice the JVM's cost of ASCII text
  of the same pickle, but a text form moves that cost rather than removing it (base64's
  decoding in the worker, hex's doubled bytes on the write), so over a read and a write none
  is cheaper;
- ``params`` (``MapState`` by device): the newest parameters as JSON and their version, written
  when a new version arrives and read only when this worker has not parsed them yet;
- ``fleet`` (``MapState`` by scope): the newest champion of each scope seen on ``model.params``
  (every bucket gets each ``fleet:{scope}`` record), read only on a worker that has not parsed
  it yet; ``live`` lists the scopes and their versions;
- one event-time timer at the earliest ``last seen + session gap`` among its devices; when it
  fires, the devices that are due fall silent
  (:func:`~fleetwatch.streaming.scorer.bucket_step.expire_bucket`; those silent for
  ``expire_after`` are forgotten, with tombstones on ``device.state`` and ``device.sessions``)
  and the next earliest is armed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fleetwatch.contracts import clock
from fleetwatch.contracts.deadletter import source_headers
from fleetwatch.contracts.settings import Settings
from fleetwatch.heap import settle_worker
from fleetwatch.streaming.scorer.batch_counts import bucket_counts, count_rows, quarantined
from fleetwatch.streaming.scorer.bucket_step import (
    BucketBatch,
    BucketState,
    ParamsStore,
    arm_timer,
    expire_bucket,
    new_bucket,
    score_bucket,
)
from fleetwatch.streaming.scorer.bucket_value import dump_bucket, load_bucket
from fleetwatch.streaming.scorer.output import Role
from fleetwatch.streaming.scorer.policy import Policy, policy_of
from fleetwatch.streaming.scorer.readings import Refused, readings_by_device

logger = logging.getLogger(__name__)


OUTPUT_COLUMNS = ("topic", "key", "value", "role", "headers")
"""The operator's output columns, strings each (the job's ``OUTPUT_SCHEMA``), in order: the
frames :func:`output_frame` builds label them by position."""


def topic_names(settings: Settings) -> dict[Role, str]:
    t = settings.topics
    return {
        Role.ALERTS: t.alerts,
        Role.STATE: t.device_state,
        Role.SESSIONS: t.device_sessions,
        Role.LATE: t.telemetry_late,
        Role.DEADLETTER: t.telemetry_deadletter,
    }


def output_frame(
    records: list[tuple[str, Role, str]],
    topics: dict[Role, str],
    dead: Sequence[Refused] = (),
    source_topic: str = "",
    counts: Mapping[str, int] | None = None,
    tombstones: Sequence[tuple[str, Role]] = (),
) -> pd.DataFrame:
    """(device id, role, value) records, tombstones and dead letters → the operator's output
    rows, followed by the micro-batch's count rows
    (:mod:`~fleetwatch.streaming.scorer.batch_counts`). A tombstone is the device id as the key
    and a null value (the Kafka sink writes it as a tombstone). A dead letter's value is the
    record as it was on ``source_topic``; its headers (JSON here, made Kafka headers by the job)
    say the stage, the reason and where the record was.

    The frame's columns are Arrow strings labelled 0, 1, … in the order of
    :data:`OUTPUT_COLUMNS`: pyspark hands such a column to Arrow as it is, where a column of
    Python objects is checked for nulls and converted row by row, and it reorders a frame by
    name (a copy of it) only when its labels are strings."""
    rows: dict[str, list[Any]] = {  # in the order of OUTPUT_COLUMNS
        "topic": [topics[role] for _, role, _ in records],
        "key": [_key(device, role, value) for device, role, value in records],
        "value": [value for _, _, value in records],
        "role": [role.value for _, role, _ in records],
        "headers": [None] * len(records),
    }
    for device, role in tombstones:
        rows["topic"].append(topics[role])
        rows["key"].append(device)
        rows["value"].append(None)
        rows["role"].append(role.value)
        rows["headers"].append(None)
    for refused in dead:
        rows["topic"].append(topics[Role.DEADLETTER])
        rows["key"].append(refused.device_id)
        rows["value"].append(refused.record.text)
        rows["role"].append(Role.DEADLETTER.value)
        rows["headers"].append(dead_letter_headers(refused, source_topic))
    for name, values in count_rows(counts or {}).items():
        rows[name].extend(values)
    return _arrow_frame(rows)


def _arrow_frame(rows: dict[str, list[Any]]) -> pd.DataFrame:
    """Columns of strings and ``None`` (:data:`OUTPUT_COLUMNS`) as a frame of Arrow string
    columns labelled by position."""
    return pd.DataFrame(
        {
            i: pd.arrays.ArrowExtensionArray(pa.array(values, pa.string()))
            for i, values in enumerate(rows.values())
        },
        copy=False,
    )


def dead_letter_headers(refused: Refused, source_topic: str) -> str:
    """A dead letter's headers as JSON ``[[key, value], ...]``, the gateway's ``fw.reason``
    among them."""
    partition, offset = refused.record.source
    headers = source_headers("score", refused.reason, source_topic, partition, offset)
    return json.dumps([list(h) for h in headers], separators=(",", ":"))


def _key(device_id: str, role: Role, value: str) -> str:
    """The record key: the device id, except on the sessions topic, which is compacted by
    session (each session's latest record is kept, not only a device's latest session)."""
    if role == Role.SESSIONS:
        return str(json.loads(value)["session_id"])
    return device_id


@dataclass(frozen=True)
class Context:
    """What every bucket's micro-batch is scored with."""

    policy: Policy
    store: ParamsStore
    topics: dict[Role, str]
    raw_topic: str


def score_rows(
    frame: pd.DataFrame,
    bucket: BucketState,
    saved: bytes | None,
    bucket_id: int,
    watermark: int,
    now_ms: int,
    context: Context,
) -> pd.DataFrame:
    """A bucket's micro-batch: the operator's input rows (``src``: ``r`` a reading, ``p`` a
    ``model.params`` record) → its output rows; ``bucket`` (stored as ``saved``) moves on."""
    is_params = frame["src"].to_numpy() == "p"
    params: list[tuple[str, str | None]] = []
    if is_params.any():
        records = frame.loc[is_params].sort_values("offset", kind="stable")
        keys, values = records["device_id"], records["params"]
        params = [
            (str(k), None if v is None or v != v else str(v))  # NaN: a tombstone
            for k, v in zip(keys, values, strict=True)
        ]
        frame = frame.loc[~is_params]
    sources = zip(_integers(frame["partition"]), _integers(frame["offset"]), strict=True)
    found = readings_by_device(frame["device_id"], frame["reading"], sources)
    if found.refused:
        logger.warning(
            "%d records of the raw topic are not readings (dead-lettered), e.g. %s",
            len(found.refused),
            found.refused[0].reason,
        )
    batch = BucketBatch.of(found.by_device, params, found.records)
    out = score_bucket(bucket, batch, watermark, now_ms, context.policy, context.store, saved)
    dead = [*found.refused, *out.dead]
    counts = bucket_counts(out, len(found.refused))
    counts.update(quarantined(bucket_id, bucket, now_ms))
    return output_frame(
        out.records, context.topics, dead, context.raw_topic, counts, out.tombstones
    )


def _integers(column: pd.Series) -> list[int]:
    """An integer column as Python ints, -1 where null (Spark hands a column of integers as
    float64 once the batch held a null in it)."""
    values = column.to_numpy()
    if values.dtype.kind in "iu":
        return list(values.tolist())
    return list(column.fillna(-1).to_numpy(np.int64).tolist())


def device_scorer(settings: Settings) -> Any:
    """The processor (built lazily: pyspark is imported only where Spark runs)."""
    # lazy: pyspark is imported only where Spark runs
    from pyspark.sql.streaming.stateful_processor import (
        ExpiredTimerInfo,
        StatefulProcessor,
        StatefulProcessorHandle,
        TimerValues,
    )
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    policy = policy_of(settings)
    topics = topic_names(settings)
    raw_topic = settings.topics.telemetry_raw
    key_schema = StructType([StructField("device_id", StringType(), False)])
    scope_schema = StructType([StructField("scope", StringType(), False)])
    fleet_schema = StructType(
        [
            StructField("params", StringType(), False),
            StructField("version", LongType(), False),
            StructField("label", StringType(), False),
        ]
    )
    params_schema = StructType(
        [StructField("params", StringType(), False), StructField("version", LongType(), False)]
    )
    live_schema = StructType([StructField("live", BinaryType(), False)])

    class MapStateStore:
        """The bucket's ``params`` and ``fleet`` map states as the bucket step's store."""

        def __init__(self, handle: StatefulProcessorHandle) -> None:
            self._params = handle.getMapState("params", key_schema, params_schema)
            self._fleet = handle.getMapState("fleet", scope_schema, fleet_schema)

        def params(self, device_id: str) -> str | None:
            stored = self._params.getValue((device_id,))
            return None if stored is None else str(stored[0])

        def save_params(self, device_id: str, params_json: str, version: int) -> None:
            self._params.updateValue((device_id,), (params_json, version))

        def forget(self, device_id: str) -> None:
            self._params.removeKey((device_id,))

        def champion(self, scope: str) -> tuple[str, str] | None:
            stored = self._fleet.getValue((scope,))
            return None if stored is None else (str(stored[0]), str(stored[2]))

        def save_champion(self, scope: str, params_json: str, version: int, label: str) -> None:
            self._fleet.updateValue((scope,), (params_json, version, label))

    class BucketScorer(StatefulProcessor):
        """One group = one bucket of devices (:mod:`~fleetwatch.streaming.scorer.bucket_step`)."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            settle_worker()  # once per worker process: see fleetwatch.heap
            self.handle = handle
            self.store = MapStateStore(handle)
            self.context = Context(policy, self.store, topics, raw_topic)
            self.live = handle.getValueState("live", live_schema)

        def _load(self) -> tuple[BucketState, bytes | None]:
            stored = self.live.get()
            if stored is None:
                return new_bucket(), None
            saved = bytes(stored[0])
            return load_bucket(saved), saved

        def _save(self, bucket: BucketState) -> None:
            due = arm_timer(bucket)
            if due is not None:
                self.handle.registerTimer(due)
            self.live.update((dump_bucket(bucket),))

        def handleInputRows(
            self, key: tuple[int], rows: Any, timerValues: TimerValues
        ) -> Iterator[pd.DataFrame]:
            chunks = list(rows)
            frame = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
            bucket, saved = self._load()
            watermark = timerValues.getCurrentWatermarkInMs()
            now_ms = clock.now_ms()
            scored = score_rows(frame, bucket, saved, key[0], watermark, now_ms, self.context)
            self._save(bucket)
            yield scored

        def handleExpiredTimer(
            self, key: tuple[int], timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
        ) -> Iterator[pd.DataFrame]:
            bucket, _ = self._load()
            watermark = timerValues.getCurrentWatermarkInMs()
            now_ms = clock.now_ms()
            out = expire_bucket(bucket, watermark, now_ms, policy, self.store)
            self._save(bucket)
            counts = bucket_counts(out)
            counts.update(quarantined(key[0], bucket, now_ms))
            yield output_frame(out.records, topics, counts=counts, tombstones=out.tombstones)

        def close(self) -> None:
            return None

    return BucketScorer()
