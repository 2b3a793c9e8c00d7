"""One device's readings in a micro-batch as plain numpy columns: the scorer's per-device code
slices and filters these instead of pandas frames (a pandas column access costs tens of
microseconds; a scorer batch touches thousands of devices)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

INTEGERS = (
    "seq",
    "event_ms",
    "device_event_ms",
    "device_sent_ms",
    "received_ms",
    "clock_offset_ms",
)
READING = (*INTEGERS, "firmware", "status")
"""The columns of a reading a row repeats for each of its metrics."""
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
