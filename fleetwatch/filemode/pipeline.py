"""One device of a file through the pipeline's own per-device steps: the scorer's
(:func:`~fleetwatch.streaming.scorer.device_step.process`: its state, device-wide moves, alert
episodes) and the trainer's (:func:`~fleetwatch.streaming.trainer.learning.learn_update`).

Each chunk of the device's rows is one micro-batch: the scorer's step scores it with the
parameters the trainer published after the earlier chunks, then the trainer learns it and
publishes the next version. The watermark is the newest event time of the earlier chunks (a
file's rows come in time order: none is late), and the scorer's clock is the chunk's newest
event time. A row is one reading, numbered in the device's time order.

What a row gets:

- ``alert``: the device has an alert open at that reading, from the reading that opens it up to
  the one that resolves it, as an operator would see it;
- ``anomaly_score``: the highest score of the reading's observations (every metric and kind);
- ``alert_metric`` and ``reason``: of the alert that reading opened or updated, else of the
  highest-scoring observation among the device's open alerts.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from fleetwatch.models.base import Detector
from fleetwatch.streaming.scorer.detectors import FleetLookup
from fleetwatch.streaming.scorer.device_state import DeviceScoringState
from fleetwatch.streaming.scorer.device_step import Role, process
from fleetwatch.streaming.scorer.episodes import Observation
from fleetwatch.streaming.scorer.policy import Policy
from fleetwatch.streaming.scorer.readings import COLUMNS
from fleetwatch.streaming.trainer.learning import learn_update

_IDS = itertools.count()
"""The scorer keeps parsed detectors by device id in the process (its cache): each file's
devices get ids of their own."""


@dataclass
class Marks:
    """What rows get (see the module docstring), a row each, in the rows' order."""

    score: npt.NDArray[np.float64]
    alert: npt.NDArray[np.bool_]
    metric: npt.NDArray[np.object_]
    reason: npt.NDArray[np.object_]

    @classmethod
    def empty(cls, n: int) -> Marks:
        """``n`` rows with no score, no alert, no metric and no reason yet."""
        blank = np.full(n, "", dtype=object)
        return cls(np.full(n, np.nan), np.zeros(n, bool), blank, blank.copy())


@dataclass
class DevicePipeline:
    """One device's scorer state and trainer detector, across the chunks of a file."""

    policy: Policy
    trainer: Detector
    """The device's detector as the trainer holds it: it learns each chunk in place."""
    device_id: str = field(default_factory=lambda: f"file-{next(_IDS)}")
    state: DeviceScoringState | None = None
    params_json: str | None = None
    version: int = 0
    fresh: bool = False
    """Whether ``params_json`` is a version the scorer has not been given yet."""
    newest_ms: int | None = None
    seq: int = 0
    open_alerts: dict[str, Observation] = field(default_factory=dict)
    """Alert id → the observation of its latest event, for the alerts open now."""
    in_force: tuple[int, str | None] = (0, None)
    """The parameters (version, JSON) the latest chunk was scored with: learned from the chunks
    before it only, what a fleet pooled after that chunk's first reading may take
    (:mod:`~fleetwatch.filemode.fleet`)."""

    def chunk(
        self,
        event_ms: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        names: list[str],
        fleet: FleetLookup | None = None,
    ) -> Marks:
        """Score then learn one chunk: ``values`` has a row per reading (in time order) and a
        column per metric of ``names``; NaN is a metric the reading does not have. ``fleet``
        finds the champion of the device's scope, as the scorer's does."""
        n = event_ms.size
        marks = Marks.empty(n)
        present = ~np.isnan(values)
        rows, cols = np.nonzero(present)
        if rows.size == 0:
            return marks
        first = self.seq
        self.seq += n
        frame = _long_rows(
            first + rows, event_ms[rows], [names[c] for c in cols], values[rows, cols]
        )
        watermark = event_ms[0] if self.newest_ms is None else self.newest_ms
        self.newest_ms = (
            int(event_ms[-1]) if self.newest_ms is None else max(self.newest_ms, int(event_ms[-1]))
        )
        if self.state is not None and self.fresh:
            self.state["params_version"] = self.version
        row_scores: dict[int, float] = {}
        self.in_force = (self.version, self.params_json)
        self.state, out = process(
            self.device_id,
            self.state,
            self.params_json if self.fresh else None,
            frame,
            int(watermark),
            self.newest_ms,
            self.policy,
            fleet,
            row_scores,
        )
        self.fresh = False
        self._mark(marks, first, row_scores, out.records)
        self._learn(frame)
        return marks

    def _mark(
        self,
        marks: Marks,
        first: int,
        row_scores: dict[int, float],
        records: list[tuple[Role, str]],
    ) -> None:
        events: dict[int, list[dict[str, Any]]] = {}
        for role, value in records:
            if role == Role.ALERTS:
                event = json.loads(value)
                events.setdefault(int(event["seq"]), []).append(event)
        for seq in range(first, first + marks.score.size):
            i = seq - first
            marks.score[i] = row_scores.get(seq, 0.0)
            for event in events.get(seq, ()):
                if event["status"] == "resolve":
                    self.open_alerts.pop(event["alert_id"], None)
                else:
                    self.open_alerts[event["alert_id"]] = _as_observation(event)
                    marks.metric[i], marks.reason[i] = event["metric"], event["reason"]
            if self.open_alerts:
                marks.alert[i] = True
                if not marks.metric[i]:
                    held = max(self.open_alerts.values(), key=lambda o: o.score)
                    marks.metric[i], marks.reason[i] = held.metric, held.reason

    def _learn(self, frame: pd.DataFrame) -> None:
        update = learn_update(self.params_json, frame, self.trainer)
        if update is not None:
            self.params_json = update.params_json
            self.version = int(update.header["version"])
            self.fresh = True


def _long_rows(
    seq: npt.NDArray[np.int64],
    event_ms: npt.NDArray[np.int64],
    metrics: list[str],
    values: npt.NDArray[np.float64],
) -> pd.DataFrame:
    """The scorer's input rows (one per reading and metric) for readings a file gives."""
    n = seq.size
    times = event_ms.astype(np.int64)
    cols: dict[str, Any] = {
        "seq": seq.astype(np.int64),
        "event_ms": times,
        "device_event_ms": times,
        "device_sent_ms": times,
        "received_ms": times,
        "clock_offset_ms": np.zeros(n, np.int64),
        "firmware": np.full(n, None, dtype=object),
        "status": np.full(n, None, dtype=object),
        "metric": np.array(metrics, dtype=object),
        "value": values.astype(np.float64),
    }
    return pd.DataFrame({c: cols[c] for c in COLUMNS})


def _as_observation(event: dict[str, Any]) -> Observation:
    nan = float("nan")
    return Observation(
        event["metric"],
        event["detector"],
        float(event["score"]),
        int(event["seq"]),
        int(event["event_ms"]),
        int(event["received_ms"]),
        nan,
        nan,
        nan,
        event["reason"],
    )
