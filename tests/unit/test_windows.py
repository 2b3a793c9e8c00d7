"""Event-time window features in the scorer: which windows a reading falls in, when a window
is final, and what reaches ``device.state``."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from fleetwatch.contracts.devices import DeviceState
from fleetwatch.contracts.settings import ScoreSettings
from fleetwatch.streaming.scorer.device_step import Role, process
from fleetwatch.streaming.scorer.windows import WindowSpec, add, close
from tests.unit.test_device_scoring import POLICY, T0, frame


def test_tumbling_and_sliding_windows_hold_the_right_readings() -> None:
    tumbling, sliding = WindowSpec(60_000, 60_000), WindowSpec(60_000, 20_000)
    assert list(tumbling.starts(125_000)) == [120_000]
    assert list(sliding.starts(125_000)) == [80_000, 100_000, 120_000]
    assert list(sliding.starts(120_000)) == [80_000, 100_000, 120_000]
    assert list(sliding.starts(119_999)) == [60_000, 80_000, 100_000]
    with pytest.raises(ValueError, match="slide"):
        WindowSpec(10_000, 20_000)
    with pytest.raises(ValueError, match="window_slide_s"):
        ScoreSettings(window_size_s=10, window_slide_s=20)


def test_a_window_is_final_once_the_watermark_passes_its_end() -> None:
    spec = WindowSpec(60_000, 60_000)
    windows: dict[str, dict[str, list[float]]] = {}
    values = [20.0, 22.0, 21.0, 25.0]
    add(windows, spec, [0, 10_000, 59_999, 60_000], ["t"] * 4, values)
    assert close(windows, spec, 59_999) == {}
    first = close(windows, spec, 60_000)["t"]
    assert (first["start_ms"], first["end_ms"], first["count"]) == (0, 60_000, 3)
    assert first["mean"] == pytest.approx(21.0)
    assert first["std"] == pytest.approx(statistics.stdev(values[:3]))
    assert (first["min"], first["max"]) == (20.0, 22.0)
    assert list(windows) == ["60000"]  # the next one stays open


def test_the_scorer_publishes_closed_windows_and_late_readings_within_the_lateness_count() -> None:
    policy = dataclasses.replace(POLICY, windows=WindowSpec(10_000, 10_000))
    t = T0 - T0 % 10_000
    state, _ = process("d1", None, None, frame([(0, t, 21.0), (2, t + 2000, 23.0)]), 0, t, policy)
    # out of order, within the lateness: it joins the still-open window
    state, _ = process("d1", state, None, frame([(1, t + 1000, 22.0)]), t, t, policy)
    # a reading that moves the watermark past the window's end closes it
    state, out = process("d1", state, None, frame([(12, t + 12_000, 21.0)]), t + 10_000, t, policy)
    record = [json.loads(v) for role, v in out.records if role == Role.STATE][-1]
    window = DeviceState.model_validate(record).windows["temperature"]
    assert (window.start_ms, window.count) == (t, 3)
    assert window.mean == pytest.approx(22.0)
    # behind the watermark: late, and the closed window does not change
    state, out = process("d1", state, None, frame([(3, t + 3000, 99.0)]), t + 11_000, t, policy)
    assert state["closed_windows"]["temperature"]["count"] == 3
    assert state["late_readings"] == 1


def test_integer_columns_spark_hands_over_as_floats_are_integers_again() -> None:
    # a batch that held a parameter row (nulls in the integer columns) comes as float64
    t = T0 - T0 % 60_000
    given = frame([(0, t, 21.0), (1, t + 1000, 22.0)])
    floats = given.astype({c: "float64" for c in ("seq", "event_ms", "received_ms")})
    state, _ = process("d1", None, None, floats, 0, t, POLICY)
    assert list(state["open_windows"]) == [str(t)]
    assert state["last_seen_ms"] == t + 1000
    assert isinstance(state["last_seen_ms"], int)
