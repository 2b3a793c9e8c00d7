"""Score a recorded file online and causally, through the pipeline's own per-device steps.

Per device, rows are taken in timestamp order (stable: ties keep the file's order) and processed in
consecutive chunks of ``chunk_rows`` rows, each one micro-batch of the scorer's step then one of
the trainer's (:mod:`~fleetwatch.filemode.pipeline`): the chunk is scored with the parameters
learned from the earlier chunks only, then learned through the detector's own gate. So no row is
scored with anything learned from itself or a later row, and appending later rows to a file
leaves the scores of its earlier rows unchanged. What the scorer does, file mode does: the
scoring memory that spans readings, device-wide moves, alert episodes (opened after
``score.min_readings``, resolved after ``score.clear_readings`` calm readings). A smaller chunk
learns sooner and runs slower: ``chunk_rows=1`` is the strictest.

With ``fleet``, the file's devices are one fleet, as a scope's devices are in production: their
chunks are scored in lockstep of event time (in the order of their first readings' times,
across devices), and each device's step finds its scope's champion pooled from the other
devices' parameters (:mod:`~fleetwatch.filemode.fleet`) as the scorer finds it. Chunks are cut
as without it, so a device's rows before the first pool score alike either way. A file without
a device column is refused (one device is no fleet to pool); a device column naming one device
is a scope of one, pooled from itself, as production pools a scope of one device.

A row's ``anomaly_score`` is its reading's score (:mod:`~fleetwatch.filemode.pipeline`),
``alert`` whether an alert of its device is open at the row, with the ``alert_metric`` and the
``reason`` of that alert. Missing or non-numeric values are skipped for that metric and row; a
row with no value at all, or whose timestamp cannot be read, gets no score and a ``reason``
saying why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.contracts.settings import Settings
from fleetwatch.filemode.columns import (
    FileColumns,
    FileModeError,
    numbers,
    parse_times,
    time_kind,
)
from fleetwatch.filemode.fleet import FilePool
from fleetwatch.filemode.pipeline import DevicePipeline, Marks
from fleetwatch.models.base import Detector
from fleetwatch.models.registry import default_detector
from fleetwatch.streaming.scorer.policy import Policy, policy_of

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_ROWS = 50
OUTPUT_COLUMNS = ("anomaly_score", "alert", "alert_metric", "reason")
BAD_TIME = "timestamp {!r} could not be read"
NO_VALUES = "no numeric value"
NO_FLEET = (
    "--fleet pools the file's devices, and the file has no device column: name it with --device"
)


@dataclass
class FileDetector:
    """Per-device detectors kept across the pieces of one file."""

    columns: FileColumns
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    make: Callable[[], Detector] = default_detector
    policy: Policy = field(default_factory=lambda: policy_of(Settings()))
    fleet: bool = False
    """Score the file's devices as one fleet (:mod:`~fleetwatch.filemode.fleet`), in lockstep
    of event time; else each device alone."""
    devices: dict[str, DevicePipeline] = field(default_factory=dict)
    bad_times: int = 0
    no_values: int = 0

    def __post_init__(self) -> None:
        if self.chunk_rows < 1:
            raise FileModeError(f"chunk_rows must be at least 1, got {self.chunk_rows}")
        if self.fleet and self.columns.device is None:
            raise FileModeError(NO_FLEET)
        self._metrics = list(self.columns.values)
        self.pool = FilePool() if self.fleet else None

    def score_piece(self, piece: pd.DataFrame) -> pd.DataFrame:
        """``piece`` (text columns) with the output columns added, rows in the same order."""
        clash = [c for c in OUTPUT_COLUMNS if c in piece.columns]
        if clash:
            raise FileModeError(f"the file already has output column(s) {', '.join(clash)}")
        n = len(piece)
        out = Marks.empty(n)
        times = parse_times(piece[self.columns.timestamp], self.columns.time_kind)
        values = np.column_stack([numbers(piece[c]) for c in self.columns.values])
        bad = np.isnan(times)
        for i in np.flatnonzero(bad):
            out.reason[i] = BAD_TIME.format(str(piece[self.columns.timestamp].iloc[i]))
        self.bad_times += int(bad.sum())
        devices = self._devices(piece)
        good = np.flatnonzero(~bad)
        codes, names = pd.factorize(devices[good])
        by_device = np.argsort(codes, kind="stable")
        bounds = np.cumsum(np.bincount(codes, minlength=len(names)))[:-1]
        chunks: list[tuple[int, str, npt.NDArray[np.intp]]] = []
        for code, rows in enumerate(np.split(good[by_device], bounds)):
            rows = rows[np.argsort(times[rows], kind="stable")]
            name = str(names[code])
            pipeline = self.devices.get(name)
            if pipeline is None:
                pipeline = self.devices[name] = DevicePipeline(self.policy, self.make())
            for start in range(0, rows.size, self.chunk_rows):
                chunk = rows[start : start + self.chunk_rows]
                if self.pool is None:
                    self._score_chunk(pipeline, chunk, times, values, out)
                else:
                    chunks.append((int(times[chunk[0]]), name, chunk))
        if self.pool is not None:
            self._in_lockstep(chunks, times, values, out)
        empty = ~bad & np.isnan(values).all(axis=1)
        out.reason[empty] = NO_VALUES
        self.no_values += int(empty.sum())
        result = piece.copy()
        result["anomaly_score"] = np.round(out.score, 6)
        result["alert"] = out.alert
        result["alert_metric"] = out.metric
        result["reason"] = out.reason
        return result

    def _devices(self, piece: pd.DataFrame) -> npt.NDArray[np.object_]:
        if self.columns.device is None:
            return np.full(len(piece), "", dtype=object)
        return piece[self.columns.device].astype(str).to_numpy(dtype=object)

    def _in_lockstep(
        self,
        chunks: list[tuple[int, str, npt.NDArray[np.intp]]],
        times: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        out: Marks,
    ) -> None:
        """Every device's chunks in the order of their first readings' event times (ties by
        device name), the fleet pooled when a pooling time comes before a chunk."""
        assert self.pool is not None
        for first_ms, name, rows in sorted(chunks, key=lambda c: (c[0], c[1])):
            self.pool.until(first_ms, self.devices)
            self._score_chunk(self.devices[name], rows, times, values, out)

    def _score_chunk(
        self,
        pipeline: DevicePipeline,
        rows: npt.NDArray[np.intp],
        times: npt.NDArray[np.float64],
        values: npt.NDArray[np.float64],
        out: Marks,
    ) -> None:
        """Score the chunk with what was learned before it (and the fleet's champions, with
        ``fleet``), then learn it."""
        event_ms = times[rows].astype(np.int64)
        lookup = None if self.pool is None else self.pool.champion
        marks = pipeline.chunk(event_ms, values[rows], self._metrics, lookup)
        scored = ~np.isnan(values[rows]).all(axis=1)
        out.score[rows[scored]] = np.nan_to_num(marks.score[scored], nan=0.0)
        out.alert[rows] = marks.alert
        out.metric[rows] = marks.metric
        out.reason[rows[marks.alert]] = marks.reason[marks.alert]


def detect_frame(
    frame: pd.DataFrame,
    timestamp_col: str,
    device_col: str | None,
    value_cols: tuple[str, ...] | list[str],
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    make: Callable[[], Detector] = default_detector,
    fleet: bool = False,
    policy: Policy | None = None,
) -> pd.DataFrame:
    """Every row of ``frame`` in its order, with its original columns and the output columns
    (see the module docstring). Columns may be text or numbers; the kind of the timestamps is
    read from the column. ``make`` builds each device's detector (default: the streaming
    path's); ``fleet`` scores the devices as one fleet; ``policy`` is the scorer's (default:
    the default settings')."""
    text = frame.astype(str).where(frame.notna(), "")
    kind = time_kind(text[timestamp_col])
    columns = FileColumns(timestamp_col, device_col, tuple(value_cols), kind)
    policy = policy or policy_of(Settings())
    scored = FileDetector(columns, chunk_rows, make, policy, fleet).score_piece(text)
    result = frame.copy()
    for column in OUTPUT_COLUMNS:
        result[column] = scored[column].to_numpy()
    return result
