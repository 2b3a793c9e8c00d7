"""A device's packed readings as the trainer's processor reads them: the rows
:mod:`~fleetwatch.streaming.trainer.packing` made, one or more per device, joined into aligned
arrays (:class:`DeviceRows`) and read as a :class:`~fleetwatch.models.batch.Batch`.

A device whose readings spanned several Arrow batches of a partition has one row per batch; they
are concatenated in order (rows within one event time keep their order of arrival; detectors
sort by event time)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.models.batch import Batch
from fleetwatch.streaming.trainer.packing import ENTRY_COLUMNS


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
    """Packed rows of several devices (pandas chunks of
    :data:`~fleetwatch.streaming.trainer.packing.PACKED_SCHEMA` rows) → each device's entries,
    devices in order of first appearance; a null value is NaN."""
    rows: dict[str, list[tuple[Any, ...]]] = {}
    for chunk in chunks:
        columns = (chunk["device_id"], *(chunk[name] for name in ENTRY_COLUMNS))
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
