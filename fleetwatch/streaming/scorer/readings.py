"""One device's readings in a micro-batch as plain numpy columns: the scorer's per-device code
slices and filters these instead of pandas frames (a pandas column access costs tens of
microseconds; a scorer batch touches thousands of devices)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.contracts import wire
from fleetwatch.contracts.raw_records import read_record

INTEGERS = (
    "seq",
    "event_ms",
    "device_event_ms",
    "device_sent_ms",
    "received_ms",
    "clock_offset_ms",
)
READING = (*INTEGERS, "firmware", "status")
"""The columns of a reading a row repeats for each of its metrics: every field of a
``telemetry.raw`` record (:data:`~fleetwatch.contracts.telemetry.RECORD_FIELDS`, the integers
first) but its ``v``, ``device_id`` (the record key) and ``metrics`` (one row each). Written
out, not derived, for :func:`_split`'s sake; the unit tests hold it to the contract."""
COLUMNS = (*READING, "metric", "value")
"""One row per (reading, metric)."""


@dataclass(frozen=True)
class Rows:
    cols: Mapping[str, npt.NDArray[Any]]

    @classmethod
    def of(cls, frame: pd.DataFrame | Rows) -> Rows:
        if isinstance(frame, Rows):
            return frame
        # Spark hands the operator integer columns as float64 once a batch held a null in them
        # (the parameter rows of the union): integers again here, for every consumer
        return cls(
            {
                c: frame[c].to_numpy(np.int64) if c in INTEGERS else frame[c].to_numpy()
                for c in COLUMNS
            }
        )

    def __len__(self) -> int:
        return len(self.cols["seq"])

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self.cols[name]

    def take(self, index: npt.NDArray[np.intp] | slice | list[int]) -> Rows:
        return Rows({c: v[index] for c, v in self.cols.items()})

    def where(self, mask: npt.NDArray[np.bool_]) -> Rows:
        return self.take(np.flatnonzero(mask))


def by_device(frame: pd.DataFrame) -> list[tuple[str, Rows]]:
    """A bucket's readings split by device, each in (event_ms, seq) order."""
    devices = frame["device_id"].to_numpy()
    rows = Rows.of(frame)
    codes, names = pd.factorize(devices, sort=True)
    order = np.lexsort((rows["seq"], rows["event_ms"], codes))
    sorted_codes = codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(order)]])
    return [
        (str(names[sorted_codes[s]]), rows.take(order[s:e]))
        for s, e in zip(starts, ends, strict=True)
    ]


_NAN = float("nan")
_DTYPES = {**dict.fromkeys(INTEGERS, np.int64), "value": np.float64}


NOT_UTF8 = "the record's key or value is not UTF-8"
"""The reason for a record the job hands over without its text (``None``): its bytes were not
UTF-8, which no Python worker can be given; the dead letter's source offset leads to them."""

Source = tuple[int, int]
"""A record's place on ``telemetry.raw``: (partition, offset); (-1, -1) where not known."""
UNKNOWN: Source = (-1, -1)


class Record(NamedTuple):
    """A ``telemetry.raw`` record as the operator got it: what a dead letter carries (a named
    tuple: one is made per reading)."""

    text: str
    source: Source


@dataclass(frozen=True)
class Refused:
    device_id: str
    record: Record
    reason: str


@dataclass
class Readings:
    """A bucket's readings by device (:func:`readings_by_device`), each device's records, and
    the records refused, with the reason."""

    by_device: dict[str, Rows]
    records: dict[str, list[Record]]
    refused: list[Refused]

    @property
    def skipped(self) -> int:
        return len(self.refused)


def readings_by_device(
    devices: Iterable[str], texts: Iterable[str | None], sources: Iterable[Source] | None = None
) -> Readings:
    """The scorer operator's reading rows (the record's key, its value: a gateway-stamped
    reading as JSON, :class:`~fleetwatch.contracts.telemetry.TelemetryRecord`, and its place
    on the topic) → each device's readings in long form (one entry per reading and metric), in
    the order they came.

    A value that is not a reading within the contract's bounds
    (:func:`~fleetwatch.contracts.raw_records.read_record`, which also completes the fields an
    older record lacks) is refused with the reason: one record never stops the bucket."""
    order: dict[str, int] = {}
    owner: list[int] = []
    kept: list[dict[str, Any]] = []
    sizes: list[int] = []
    metrics: list[str] = []
    values: list[float | None] = []
    records: dict[str, list[Record]] = {}
    refused: list[Refused] = []
    places = repeat(UNKNOWN) if sources is None else sources
    for device_id, text, source in zip(devices, texts, places, strict=sources is not None):
        reading = _checked(device_id, text)
        if isinstance(reading, str) or text is None:
            # what the scorer writes must encode: bytes that were not UTF-8 are replaced
            # (the dead letter's source offset leads to the record as it was)
            record = Record(wire.utf8_text(text or ""), source)
            refused.append(Refused(wire.utf8_text(device_id), record, str(reading)))
            continue
        records.setdefault(device_id, []).append(Record(text, source))
        owner.append(order.setdefault(device_id, len(order)))
        kept.append(reading)
        named: dict[str, float | None] = reading["metrics"]
        sizes.append(len(named))
        metrics.extend(named)
        values.extend(named.values())
    return Readings(_split(order, owner, kept, sizes, metrics, values), records, refused)


def _split(
    order: Mapping[str, int],
    owner: list[int],
    kept: list[dict[str, Any]],
    sizes: list[int],
    metrics: list[str],
    values: list[float | None],
) -> dict[str, Rows]:
    """The readings of a whole bucket (``kept``, of the devices numbered ``owner`` in
    ``order``, with ``sizes`` metrics each) in long form — a row per reading and metric, its
    reading's fields repeated — one array per column, cut into each device's rows (in the
    order they came). A column is built from one value per reading, then spread over its
    rows and put in device order by one index; a device's columns are views of the bucket's,
    so a batch costs a dozen array conversions, not a dozen per device."""
    if not metrics:
        return {}
    by_reading = np.asarray(owner, dtype=np.intp)
    if sizes.count(1) == len(sizes):  # a metric per reading: a row per reading
        codes = by_reading
        rank = np.argsort(codes, kind="stable")
        pick = rank
    else:
        row_reading = np.repeat(np.arange(len(sizes)), sizes)
        codes = by_reading[row_reading]
        rank = np.argsort(codes, kind="stable")
        pick = row_reading[rank]
    arrays = {
        c: np.array([r[c] for r in kept], dtype=_DTYPES.get(c, object))[pick] for c in READING
    }
    arrays["metric"] = np.array(metrics, dtype=object)[rank]
    if None in values:
        values = [_NAN if v is None else v for v in values]
    arrays["value"] = np.array(values, dtype=np.float64)[rank]
    bounds = np.searchsorted(codes[rank], np.arange(len(order) + 1)).tolist()
    return {
        device_id: Rows({c: a[bounds[i] : bounds[i + 1]] for c, a in arrays.items()})
        for device_id, i in order.items()
    }


def _checked(device_id: str, text: str | None) -> dict[str, Any] | str:
    """The reading, or why the record is not one; any failure is the record's alone."""
    if text is None or not (device_id.isascii() or wire.is_utf8(device_id)):
        return NOT_UTF8
    try:
        return read_record(text)
    except Exception as exc:  # noqa: BLE001 - a record is data: any failure refuses it alone
        return f"unreadable: {type(exc).__name__}: {exc}"[:500]
