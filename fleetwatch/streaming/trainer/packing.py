"""Readings packed per device before the trainer's shuffle: one row per device and chunk.

The per-device processor (``transformWithStateInPandas``) costs about as much per *row* it is
handed as per device: the JVM turns each row into Arrow, and pyspark's worker walks the rows
one by one (``itertuples``) to group them by key. Exploded to one row per reading and metric,
a mini-batch of 20 readings of two metrics is 40 rows per device. Packed here, per Arrow batch
of readings (``mapInArrow``, no shuffle, the Kafka partition already holds all of a device's
readings), each device's readings become one row of aligned arrays in long form, and the
processor unpacks them into a :class:`~fleetwatch.models.batch.Batch` without pandas.

A device whose readings span several Arrow batches of a partition gets one row per batch; the
processor concatenates them (rows within one event time keep their order of arrival;
detectors sort by event time).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

from fleetwatch.models.batch import Batch

READING_COLUMNS = ("device_id", "seq", "device_event_ms", "event_ms", "metrics")
"""What :func:`pack` reads: the scorer's readings (``metrics`` a map of name to value)."""

PACKED_SCHEMA = (
    "device_id STRING, seq ARRAY<BIGINT>, device_ms ARRAY<BIGINT>, event_ms ARRAY<BIGINT>,"
    " metric ARRAY<STRING>, value ARRAY<DOUBLE>"
)
"""One row per device (and Arrow batch): its readings in long form, one entry per metric, each
with the reading's sequence number and device clock (which tell a repeat from a new reading)."""

_LISTS = ("event_ms", "metric", "value")
"""What a :class:`~fleetwatch.models.batch.Batch` is made of."""
_ALL = ("seq", "device_ms", *_LISTS)


def pack(readings: pa.RecordBatch) -> pa.RecordBatch:
    """Readings (one row each: :data:`READING_COLUMNS`) → one row per device of lists
    (:data:`PACKED_SCHEMA`), entries in the order of the readings and of each map, a reading's
    ``seq``, device clock and ``event_ms`` once per metric."""
    metrics = readings.column("metrics")
    offsets = metrics.offsets.to_numpy()
    lengths = np.diff(offsets)
    parents = np.repeat(np.arange(len(metrics)), lengths)
    start, size = int(offsets[0]), int(offsets[-1] - offsets[0])
    keys, items = metrics.keys.slice(start, size), metrics.items.slice(start, size)
    if metrics.null_count:  # a null map holds no entries (whatever length it has)
        kept = np.repeat(metrics.is_valid().to_numpy(zero_copy_only=False), lengths)
        parents, keys, items = parents[kept], keys.filter(kept), items.filter(kept)
    index = pa.array(parents)
    long = pa.table(
        {
            "device_id": readings.column("device_id").take(index),
            "seq": readings.column("seq").take(index),
            "device_ms": readings.column("device_event_ms").take(index),
            "event_ms": readings.column("event_ms").take(index),
            "metric": keys,
            "value": items,
        }
    )
    grouped = long.group_by("device_id", use_threads=False).aggregate(
        [(name, "list") for name in _ALL]
    )
    return pa.RecordBatch.from_arrays(
        [grouped.column("device_id").combine_chunks()]
        + [grouped.column(f"{name}_list").combine_chunks() for name in _ALL],
        names=["device_id", *_ALL],
    )


def pack_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """:func:`pack` over a partition (the trainer's ``mapInArrow`` function)."""
    for batch in batches:
        if batch.num_rows:
            yield pack(batch.select(list(READING_COLUMNS)))


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


def per_device(chunks: Iterable[pd.DataFrame]) -> Iterator[tuple[str, Batch]]:
    """Packed rows of several devices (pandas chunks of :data:`PACKED_SCHEMA` rows) → each
    device's readings as one batch, devices in order of first appearance."""
    rows: dict[str, list[tuple[Any, Any, Any]]] = {}
    for chunk in chunks:
        columns = (chunk["device_id"], *(chunk[name] for name in _LISTS))
        for device_id, *arrays in zip(*columns, strict=True):
            rows.setdefault(str(device_id), []).append((arrays[0], arrays[1], arrays[2]))
    for device_id, parts in rows.items():
        yield device_id, _batch(parts)


def unpack(chunks: Iterable[pd.DataFrame]) -> Batch:
    """One device's packed rows (pandas chunks of :data:`PACKED_SCHEMA` rows) as a batch."""
    parts: list[tuple[Any, Any, Any]] = []
    for chunk in chunks:
        parts += zip(*(chunk[name] for name in _LISTS), strict=True)
    return _batch(parts)


def _batch(parts: list[tuple[Any, Any, Any]]) -> Batch:
    """Aligned ``(event_ms, metric, value)`` arrays, one triple per packed row, as one batch."""
    return Batch.from_arrays(
        _concat([p[0] for p in parts], np.int64),
        _concat([p[1] for p in parts], object),
        _concat([p[2] for p in parts], np.float64),
    )


def _concat(parts: list[Any], dtype: type) -> npt.NDArray[Any]:
    if len(parts) == 1:
        return np.asarray(parts[0], dtype=dtype)
    if not parts:
        return np.zeros(0, dtype)
    return np.concatenate([np.asarray(p, dtype=dtype) for p in parts])
