"""One check suite over every registered detector kind (river's ``check_estimator`` idea).

A new kind is picked up automatically from the registry; it must also say below which
anomalies it is responsible for, or :func:`test_every_kind_declares_what_it_detects` fails."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.models import params
from fleetwatch.models.base import Detector
from fleetwatch.models.batch import Batch
from fleetwatch.models.combiner import CombinedDetector
from fleetwatch.models.registry import KINDS, create, load_params
from tests.unit import signals

RESPONSIBLE: dict[str, set[str]] = {
    "seasonal": {"spike"},
    "cusum": {"shift", "drift"},
    "level": {"shift"},
    "flatline": {"flat", "dropout"},
    # a break of one reading alone is a spike, the seasonal member's: see lasting.py
    "pca": {"decoupled", "shift"},
    "combined": set(signals.SCENARIOS),
}
MAX_DELAY = {"spike": 0, "shift": 30, "drift": 400, "flat": 15, "dropout": 0, "decoupled": 30}
"""Readings after the anomaly starts by which it must have alerted (the drift of
:mod:`signals` is slow: about 280 readings before the CUSUM is sure)."""
HORIZON = 3
"""A delay check scores at least this many times its bound in readings after the anomaly
starts, so that a detector later than the bound has readings left to alert on, and fails."""
GRADED = ("spike", "shift", "dropout")
"""Anomalies with a size (a spike's height, a shift's step, a gap's length in readings)."""
PATH_DEPENDENT = {"upper", "lower", "version", "spread", "carry", "tails", "tail", "spend", "last"}
"""State that depends on how the data was cut into batches: the CUSUM sums (see change.py), the
level detector's average, its spread and tail (measured against the profile before each batch,
see level.py), the PCA member's tail and what its last readings leave for the next one's lasting
evidence (``last``; both against the model before each batch), the openings counted against the
false-alert budget (judged against the parameters before each batch, see budget.py) and the
members' update counts inside a combined detector (checked on their own above)."""
FPR_BOUND = 1e-3
"""At most this share of rows may alert on a stationary series after warm-up."""

kinds = pytest.mark.parametrize("kind", sorted(KINDS))


def fitted(kind: str, seed: int = 1) -> Detector:
    return create(kind).learn(signals.train(seed))


def quickest(kind: str) -> str:
    """The anomaly ``kind`` is responsible for and must flag soonest."""
    return min(sorted(RESPONSIBLE[kind]), key=MAX_DELAY.__getitem__)


def test_every_kind_declares_what_it_detects() -> None:
    assert set(KINDS) == set(RESPONSIBLE)
    assert all(RESPONSIBLE.values())
    assert set().union(*RESPONSIBLE.values()) <= set(MAX_DELAY)
    assert all(RESPONSIBLE[k] & set(GRADED) for k in KINDS), "every kind ranks some anomaly"


@kinds
def test_params_round_trip_exactly_through_json(kind: str) -> None:
    detector = fitted(kind)
    text = params.dumps(detector.to_params())
    again = load_params(params.loads(text))
    assert type(again) is type(detector)
    assert params.dumps(again.to_params()) == text
    batch = signals.after_training(quickest(kind))
    first, second = detector.score(batch), again.score(batch)
    assert first.alert.any(), "the comparison covers alerting rows"
    np.testing.assert_array_equal(first.score, second.score)
    np.testing.assert_array_equal(first.reason, second.reason)


@kinds
def test_the_same_data_and_seed_give_the_same_scores(kind: str) -> None:
    # the flat-line detector scores only windows that repeat a value: 0 on a moving signal
    batch = signals.after_training("flat" if kind == "flatline" else "shift")
    same = [fitted(kind, seed=1).score(batch).score for _ in range(2)]
    np.testing.assert_array_equal(same[0], same[1])
    other = fitted(kind, seed=7).score(batch).score
    assert not np.array_equal(same[0], other)


@kinds
@pytest.mark.parametrize("scenario", [None, *signals.SCENARIOS])
def test_scores_stay_in_the_unit_interval(kind: str, scenario: str | None) -> None:
    scores = fitted(kind).score(signals.after_training(scenario))
    assert np.isfinite(scores.score).all()
    assert ((scores.score >= 0) & (scores.score <= 1)).all()


LASTING = {"pca": 1, "level": 1}
"""Readings after an anomaly's first by which a kind that alerts only on what lasts has seen it
(:mod:`~fleetwatch.models.lasting`; the level member takes a lone far reading as a shock, a
second as a shift: see ``cleaned_average`` in :mod:`~fleetwatch.models.level`)."""


def graded(scenario: str, size: float, later: int = 0) -> tuple[pd.DataFrame, int]:
    """The readings after training with one anomaly of ``size`` starting at
    :data:`signals.AT`, and the row that must carry its score: the temperature ``later``
    readings after the anomaly's first."""
    frame = signals.after_training(None)
    start = (signals.TRAIN + signals.AT) * signals.INTERVAL_MS
    after = (frame.event_ms >= start).to_numpy()
    temp = (frame.metric == "temperature").to_numpy()
    if scenario == "spike":
        frame.loc[temp & (frame.event_ms == start).to_numpy(), "value"] += size
    elif scenario == "shift":
        frame.loc[temp & after, "value"] += size
    elif scenario == "dropout":
        frame.loc[after, "event_ms"] += int(size * signals.INTERVAL_MS)
    else:
        raise ValueError(scenario)
    return frame, int(np.flatnonzero(temp & after)[later])


@pytest.mark.parametrize(
    ("kind", "scenario"),
    [(k, s) for k in sorted(RESPONSIBLE) for s in GRADED if s in RESPONSIBLE[k]],
)
def test_extreme_values_keep_their_ranking(kind: str, scenario: str) -> None:
    """A larger spike, level shift or gap scores higher, and none saturates at 1."""
    detector = fitted(kind)
    scores = []
    for size in [20.0, 50.0, 200.0, 1e3, 1e5]:
        frame, row = graded(scenario, size, LASTING.get(kind, 0))
        scores.append(detector.score(frame).score[row])
    assert (np.diff(scores) > 0).all(), scores
    assert (np.asarray(scores) < 1.0).all(), scores
    assert scores[0] >= 0.5, "the smallest already alerts"


@kinds
def test_clone_is_unfitted_with_the_same_hyperparameters(kind: str) -> None:
    detector = fitted(kind)
    twin = detector.clone()
    assert type(twin) is type(detector)
    assert twin.hyper_json() == detector.hyper_json()
    assert (twin.version, twin.trained_from_ms, twin.trained_to_ms) == (0, None, None)
    assert twin.to_params() == create(kind).to_params()
    anomaly = signals.after_training(quickest(kind))
    assert not twin.score(anomaly).alert.any()
    assert detector.score(anomaly).alert.any(), "cloning left the original fitted"


def stream(detector: Detector, frame: pd.DataFrame, size: int) -> Iterator[np.ndarray]:
    """Score then learn, batch by batch, as the streaming job does; yields the alerts."""
    times = frame["event_ms"].to_numpy()
    edges = np.unique(times)[::size]
    for lo, hi in zip(edges, [*edges[1:], times.max() + 1], strict=True):
        batch = frame[(times >= lo) & (times < hi)]
        alerts = detector.score(batch).alert
        detector.learn(batch, exclude=alerts)
        yield alerts


@kinds
def test_a_stationary_series_raises_no_alert_after_warm_up(kind: str) -> None:
    detector = fitted(kind)
    series = signals.after_training(None, seed=3, n=5000)
    alerts = np.concatenate(list(stream(detector, series, size=100)))
    assert alerts.size == 10_000
    assert alerts.mean() <= FPR_BOUND, f"{kind}: {alerts.sum()} false alerts"


@pytest.mark.parametrize(
    ("kind", "scenario"), [(k, s) for k in sorted(RESPONSIBLE) for s in sorted(RESPONSIBLE[k])]
)
def test_each_anomaly_is_flagged_by_the_detector_responsible(kind: str, scenario: str) -> None:
    detector = fitted(kind)
    after = max(signals.TEST - signals.AT, HORIZON * MAX_DELAY[scenario])
    part = signals.after_training(scenario, n=signals.AT + after)
    scores = detector.score(part)
    start = signals.anomaly_start_ms(scenario)
    times = part["event_ms"].to_numpy()
    assert np.unique(times[times >= start]).size >= HORIZON * MAX_DELAY[scenario]
    assert not scores.alert[times < start].any(), "alerted before the anomaly"
    limit = start + MAX_DELAY[scenario] * signals.INTERVAL_MS
    window = (times >= start) & (times <= limit)
    assert scores.alert[window].any(), f"{scenario} not flagged within {MAX_DELAY[scenario]}"
    assert scores.explanations()[0]


def _numbers(state: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(state, dict):
        for key, value in sorted(state.items()):
            if key not in PATH_DEPENDENT:
                yield from _numbers(value, f"{path}.{key}")
    elif isinstance(state, list) and state and isinstance(state[0], dict):
        for i, value in enumerate(state):
            yield from _numbers(value, f"{path}[{i}]")
    else:
        yield path, state


@kinds
def test_learning_in_mini_batches_equals_one_batch(kind: str) -> None:
    data = signals.train()
    whole = create(kind).learn(data, exclude=np.zeros(len(data), bool))
    parts = create(kind)
    versions = []
    times = data["event_ms"].to_numpy()
    for chunk in np.array_split(np.unique(times), 7):
        part = data[(times >= chunk[0]) & (times <= chunk[-1])]
        parts.learn(part, exclude=np.zeros(len(part), bool))
        versions.append(parts.version)
    assert versions == list(range(1, 8))
    assert whole.version == 1
    assert (parts.trained_from_ms, parts.trained_to_ms) == (
        int(data.event_ms.min()),
        int(data.event_ms.max()),
    )
    assert (whole.trained_from_ms, whole.trained_to_ms) == (
        parts.trained_from_ms,
        parts.trained_to_ms,
    )
    one, many = (
        dict(_numbers(whole.to_params()["state"])),
        dict(_numbers(parts.to_params()["state"])),
    )
    assert one.keys() == many.keys()
    for key, value in one.items():
        if isinstance(value, str) or (
            isinstance(value, list) and value and isinstance(value[0], str)
        ):
            assert value == many[key], key
        elif value is None:
            assert many[key] is None, key
        else:
            np.testing.assert_allclose(
                np.asarray(many[key], float),
                np.asarray(value, float),
                rtol=1e-9,
                atol=1e-9,
                err_msg=key,
            )


# Only the kinds that learn a level: for them a long fault learned as data would become the
# new normal (the change, flat-line and correlation detectors track no level to absorb it).
@pytest.mark.parametrize("kind", ["seasonal", "combined"])
def test_an_anomalous_stretch_excluded_from_learning_stays_anomalous(kind: str) -> None:
    detector = fitted(kind)
    fault = signals.after_training(None)
    fault = fault.assign(
        value=np.where(fault.metric == "temperature", fault.value + 6.0, fault.value)
    )
    masked, learned = detector.clone(), detector.clone()
    for d in (masked, learned):
        d.learn(signals.train())
    masked.learn(fault, exclude=np.ones(len(fault), bool))
    learned.learn(fault, exclude=np.zeros(len(fault), bool))
    later = signals.after_training(None, seed=9)
    later = later.assign(
        value=np.where(later.metric == "temperature", later.value + 6.0, later.value)
    )
    temp = (later.metric == "temperature").to_numpy()
    assert masked.score(later).alert[temp].mean() > 0.9
    assert learned.score(later).score[temp].mean() < masked.score(later).score[temp].mean()


@kinds
@pytest.mark.parametrize("scenario", signals.SCENARIOS)
def test_the_gate_surprise_is_the_scored_surprise(kind: str, scenario: str) -> None:
    """``learn`` gates itself with a surprise-only path (no explanations): it must give the
    surprise ``score`` gives, on every anomaly and every kind."""
    frame = signals.after_training(scenario)
    detector = fitted(kind)
    batch = Batch.of(frame)
    np.testing.assert_array_equal(
        batch.unsorted(detector._surprise(batch)), detector.score(frame).surprise
    )


@pytest.mark.parametrize(
    ("kind", "scenario"), [(k, s) for k in sorted(RESPONSIBLE) for s in sorted(RESPONSIBLE[k])]
)
def test_the_self_gate_leaves_out_exactly_the_flagged_rows(kind: str, scenario: str) -> None:
    """Learning through the self-gate must equal learning with ``score``'s alerts excluded
    (the change detector also reuses the gate's CUSUM run for its sums), on anomalies the
    kind flags; for the combined detector, the alerts of its per-metric members (the joint
    member's alone exclude nothing). The combined detector's persistence rule is left out here
    (tested in test_detectors)."""
    frame = signals.after_training(scenario)
    gated, explicit = fitted(kind), fitted(kind)
    flagged = explicit.score(frame).alert
    assert flagged.any(), f"{kind} flags nothing of {scenario}"
    if isinstance(gated, CombinedDetector) and isinstance(explicit, CombinedDetector):
        gated.adapt_s = explicit.adapt_s = None
        flagged = np.any([m.score(frame).alert for m in explicit.members() if m.per_metric], 0)
    gated.learn(frame)
    explicit.learn(frame, exclude=flagged)
    assert params.dumps(gated.to_params()) == params.dumps(explicit.to_params())
    probe = signals.after_training(scenario, seed=5)
    np.testing.assert_array_equal(gated.score(probe).score, explicit.score(probe).score)
