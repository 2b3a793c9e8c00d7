"""Readings packed per device before the trainer's shuffle: one row per device and chunk.

The per-device processor (``transformWithStateInPandas``) costs about as much per *row* it is
handed as per device: the JVM turns each row into Arrow, and pyspark's worker walks the rows
one by one (``itertuples``) to group them by key. Exploded to one row per reading and metric,
a mini-batch of 20 readings of two metrics is 40 rows per device. Packed here, per Arrow batch
of records (``mapInArrow``, no shuffle, the Kafka partition already holds all of a device's
readings), each device's readings become one row of aligned arrays in long form, which the
processor reads as :class:`~fleetwatch.streaming.trainer.device_rows.DeviceRows`.

The records are parsed here with the scorer's check, not by the JVM: Spark's ``from_json``
opens a reader for each record (decision 0035). The packing step's Python workers are their own
pool (pyspark's, per kind of step) and hold one Arrow batch of records at a time, so this module
imports only Arrow and the record check (no pandas, scipy or detectors), the records become
Python text a slice at a time, and a device's entries are held in typed buffers (8 bytes a number,
4 a metric name's code) until the batch's rows are built from them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from itertools import accumulate, repeat
from typing import Any

import pyarrow as pa

from fleetwatch.contracts.raw_records import read_record
from fleetwatch.streaming.worker_memory import release_freed

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

ENTRY_COLUMNS = ("seq", "device_ms", "event_ms", "metric", "value")
"""The packed row's list columns, aligned: one entry per reading and metric."""

SLICE_RECORDS = 8_192
"""Records turned into Python text at a time: a slice's text is a few megabytes, where a whole
Arrow batch (up to the trainer's ``ARROW_BATCH_ROWS``) would be a hundred or more."""


_NULL = float("nan")
"""A null value's place in a device's value buffer (its position is kept apart)."""


class _Names:
    """The metric names of a batch, each a code (its index) and its UTF-8 bytes."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.encoded: list[bytes] = []

    def code(self, name: str) -> int:
        found = self.codes.get(name)
        if found is None:
            self.encoded.append(name.encode())  # raises before the name is taken
            found = self.codes[name] = len(self.codes)
        return found


class _Entries:
    """One device's entries of a batch, in typed buffers (metric names by code); the positions
    of its null values (held as NaN in the buffer) apart."""

    __slots__ = ("device_id", "device_ms", "event_ms", "metric", "nulls", "seq", "value")

    def __init__(self, device_id: str) -> None:
        self.device_id = device_id.encode()
        self.seq: array[int] = array("q")
        self.device_ms: array[int] = array("q")
        self.event_ms: array[int] = array("q")
        self.metric: array[int] = array("i")
        self.value: array[float] = array("d")
        self.nulls: list[int] = []

    def __len__(self) -> int:
        return len(self.value)

    def add(self, reading: dict[str, Any], names: _Names) -> None:
        """A reading's entries, one per metric; all of them or, if any cannot be held, none."""
        metrics: dict[str, float | None] = reading["metrics"]
        n, held, nulls = len(metrics), len(self), len(self.nulls)
        try:
            self.seq.extend(repeat(reading["seq"], n))
            self.device_ms.extend(repeat(reading["device_event_ms"], n))
            self.event_ms.extend(repeat(reading["event_ms"], n))
            self.metric.extend(map(names.code, metrics))
            if None in metrics.values():
                self.nulls.extend(held + i for i, v in enumerate(metrics.values()) if v is None)
                self.value.extend(_NULL if v is None else v for v in metrics.values())
            else:
                self.value.extend(metrics.values())  # type: ignore[arg-type]
        except Exception:
            for column in (self.seq, self.device_ms, self.event_ms, self.metric, self.value):
                del column[held:]
            del self.nulls[nulls:]
            raise


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
    devices: dict[str, _Entries] = {}
    names = _Names()
    column = records.column(RECORD_COLUMN)
    for start in range(0, len(column), SLICE_RECORDS):
        for text in column.slice(start, SLICE_RECORDS).to_pylist():
            found = _reading_of_a_device(text, from_ms, to_ms)
            if found is None:
                continue
            device_id, reading = found
            try:
                entries = devices.get(device_id)
                if entries is None:
                    entries = devices[device_id] = _Entries(device_id)
                entries.add(reading, names)
            except (LookupError, OverflowError, TypeError, ValueError, UnicodeError):
                continue  # a reading no buffer holds: the record alone is left out
    return _rows([e for e in devices.values() if len(e)], names)


def _rows(held: list[_Entries], names: _Names) -> pa.RecordBatch:
    """The packed rows of the devices' entries, in their order. Every array is made from
    buffers: ``pa.array`` over Python objects would have pyarrow import pandas to check them."""
    starts: array[int] = array("i", accumulate((len(e) for e in held), initial=0))
    offsets = pa.Array.from_buffers(pa.int32(), len(starts), [None, pa.py_buffer(starts)])
    codes = _flat(held, "metric", "i", pa.int32())
    metric = pa.DictionaryArray.from_arrays(codes, _strings(names.encoded)).dictionary_decode()
    lists = [
        pa.ListArray.from_arrays(offsets, column)
        for column in (
            _flat(held, "seq", "q", pa.int64()),
            _flat(held, "device_ms", "q", pa.int64()),
            _flat(held, "event_ms", "q", pa.int64()),
            metric,
            _values(held, starts),
        )
    ]
    newest: array[int] = array("q", (max(e.event_ms) for e in held))
    return pa.RecordBatch.from_arrays(
        [
            _strings([e.device_id for e in held]),
            *lists,
            pa.Array.from_buffers(pa.int64(), len(newest), [None, pa.py_buffer(newest)]),
        ],
        names=["device_id", *ENTRY_COLUMNS, "newest_ms"],
    )


def _flat(held: list[_Entries], name: str, code: str, kind: pa.DataType) -> pa.Array:
    """The buffer ``name`` of every device's entries, end to end, as Arrow."""
    flat: array[Any] = array(code)
    for entries in held:
        flat.extend(getattr(entries, name))
    return pa.Array.from_buffers(kind, len(flat), [None, pa.py_buffer(flat)])


def _values(held: list[_Entries], starts: array[int]) -> pa.Array:
    """Every device's values, end to end, as Arrow: null where the reading's was."""
    values = _flat(held, "value", "d", pa.float64())
    nulls = [start + i for start, e in zip(starts, held, strict=False) for i in e.nulls]
    if not nulls:
        return values
    valid = bytearray(b"\xff" * ((len(values) + 7) // 8))
    for i in nulls:
        valid[i // 8] &= 0xFF ^ (1 << (i % 8))
    return pa.Array.from_buffers(
        pa.float64(),
        len(values),
        [pa.py_buffer(valid), values.buffers()[1]],
        null_count=len(nulls),
    )


def _strings(encoded: list[bytes]) -> pa.Array:
    """UTF-8 texts as an Arrow string array."""
    offsets: array[int] = array("i", accumulate(map(len, encoded), initial=0))
    return pa.Array.from_buffers(
        pa.string(), len(encoded), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
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
    """:func:`pack` over a partition (the trainer's ``mapInArrow`` function); the memory it
    freed goes back to the system at the partition's end
    (:func:`~fleetwatch.streaming.worker_memory.release_freed`)."""
    for batch in batches:
        if batch.num_rows:
            yield pack(batch, from_ms, to_ms)
        del batch  # the records, not held through the release below
    release_freed()
