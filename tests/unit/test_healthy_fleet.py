"""The healthy-fleet bench's counting: episodes, the member that carried each, benign events."""

from __future__ import annotations

import pandas as pd

from bench.quality.healthy_fleet import (
    HOUR_MS,
    START_MS,
    member_of,
    near_benign,
    openings,
    recording,
)


def test_the_member_is_the_reasons_last_word_and_a_device_wide_move_is_state() -> None:
    assert member_of("value=9 outside expected 1±2 (p≈1e-08, seasonal)") == "seasonal"
    assert member_of("value=9: level shifted up from 1±2 (p≈1e-14, level)") == "level"
    assert member_of("every metric moved at once (a=1, b=2); strongest: a=1 (p≈1e-9, level)") == (
        "state"
    )
    assert member_of("something else entirely") == "other"


def test_an_alert_is_a_run_of_a_devices_alerting_rows_and_runs_do_not_join_across_devices() -> None:
    scored = pd.DataFrame(
        {
            "device_id": ["a", "a", "a", "a", "b", "b", "b"],
            "timestamp": [1, 2, 3, 4, 1, 2, 3],
            "alert": [False, True, False, True, True, True, False],
            "reason": ["", "x", "", "x", "y", "", ""],
        }
    )
    opened = openings(scored)
    assert list(zip(opened["device_id"], opened["timestamp"], strict=True)) == [
        ("a", 2),
        ("a", 4),
        ("b", 1),
    ]


def test_an_opening_is_near_a_benign_event_of_its_own_device_within_a_minute() -> None:
    opened = pd.DataFrame(
        {"device_id": ["a", "a", "b"], "timestamp": [100_000, 500_000, 100_000], "reason": ""}
    )
    benign = [{"device_id": "a", "start_ms": 150_000, "end_ms": 200_000}]
    assert near_benign(opened, benign) == 1  # a at 100 s (50 s before); not a at 500 s, not b


def test_a_recording_is_each_devices_readings_in_time_order_without_anomalies() -> None:
    frame, benign = recording("temperature", devices=2, days=2 / 24, rate=0.1, seed=3)
    assert set(frame["device_id"]) == {"sensor-0000", "sensor-0001"}
    per_device = frame.groupby("device_id")["timestamp"]
    assert per_device.is_monotonic_increasing.all()
    assert per_device.size().between(700, 740).all()  # 2 h at one reading every 10 s
    assert frame["timestamp"].between(START_MS, START_MS + 2 * HOUR_MS + 20_000).all()
    assert frame[["temperature", "humidity"]].notna().all().all()
    assert all(event["class"] == "normal" for event in benign)
