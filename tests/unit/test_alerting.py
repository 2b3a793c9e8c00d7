"""When a statistic's alert starts and ends: hysteresis and the release, worked by hand."""

from __future__ import annotations

import numpy as np

from fleetwatch.models.alerting import alerts_of, hysteresis

Z = np.array([10.0, 3.0, 3.0, 3.0, 5.0, 3.0])


def test_hysteresis_sets_above_the_threshold_and_resets_at_low() -> None:
    z = np.array([0.0, 5.0, 3.0, 1.0, 6.0])
    assert hysteresis(z, 4.0, 2.0, False).tolist() == [False, True, True, False, True]
    assert hysteresis(z[:1], 4.0, 2.0, True).tolist() == [False], "an alert under way resets"
    assert hysteresis(np.array([3.0]), 4.0, 2.0, True).tolist() == [True], "...or holds"


def test_an_alert_is_released_once_it_has_fallen_for_the_hold() -> None:
    # threshold 4, low 1: hysteresis alone holds every reading from the first
    held, _, _ = alerts_of(Z, 4.0, 1.0, (False, 0.0, 0), None, 2)
    assert held.all()
    # 3 is under the threshold and at most half of the peak 10: two such readings end the alert
    # at the second; the next alert peaks at 5, and 3 is more than half of it: it holds
    alerting, peak, fallen = alerts_of(Z, 4.0, 1.0, (False, 0.0, 0), 0.5, 2)
    assert alerting.tolist() == [True, True, False, False, True, True]
    assert peak.tolist() == [10.0, 10.0, 0.0, 0.0, 5.0, 5.0]
    assert fallen.tolist() == [0, 1, 0, 0, 0, 0]


def test_the_release_continues_from_the_batch_before() -> None:
    whole = alerts_of(Z, 4.0, 1.0, (False, 0.0, 0), 0.5, 2)
    first = alerts_of(Z[:2], 4.0, 1.0, (False, 0.0, 0), 0.5, 2)
    carried = (bool(first[0][-1]), float(first[1][-1]), int(first[2][-1]))
    second = alerts_of(Z[2:], 4.0, 1.0, carried, 0.5, 2)
    for got, want in zip(second, whole, strict=True):
        np.testing.assert_array_equal(got, want[2:])
    # without what was carried, the hold would start again and the alert last a reading longer
    fresh = alerts_of(Z[2:], 4.0, 1.0, (True, 10.0, 0), 0.5, 2)
    assert fresh[0][0]
