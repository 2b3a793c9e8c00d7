"""A batch of one device's readings in the form every detector works on.

Detectors take the long form the scorer already has, one row per (reading, metric) with
columns ``event_ms``, ``metric``, ``value`` (other columns are ignored), or a wide frame
through :meth:`Batch.from_wide`. Inside, rows are in event-time order (a stable sort, undone
on the way out so scores line up with the caller's rows) and metric names are factorised once
so each detector maps them to its own arrays with a lookup of a few names, not of every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.models.errors import BatchError

COLUMNS = ("event_ms", "metric", "value")
T = TypeVar("T", bound=np.generic)


@dataclass(frozen=True)
class Batch:
    event_ms: npt.NDArray[np.int64]
    """Event times, ascending."""
    codes: npt.NDArray[np.intp]
    """Per row, the index of its metric in :attr:`names`."""
    names: tuple[str, ...]
    value: npt.NDArray[np.float64]
    order: npt.NDArray[np.intp] | None
    """The permutation that sorted the caller's rows (``None`` when they were in order)."""
    _memo: dict[object, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """What :meth:`times` and :meth:`lookup` worked out (a batch's arrays never change)."""

    @classmethod
    def of(cls, readings: pd.DataFrame | Batch) -> Batch:
        if isinstance(readings, Batch):
            return readings
        missing = [c for c in COLUMNS if c not in readings.columns]
        if missing:
            raise BatchError(f"readings miss column(s) {', '.join(missing)}")
        try:
            event_ms = readings["event_ms"].to_numpy(dtype=np.int64)
            value = readings["value"].to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise BatchError(f"event_ms must be integers and value numbers: {exc}") from exc
        return cls.from_arrays(event_ms, readings["metric"].to_numpy(), value)

    @classmethod
    def from_arrays(
        cls, event_ms: npt.ArrayLike, metric: npt.ArrayLike, value: npt.ArrayLike
    ) -> Batch:
        """The long form given as three aligned arrays (what :meth:`of` reads of a frame)."""
        try:
            event_ms = np.asarray(event_ms, dtype=np.int64)
            value = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise BatchError(f"event_ms must be integers and value numbers: {exc}") from exc
        if not event_ms.shape == value.shape == np.shape(metric):
            raise BatchError("event_ms, metric and value must have one entry per row")
        codes, uniques = _factorize(np.asarray(metric))
        if (codes < 0).any():
            raise BatchError("metric must not be missing")
        order: npt.NDArray[np.intp] | None = None
        if event_ms.size > 1 and (np.diff(event_ms) < 0).any():
            order = np.argsort(event_ms, kind="stable")
            event_ms, codes, value = event_ms[order], codes[order], value[order]
        names = tuple(str(n) for n in uniques)
        return cls(event_ms, codes.astype(np.intp, copy=False), names, value, order)

    @classmethod
    def from_wide(cls, frame: pd.DataFrame, time_column: str = "event_ms") -> Batch:
        """A wide frame (one row per event time, one column per metric) in long form."""
        if time_column not in frame.columns:
            raise BatchError(f"wide readings miss the time column {time_column!r}")
        long = frame.melt(id_vars=[time_column], var_name="metric", value_name="value")
        long = long.rename(columns={time_column: "event_ms"}).dropna(subset=["value"])
        return cls.of(long)

    def __len__(self) -> int:
        return int(self.event_ms.size)

    @property
    def memo(self) -> dict[object, Any]:
        """What detectors work out of this batch alone, by a key of their own (a batch's arrays
        never change, so what is derived from them holds for the batch's life): computed once,
        shared by every member that asks. What is kept must be read-only."""
        return self._memo

    def times(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]]:
        """The distinct event times (ascending) and each row's index into them: what
        ``np.unique(event_ms, return_inverse=True)`` gives, worked out once per batch (the
        detectors that need it share it; the arrays are read-only)."""
        held = self._memo.get("times")
        if held is None:
            t = self.event_ms
            starts = np.empty(t.size, dtype=bool)
            starts[:1] = True
            np.not_equal(t[1:], t[:-1], out=starts[1:])
            inverse = np.cumsum(starts, dtype=np.intp) - 1
            held = self._memo["times"] = (frozen(t[starts]), frozen(inverse))
        return held

    def sorted_like(self, values: npt.NDArray[T]) -> npt.NDArray[T]:
        """A per-row array given in the caller's order, in this batch's (sorted) order."""
        return values if self.order is None else values[self.order]

    def unsorted(self, values: npt.NDArray[T]) -> npt.NDArray[T]:
        """A per-row array in this batch's order, back in the caller's order."""
        if self.order is None:
            return values
        out = np.empty_like(values)
        out[self.order] = values
        return out

    def lookup(self, known: Sequence[str]) -> npt.NDArray[np.intp]:
        """Per row, the index of its metric in ``known`` (-1 when it is not there); read-only,
        and worked out once per batch and list of names."""
        key = ("lookup", *known)
        out: npt.NDArray[np.intp] | None = self._memo.get(key)
        if out is None:
            index = {name: i for i, name in enumerate(known)}
            table = np.array([index.get(n, -1) for n in self.names], dtype=np.intp)
            out = self._memo[key] = frozen(table[self.codes] if table.size else self.codes.copy())
        return out


def frozen(values: npt.NDArray[T]) -> npt.NDArray[T]:
    """``values``, made read-only (what a batch's memo keeps must not change)."""
    values.flags.writeable = False
    return values


def _factorize(metric: npt.NDArray[Any]) -> tuple[npt.NDArray[np.intp], Sequence[Any]]:
    """``pd.factorize(metric, sort=True)``: codes into the sorted distinct names (-1 for a
    missing one). A batch's few names of text are factorised with a dict (pandas' hash table
    costs more per call than learning a small batch)."""
    if metric.dtype == object:
        rows = metric.tolist()
        distinct = set(rows)
        if all(type(n) is str for n in distinct):
            names = sorted(distinct)
            index = {name: i for i, name in enumerate(names)}
            return np.fromiter(map(index.__getitem__, rows), np.intp, metric.size), names
    codes, uniques = pd.factorize(metric, sort=True)
    return codes.astype(np.intp), list(uniques)


def extend_metrics(known: list[str], batch: Batch) -> list[str]:
    """``known`` followed by this batch's new metric names (appended: existing indices stay)."""
    return known + [n for n in batch.names if n not in set(known)]


FEW_METRICS = 8
"""Up to this many metrics, :func:`per_metric_runs` finds each one's rows by comparison (a
device's few metrics: one pass per metric costs less than a sort)."""


def per_metric_runs(
    codes: npt.NDArray[np.intp], n_metrics: int
) -> list[tuple[int, npt.NDArray[np.intp]]]:
    """For each metric present, the row indices of its readings in time order."""
    if n_metrics <= FEW_METRICS:
        found = []
        for m in range(n_metrics):
            rows = (codes == m).nonzero()[0]
            if rows.size:
                found.append((m, rows))
        return found
    order = np.argsort(codes, kind="stable")
    counts = np.bincount(codes[codes >= 0], minlength=n_metrics)
    start = int((codes < 0).sum())
    runs = []
    for m in range(n_metrics):
        if counts[m]:
            runs.append((m, order[start : start + counts[m]]))
        start += int(counts[m])
    return runs
