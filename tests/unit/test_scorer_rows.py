"""The scorer operator's reading rows (one JSON text per reading) unpacked per device."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.contracts.settings import Settings
from fleetwatch.streaming.device_processor import policy_of
from fleetwatch.streaming.device_scoring import process
from fleetwatch.streaming.rows import COLUMNS, READING, by_device, readings_by_device


def scorer_readings(n: int, seed: int) -> list[dict[str, Any]]:
    """Readings as the scorer parses them: two devices, some repeated, one out of order, a
    firmware on some."""
    rng = np.random.default_rng(seed)
    readings = []
    for i in range(n):
        seq = i // 2 if i != 7 else 1  # a repeat of seq 1
        event = 1_000_000 + seq * 1000 - (5000 if i == 9 else 0)
        readings.append(
            {
                "device_id": "ab"[i % 2],
                "seq": seq,
                "event_ms": event,
                "device_event_ms": event,
                "device_sent_ms": event + 1,
                "received_ms": event + 30,
                "clock_offset_ms": 0,
                "firmware": "1.2" if i % 3 else None,
                "status": None,
                "metrics": {"t": float(rng.normal(20, 1)), "h": float(i)},
            }
        )
    return readings


def as_json(reading: dict[str, Any]) -> str:
    """A reading as ``to_json(struct(*READING, metrics))`` writes it: null fields left out."""
    fields = {c: reading[c] for c in (*READING, "metrics") if reading[c] is not None}
    return json.dumps(fields, separators=(",", ":"))


def test_readings_unpacked_per_device_score_as_the_exploded_long_form_did() -> None:
    readings = scorer_readings(24, seed=3)
    unpacked = readings_by_device(
        [r["device_id"] for r in readings], [as_json(r) for r in readings]
    )
    exploded = pd.DataFrame(
        [{**r, "metric": m, "value": v} for r in readings for m, v in r["metrics"].items()]
    )[["device_id", *COLUMNS]]
    expected = dict(by_device(exploded))
    assert sorted(unpacked) == sorted(expected) == ["a", "b"]
    policy = policy_of(Settings())
    for device, rows in unpacked.items():
        assert len(rows) == len(expected[device]) == 24
        got = process(device, None, None, rows, 990_000, 2_000_000, policy)
        want = process(device, None, None, expected[device], 990_000, 2_000_000, policy)
        assert got[1].records == want[1].records
        assert got[0] == want[0]
        assert got[1].duplicates == want[1].duplicates == (1 if device == "b" else 0)


def test_entries_keep_arrival_order_and_a_null_metric_value_is_nan() -> None:
    first = {**scorer_readings(1, seed=1)[0], "metrics": {"t": None, "h": 2.0}}
    second = {**first, "seq": 9, "event_ms": 5, "firmware": "2.0", "metrics": {"t": 1.5}}
    rows = readings_by_device(["a", "a"], [as_json(first), as_json(second)])["a"]
    assert rows["seq"].tolist() == [0, 0, 9]
    assert rows["event_ms"].dtype == np.int64
    assert rows["metric"].tolist() == ["t", "h", "t"]
    assert math.isnan(rows["value"][0])
    assert rows["value"][1:].tolist() == [2.0, 1.5]
    assert rows["firmware"].tolist() == [None, None, "2.0"]
