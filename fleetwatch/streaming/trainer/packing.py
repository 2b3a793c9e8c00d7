"""Readings packed per device before the trainer's shuffle: one row per device and chunk.

The per-device processor (``transformWithStateInPandas``) costs about as much per *row* it is
handed as per device: the JVM turns each row into Arrow, and pyspark's worker walks the rows
one by one (``itertuples``) to group them by key. Exploded to one row per reading and metric,
a mini-batch of 20 readings of two metrics is 40 rows per device. Packed here, per Arrow batch
of records (``mapInArrow``, no shuffle, the Kafka partition already holds all of a device's
readings), each device's readings become one row of aligned arrays in long form, and the
processor unpacks them into a :class:`~fleetwatch.models.batch.Batch` without pandas.

The records are parsed here with the scorer's check, not by the JVM: Spark's ``from_json``
opens a reader for each record (decision 0035).

A device whose readings span several Arrow batches of a partition gets one row per batch; the
processor concatenates them (rows within one event time keep their order of arrival;
detectors sort by event time).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from fleetwatch.contracts.raw_records import read_record
from fleetwatch.models.batch import Batch

RECORD_COLUMN = "value"
"""What :func:`pack` reads: ``telemetry.raw`` record values as text (null where the bytes were not
UTF-8)."""

PACKED_SCHEMA = (
    "device_id STRING, seq ARRAY<BIGINT>, device_ms ARRAY<BIGINT>, event_ms ARRAY<BIGINT>,"
    " metric ARRAY<STRING>, value ARRAY<DOUBLE>, newest_ms BIGINT"
)
"""One row per device (and Arrow batch): its readings in long form, one entry per metric, each
with the reading's sequence number and device clock (which tell a repeat from a new reading),
and the newest event time among them (the watermark's column)."""

TIMESTAMP_MS_LIMIT = (2**63 - 1) // 1000
"""The largest magnitude of an event time, in milliseconds, that Spark's timestamp (microseconds
in a signed 64-bit integer) holds: a reading beyond it has no event time the watermark can
take, and is left out."""

_LISTS = ("event_ms", "metric", "value")
"""What a :class:`~fleetwatch.models.batch.Batch` is made of."""
_ALL = ("seq", "device_ms", *_LISTS)
_TYPES = (pa.int64(), pa.int64(), pa.int64(), pa.string(), pa.float64())


def pack(
    records: pa.RecordBatch, from_ms: int | None = None, to_ms: int | None = None
) -> pa.RecordBatch:
    """Record values (:data:`RECORD_COLUMN`) → one row per device of lists
    (:data:`PACKED_SCHEMA`), devices in order of first appearance, entries in the order of the
    readings and of each ``metrics`` object, a reading's ``seq``, device clock and ``event_ms``
    once per metric; only readings with ``from_ms <= event_ms < to_ms`` (either end open). A
    value that is not a reading of a device
    (:func:`~fleetwatch.contracts.raw_records.read_record`, a ``device_id`` that is text, an
    event time within :data:`TIMESTAMP_MS_LIMIT`) is left out: the scorer dead-letters it with
    the reason."""
    lists: dict[str, tuple[list[Any], ...]] = {}
    for text in records.column(RECORD_COLUMN).to_pylist():
        found = _reading_of_a_device(text, from_ms, to_ms)
        if found is None:
            continue
        device_id, reading = found
        held = lists.get(device_id)
        if held is None:
            held = lists[device_id] = ([], [], [], [], [])
        metrics: dict[str, float | None] = reading["metrics"]
        n = len(metrics)
        held[0].extend(repeat(reading["seq"], n))
        held[1].extend(repeat(reading["device_event_ms"], n))
        held[2].extend(repeat(reading["event_ms"], n))
        held[3].extend(metrics)
        held[4].extend(metrics.values())
    return pa.RecordBatch.from_arrays(
        [pa.array(list(lists), pa.string())]
        + [
            pa.array([held[i] for held in lists.values()], pa.list_(kind))
            for i, kind in enumerate(_TYPES)
        ]
        + [pa.array([max(held[2]) for held in lists.values()], pa.int64())],
        names=["device_id", *_ALL, "newest_ms"],
    )


def _reading_of_a_device(
    text: str | None, from_ms: int | None, to_ms: int | None
) -> tuple[str, dict[str, Any]] | None:
    """The device and reading a record value holds, when it is one to learn; any failure is the
    record's alone."""
    if text is None:
        return None
    try:
        reading = read_record(text)
        if isinstance(reading, str) or not reading["metrics"]:
            return None
        event_ms, device_id = reading["event_ms"], reading.get("device_id")
        if abs(event_ms) > TIMESTAMP_MS_LIMIT or not isinstance(device_id, str):
            return None
        if (from_ms is not None and event_ms < from_ms) or (
            to_ms is not None and event_ms >= to_ms
        ):
            return None
    except Exception:  # noqa: BLE001 - a record is data: any failure leaves it out alone
        return None
    return device_id, reading


def pack_batches(
    batches: Iterable[pa.RecordBatch], from_ms: int | None = None, to_ms: int | None = None
) -> Iterator[pa.RecordBatch]:
    """:func:`pack` over a partition (the trainer's ``mapInArrow`` function)."""
    for batch in batches:
        if batch.num_rows:
            yield pack(batch, from_ms, to_ms)


class DeviceRows(NamedTuple):
    """A device's packed entries, aligned: one per reading and metric."""

    seq: npt.NDArray[np.int64]
    device_ms: npt.NDArray[np.int64]
    event_ms: npt.NDArray[np.int64]
    metric: npt.NDArray[Any]
    value: npt.NDArray[np.float64]

    def batch(self, rows: npt.NDArray[np.intp] | None = None) -> Batch:
        """The entries (those at ``rows``, in their order: all when ``None``) as a batch."""
        if rows is None:
            return Batch.from_arrays(self.event_ms, self.metric, self.value)
        return Batch.from_arrays(self.event_ms[rows], self.metric[rows], self.value[rows])


def per_device_rows(chunks: Iterable[pd.DataFrame]) -> Iterator[tuple[str, DeviceRows]]:
    """Packed rows of several devices (pandas chunks of :data:`PACKED_SCHEMA` rows) → each
    device's entries, devices in order of first appearance."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for chunk in chunks:
        columns = (chunk["device_id"], *(chunk[name] for name in _ALL))
        for device_id, *arrays in zip(*columns, strict=True):
            rows.setdefault(str(device_id), []).append(tuple(arrays))
    dtypes = (np.int64, np.int64, np.int64, object, np.float64)
    for device_id, parts in rows.items():
        yield (
            device_id,
            DeviceRows(*(_concat([p[i] for p in parts], dtype) for i, dtype in enumerate(dtypes))),
        )


def _concat(parts: list[Any], dtype: type) -> npt.NDArray[Any]:
    if len(parts) == 1:
        return np.asarray(parts[0], dtype=dtype)
    if not parts:
        return np.zeros(0, dtype)
    return np.concatenate([np.asarray(p, dtype=dtype) for p in parts])
