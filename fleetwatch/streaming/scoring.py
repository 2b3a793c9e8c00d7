"""Scoring as a pure function over a pandas frame of readings: the Spark job maps it over
micro-batches, tests and backfills call it directly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from fleetwatch.contracts.alerts import alert_id
from fleetwatch.models.baseline import FixedBaseline

READING_COLUMNS = ["device_id", "seq", "event_ms", "received_ms", "metric", "value"]
ALERT_ARROW_SCHEMA = pa.schema(
    [
        ("alert_id", pa.string()),
        ("device_id", pa.string()),
        ("metric", pa.string()),
        ("status", pa.string()),
        ("detector", pa.string()),
        ("params_version", pa.int64()),
        ("seq", pa.int64()),
        ("event_ms", pa.int64()),
        ("received_ms", pa.int64()),
        ("detected_ms", pa.int64()),
        ("value", pa.float64()),
        ("expected", pa.float64()),
        ("band", pa.float64()),
        ("score", pa.float64()),
        ("reason", pa.string()),
    ]
)
ALERT_COLUMNS: list[str] = ALERT_ARROW_SCHEMA.names


def score_readings(readings: pd.DataFrame, detector: FixedBaseline, now_ms: int) -> pd.DataFrame:
    """One row per (reading, metric) in; one row per alert out (columns :data:`ALERT_COLUMNS`)."""
    if readings.empty:
        empty: pd.DataFrame = ALERT_ARROW_SCHEMA.empty_table().to_pandas()
        return empty
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
        alert_id(d, m, detector.kind, int(t))
        for d, t, m in zip(hits["device_id"], hits["event_ms"], hits["metric"], strict=True)
    ]
    hits["reason"] = [
        f"{m}={v:.6g} outside {e:.6g}±{b:.6g}"
        for m, v, e, b in zip(
            hits["metric"], hits["value"], hits["expected"], hits["band"], strict=True
        )
    ]
    out = hits[ALERT_COLUMNS].reset_index(drop=True)
    return out.astype({"seq": np.int64, "event_ms": np.int64, "received_ms": np.int64})


def score_batch(
    batch: pa.RecordBatch, detector: FixedBaseline, now_ms: int
) -> list[pa.RecordBatch]:
    """The Arrow form the Spark job maps over its micro-batches. (Through a Table: Spark's
    workers may hand pandas Arrow-backed string columns, which become chunked arrays.)"""
    alerts = score_readings(batch.select(READING_COLUMNS).to_pandas(), detector, now_ms)
    table = pa.Table.from_pandas(alerts, schema=ALERT_ARROW_SCHEMA, preserve_index=False)
    batches: list[pa.RecordBatch] = table.combine_chunks().to_batches()
    return batches
