"""The device's one decision: a tail over the device's strongest evidence, held to its budget."""

from __future__ import annotations

import dataclasses
import math
from functools import partial

import numpy as np
import pandas as pd
import pytest

from fleetwatch.filemode.scoring import detect_frame
from fleetwatch.models.calibration import ALERT_SCORE, S_ALERT
from fleetwatch.models.combiner import CombinedDetector, device_tail_of
from fleetwatch.models.device_tail import DeviceTail, reading_statistic
from fleetwatch.models.errors import HyperParameterError
from fleetwatch.models.flatline import FlatlineDetector
from fleetwatch.models.registry import Tuning, default_detector, load_params
from fleetwatch.models.scores import Scores
from fleetwatch.models.tail import MIN_PEAKS
from fleetwatch.streaming.scorer.episodes import CALM_SCORE
from fleetwatch.streaming.scorer.observations import device_decided
from tests.unit import signals

MEMORY = 2000.0
"""The device tail's memory in these tests (readings)."""


def _fed(budget: float, n: int, streams: int, seed: int = 0) -> DeviceTail:
    """A device tail fed ``n`` readings, one a second, of the largest of ``streams`` members'
    exponential surprises (calibrated noise)."""
    rng = np.random.default_rng(seed)
    device = DeviceTail(budget, MEMORY)
    for start in range(0, n, 500):
        times = np.arange(start, min(start + 500, n), dtype=np.int64) * 1000
        each = [rng.exponential(1.0, times.size) for _ in range(streams)]
        device.learn(times, each, np.ones(times.size, bool), streams)
    return device


def test_the_statistic_is_the_largest_surprise_of_each_reading() -> None:
    times, top, where = reading_statistic(
        np.array([2, 1, 2, 1]), [np.array([1.0, 5.0, 0.5, 0.0]), np.array([0.0, 0.0, 3.0, 7.0])]
    )
    assert times.tolist() == [1, 2]
    assert top.tolist() == [7.0, 3.0]
    assert where.tolist() == [1, 0, 1, 0]


def test_a_young_device_is_held_to_the_prior_of_its_budget_and_streams() -> None:
    device = _fed(1.0, 150, streams=8)
    assert not device.tail.knows_excursions()
    per_day = 86_400.0
    assert math.isclose(
        device.threshold(), S_ALERT * (1 + math.log(8) / math.log(per_day)), rel_tol=1e-3
    )
    # a smaller budget is a stricter prior only through the members' own scale: never looser
    assert DeviceTail(0.01, MEMORY, device.tail, 8).threshold() <= device.threshold()
    assert device.threshold() >= S_ALERT


def test_the_own_history_outweighs_the_prior_as_it_grows() -> None:
    device = _fed(1.0, 20_000, streams=4)
    assert device.tail.knows_excursions()
    seen = device.tail.excursions_seen()
    assert seen > 10 * MIN_PEAKS
    own = device.tail.threshold(1.0, 1.0, 1, S_ALERT)
    assert abs(device.threshold() - own) <= abs(device.prior() - own) * 0.1 + 1e-9


def test_calibration_puts_the_threshold_at_the_alert_level() -> None:
    device = _fed(1.0, 5_000, streams=3)
    at = device.calibrate(np.array([device.threshold(), 0.5 * device.threshold(), 1e4]))
    assert math.isclose(at[0], S_ALERT, rel_tol=1e-9)
    assert at[1] < S_ALERT < at[2]
    assert np.all(np.diff(device.calibrate(np.linspace(0.0, 200.0, 401))) >= 0)


def test_a_combined_detector_with_a_device_budget_round_trips_its_tail() -> None:
    detector = default_detector(Tuning(device_calibration=True))
    assert isinstance(detector, CombinedDetector)
    assert detector.device_budget == 1.0
    detector.learn(signals.train())
    params = detector.to_params()
    assert params["hyper"]["device_budget"] == 1.0
    assert "device_tail" in params["state"]
    back = load_params(params)
    assert back.to_params() == params
    tail, before = device_tail_of(back), device_tail_of(detector)
    assert tail is not None
    assert before is not None
    assert tail.threshold() == before.threshold()


def test_the_device_remembers_as_long_as_its_members_tails() -> None:
    detector = default_detector(Tuning(device_calibration=True))
    tail = device_tail_of(detector)
    assert tail is not None
    assert tail.tail.summary.halflife == max(
        float(m.hyperparameters().get("tail_halflife", 0.0)) for m in detector.members()
    )
    with pytest.raises(HyperParameterError):
        CombinedDetector([FlatlineDetector()], device_budget=1.0)


def test_without_the_setting_parameters_are_as_before() -> None:
    detector = default_detector()
    assert device_tail_of(detector) is None
    params = detector.learn(signals.train()).to_params()
    assert "device_budget" not in params["hyper"]
    assert "device_tail" not in params["state"]


def test_the_device_decides_and_a_spike_still_alerts() -> None:
    detector = default_detector(Tuning(device_calibration=True)).learn(signals.train())
    frame = signals.after_training("spike")
    scores = detector.score(frame)
    start = signals.anomaly_start_ms("spike")
    assert scores.alert[frame["event_ms"].to_numpy() == start].any()


def test_device_decided_keeps_what_the_fleet_held_calm() -> None:
    device = _fed(1.0, 150, streams=8)
    n = 3
    surprise = np.array([100.0, 100.0, 1.0])
    base = Scores.build(
        "pca",
        surprise,
        np.full(n, "a", object),
        np.zeros(n),
        np.zeros(n),
        np.ones(n),
        np.zeros(n, np.int8),
    )
    held = dataclasses.replace(base, score=np.array([base.score[0], CALM_SCORE, base.score[2]]))
    out = device_decided(held, device)
    assert out.score[0] >= ALERT_SCORE
    assert out.score[1] < ALERT_SCORE
    assert out.score[2] < out.score[1]


def test_file_mode_decides_per_device_and_the_same_twice() -> None:
    rng = np.random.default_rng(3)
    n = 1_500
    values = rng.standard_t(3, (n, 3))
    values[1_200:1_210, 0] += 40.0
    frame = pd.DataFrame(
        {
            "timestamp": 1_767_600_000_000 + np.arange(n, dtype=np.int64) * 1000,
            "a": values[:, 0],
            "b": values[:, 1],
            "c": values[:, 2],
        }
    )
    on = partial(default_detector, Tuning(device_calibration=True))
    first = detect_frame(frame, "timestamp", None, ["a", "b", "c"], make=on)
    again = detect_frame(frame, "timestamp", None, ["a", "b", "c"], make=on)
    assert first["anomaly_score"].tolist() == again["anomaly_score"].tolist()
    assert first["alert"].tolist() == again["alert"].tolist()
    assert first["alert"].iloc[1_200:1_215].any()
    assert first["alert_metric"].iloc[1_200:1_215].eq("a").any()
    off = detect_frame(frame, "timestamp", None, ["a", "b", "c"])
    assert off["anomaly_score"].tolist() != first["anomaly_score"].tolist()
