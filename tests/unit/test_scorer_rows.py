"""The scorer operator's reading rows (the raw topic's records: key, JSON value) unpacked per
device."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.telemetry import TelemetryRecord, encode
from fleetwatch.streaming.scorer.device_step import process
from fleetwatch.streaming.scorer.policy import policy_of
from fleetwatch.streaming.scorer.readings import COLUMNS, by_device, readings_by_device


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
    """A reading as the gateway writes it (``TelemetryRecord``): null fields left out."""
    record = TelemetryRecord.model_validate({k: v for k, v in reading.items() if v is not None})
    return encode(record).decode()


def test_readings_unpacked_per_device_score_as_the_exploded_long_form_did() -> None:
    readings = scorer_readings(24, seed=3)
    found = readings_by_device([r["device_id"] for r in readings], [as_json(r) for r in readings])
    assert found.skipped == 0
    unpacked = found.by_device
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
    first = {**scorer_readings(1, seed=1)[0], "metrics": {"t": 3.0, "h": 2.0}}
    second = {**first, "seq": 9, "event_ms": 5, "firmware": "2.0", "metrics": {"t": 1.5}}
    text = as_json(first).replace('"t":3.0', '"t":null')
    rows = readings_by_device(["a", "a"], [text, as_json(second)]).by_device["a"]
    assert rows["seq"].tolist() == [0, 0, 9]
    assert rows["event_ms"].dtype == np.int64
    assert rows["metric"].tolist() == ["t", "h", "t"]
    assert math.isnan(rows["value"][0])
    assert rows["value"][1:].tolist() == [2.0, 1.5]
    assert rows["firmware"].tolist() == [None, None, "2.0"]


def test_values_that_are_not_readings_are_skipped_and_counted() -> None:
    good = as_json(scorer_readings(1, seed=2)[0])
    bad = [
        "not json",
        "[1, 2]",
        good.replace('"seq":0', '"seq":"0"'),
        good.replace('"seq":0', '"seq":true'),
        good.replace('"event_ms":1000000', '"event_ms":1000000.5'),
        good.replace('"metrics":{', '"metrics":{"x":"high",'),
        good.replace('"received_ms":1000030', '"received_ms":"soon"'),
        json.dumps({"seq": 1, "event_ms": 5}),
    ]
    found = readings_by_device(["a"] * (len(bad) + 1), [*bad, good])
    assert found.skipped == len(bad)
    assert found.by_device["a"]["seq"].tolist() == [0, 0]


def test_fields_an_older_record_lacks_are_completed_as_the_gateway_would() -> None:
    text = json.dumps({"seq": 4, "event_ms": 7000, "metrics": {"t": 1.0}, "firmware": 3})
    rows = readings_by_device(["a"], [text]).by_device["a"]
    assert rows["device_event_ms"].tolist() == rows["device_sent_ms"].tolist() == [7000]
    assert rows["received_ms"].tolist() == [7000]
    assert rows["clock_offset_ms"].tolist() == [0]
    assert rows["firmware"].tolist() == [None]


def test_a_record_beyond_the_contract_bounds_is_skipped_and_the_rest_kept() -> None:
    """One record with a seq past 64 bits once aborted every scorer micro-batch for the whole
    fleet (OverflowError building the columns), again at each restart."""
    good = {"device_id": "d1", "seq": 1, "event_ms": 1_000, "metrics": {"t": 1.0}}
    bad = [
        {**good, "seq": 1180591620717411303424},
        {**good, "event_ms": 2**64},
        {**good, "received_ms": -(2**70)},
        {**good, "metrics": {"t": 1e300}},
    ]
    texts = [json.dumps(r) for r in [*bad, good]]
    readings = readings_by_device(["d1"] * len(texts), texts)
    assert readings.skipped == len(bad)
    assert list(readings.by_device["d1"]["seq"]) == [1]


def test_readings_of_any_number_of_metrics_unpack_to_each_devices_long_form() -> None:
    """Devices interleaved, readings of none, one or several metrics: each device's rows are
    its readings' (fields repeated per metric), in the order they came."""
    rng = np.random.default_rng(71)
    devices, texts = [], []
    want: dict[str, list[tuple[Any, ...]]] = {}
    for i in range(300):
        device = f"d{int(rng.integers(5))}"
        names = [str(n) for n in rng.choice(list("abcd"), int(rng.integers(4)), replace=False)]
        metrics = {n: None if rng.random() < 0.1 else float(rng.normal()) for n in names}
        firmware = "1.2" if rng.random() < 0.5 else None
        reading = {"seq": i, "event_ms": 1_000 + i, "firmware": firmware, "metrics": metrics}
        devices.append(device)
        texts.append(json.dumps(reading))
        want.setdefault(device, [])
        for name, value in metrics.items():
            fields = (i, 1_000 + i, 1_000 + i, 1_000 + i, 1_000 + i, 0, firmware, None)
            want[device].append((*fields, name, math.nan if value is None else value))
    found = readings_by_device(devices, texts)
    assert list(found.by_device) == list(dict.fromkeys(devices))
    for device, rows in found.by_device.items():
        got = list(zip(*(rows[c].tolist() for c in COLUMNS), strict=True))
        assert len(got) == len(want[device])
        for g, w in zip(got, want[device], strict=True):
            assert g[:-1] == w[:-1]
            assert g[-1] == w[-1] or (math.isnan(g[-1]) and math.isnan(w[-1]))
