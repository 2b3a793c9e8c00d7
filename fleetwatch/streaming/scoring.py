"""Scoring as a pure function over a pandas frame of readings: the Spark job maps it over
micro-batches, tests and backfills call it directly."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fleetwatch.contracts.alerts import alert_id
from fleetwatch.models.baseline import FixedBaseline

READING_COLUMNS = ["device_id", "seq", "event_ms", "received_ms", "metric", "value"]
ALERT_COLUMNS = [
    "alert_id",
    "device_id",
    "metric",
    "status",
    "detector",
    "params_version",
    "seq",
    "event_ms",
    "received_ms",
    "detected_ms",
    "value",
    "expected",
    "band",
    "score",
    "reason",
]


def score_readings(readings: pd.DataFrame, detector: FixedBaseline, now_ms: int) -> pd.DataFrame:
    """One row per (reading, metric) in; one row per alert out (columns :data:`ALERT_COLUMNS`)."""
    if readings.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in ALERT_COLUMNS})
    result = detector.score(readings["metric"].to_numpy(), readings["value"].to_numpy())
    hits = readings.loc[result.anomalous].copy()
    hits["expected"] = result.expected[result.anomalous]
    hits["band"] = result.band[result.anomalous]
    hits["score"] = result.score[result.anomalous]
    hits["status"] = "open"
    hits["detector"] = detector.kind
    hits["params_version"] = detector.version
    hits["detected_ms"] = now_ms
    hits["alert_id"] = [
        alert_id(d, int(s), m, detector.kind, detector.version)
        for d, s, m in zip(hits["device_id"], hits["seq"], hits["metric"], strict=True)
    ]
    hits["reason"] = [
        f"{m}={v:.6g} outside {e:.6g}±{b:.6g}"
        for m, v, e, b in zip(hits["metric"], hits["value"], hits["expected"], hits["band"], strict=True)
    ]
    out = hits[ALERT_COLUMNS].reset_index(drop=True)
    return out.astype({"seq": np.int64, "event_ms": np.int64, "received_ms": np.int64})
