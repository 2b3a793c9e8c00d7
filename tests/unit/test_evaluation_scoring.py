"""SKAB's outlier and changepoint (NAB) scoring, on small examples worked out by hand."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from fleetwatch.evaluation.changepoints import (
    LOW_FN,
    LOW_FP,
    STANDARD,
    NabTally,
    curve,
    nab_tally,
    right_windows,
)
from fleetwatch.evaluation.detections import changes, run_starts, runs
from fleetwatch.evaluation.errors import EvaluationError
from fleetwatch.evaluation.false_rows import FalseRows, false_rows
from fleetwatch.evaluation.outliers import Confusion, confusion
from fleetwatch.evaluation.skab import score_file
from fleetwatch.models.errors import UnknownDetector
from fleetwatch.models.registry import default_detector, detector_factory

S = 1000  # ms


def worth(x: float, a_fp: float, a_tp: float = 1.0) -> float:
    """The scoring curve at x in [-pi/2, pi/2], written out: A_TP at -pi/2, A_FP at pi/2."""
    return a_fp + (a_tp - a_fp) / 2 * (1 - math.tanh(x) / math.tanh(math.pi / 2))


# A detection a third of the way into its window reads sample int(1000 / 3) = 333 of the
# curve, at x = -pi/2 + 333 * pi / 999 = -pi/6.
THIRD_STANDARD = worth(-math.pi / 6, -0.11)  # 0.73575...
THIRD_LOW_FP = worth(-math.pi / 6, -0.22)  # 0.70956...


def test_outlier_counts_and_rates() -> None:
    #        rows: 0  1  2  3  4  5  6  7
    labels = [0, 0, 1, 1, 1, 0, 0, 0]
    flags = [0, 1, 1, 1, 0, 0, 0, 1]
    c = confusion(labels, flags)
    assert c == Confusion(tp=2, fp=2, tn=3, fn=1)
    assert c.f1 == pytest.approx(2 / (2 + (1 + 2) / 2))  # 0.571
    assert c.far_pct == pytest.approx(40.0)  # 2 of 5 normal rows flagged
    assert c.mar_pct == pytest.approx(100 / 3)  # 1 of 3 anomalous rows missed


def test_outlier_counts_are_summed_over_files_before_the_rates() -> None:
    a = confusion([1, 1, 0, 0], [1, 1, 0, 0])  # perfect: F1 1
    b = confusion([1, 0, 0, 0], [0, 1, 1, 1])  # F1 0
    both = a + b
    assert both == Confusion(tp=2, fp=3, tn=2, fn=1)
    assert both.f1 == pytest.approx(2 / (2 + 2))  # 0.5, not the mean of 1 and 0 by chance
    assert both.far_pct == pytest.approx(60.0)
    assert both.mar_pct == pytest.approx(100 / 3)


def test_rates_without_a_denominator_are_nan() -> None:
    c = confusion([0, 0, 0], [0, 0, 0])
    assert math.isnan(c.f1)
    assert math.isnan(c.mar_pct)
    assert c.far_pct == 0.0


def test_runs_changes_and_starts() -> None:
    flags = [1, 1, 0, 1, 0, 0, 1, 1]
    assert run_starts(flags).tolist() == [1, 0, 0, 1, 0, 0, 1, 0]
    assert changes(flags).tolist() == [1, 0, 1, 1, 1, 0, 1, 0]
    assert runs(flags) == 3
    assert runs([0, 0]) == 0


def test_the_scoring_curve_runs_from_a_tp_at_the_start_to_a_fp_at_the_end() -> None:
    assert curve(0.0, STANDARD) == pytest.approx(1.0)
    assert curve(1.0, STANDARD) == pytest.approx(-0.11)  # the last sample, index 999
    assert curve(1.0, LOW_FP) == pytest.approx(-0.22)
    assert curve(1 / 3, STANDARD) == pytest.approx(THIRD_STANDARD)
    assert abs(THIRD_STANDARD - 0.7357504) < 1e-7
    # halfway: sample 500, x = -pi/2 + 500 * pi / 999 = pi / 1998, just past the middle
    assert curve(0.5, STANDARD) == pytest.approx(worth(math.pi / 1998, -0.11))
    assert curve(0.5, STANDARD) < (1.0 - 0.11) / 2


def test_windows_open_to_the_right_and_a_later_one_is_cut_where_the_earlier_ends() -> None:
    windows = right_windows([0, 30 * S, 200 * S], 60 * S)
    assert windows == [(0, 60 * S), (60 * S, 90 * S), (200 * S, 260 * S)]


def test_only_the_first_detection_in_a_window_counts_and_outside_ones_are_false() -> None:
    # changepoints at 100 s and 130 s: windows [100, 160] s and, cut, [160, 190] s
    tally = nab_tally([100 * S, 130 * S], [50 * S, 100 * S, 120 * S, 160 * S, 300 * S], 60 * S)
    # 50 s: before every window, false. 100 s: first in window 1, at its start. 120 s: second
    # in window 1, ignored. 160 s: the instant both windows share: second in window 1, first in
    # window 2, at its start. 300 s: after every window, false.
    assert (tally.windows, tally.detected, tally.false_positives) == (2, 2, 2)
    # S = 2 * 1 + 2 * A_FP; null = 2 * A_FN; perfect = 2 * A_TP
    assert tally.score(STANDARD) == pytest.approx(100 * (2 - 0.22 + 2) / (2 + 2))  # 94.5
    assert tally.score(LOW_FP) == pytest.approx(100 * (2 - 0.44 + 2) / (2 + 2))  # 89.0
    assert tally.score(LOW_FN) == pytest.approx(100 * (2 - 0.22 + 4) / (2 + 4))  # 96.33


def test_nab_is_summed_over_files_before_normalising() -> None:
    # file A: one window [0, 60] s, detected a third of the way in (20 s)
    a = nab_tally([0], [20 * S], 60 * S)
    # file B: one window, missed, and a detection long after it
    b = nab_tally([0], [500 * S], 60 * S)
    both = a + b
    assert (both.windows, both.detected, both.missed, both.false_positives) == (2, 1, 1, 1)
    raw = THIRD_STANDARD - 1.0 - 0.11
    assert both.raw(STANDARD) == pytest.approx(raw)
    assert both.score(STANDARD) == pytest.approx(100 * (raw + 2) / (2 + 2))  # 40.64
    assert a.score(STANDARD) == pytest.approx(100 * (THIRD_STANDARD + 1) / 2)


def test_no_window_gives_no_score_and_every_detection_is_false() -> None:
    tally = nab_tally([], [1 * S, 2 * S], 60 * S)
    assert tally.false_positives == 2
    assert math.isnan(tally.score(STANDARD))
    assert math.isnan(NabTally().score(STANDARD))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: confusion([0, 1], [0]), "labels but"),
        (lambda: confusion([0, 2], [0, 1]), "0 or 1"),
        (lambda: right_windows([10, 5], 60 * S), "strictly increasing"),
        (lambda: right_windows([0], 0), "positive"),
        (lambda: score_file([0, 1], [0, 0], [0, 0], [0, 0, 0]), "one of each per row"),
        (lambda: score_file([5, 1], [0, 0], [0, 0], [0, 0]), "time order"),
    ],
)
def test_inputs_that_cannot_be_scored_are_refused(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(EvaluationError, match=message):
        call()


# A SKAB-shaped file made up for this test: 20 rows 10 s apart, the fault in rows 8-13, one
# changepoint at row 8 (80 s: its window is [80, 140] s, rows 8-14). The `alert` column is
# what a detector might have said: rows 2-3, 10-12 and 17.
HAND_LABELLED = """datetime;Pressure;Temperature;anomaly;changepoint;alert
2021-06-01 08:00:00;1.00;20.0;0.0;0.0;0
2021-06-01 08:00:10;1.01;20.1;0.0;0.0;0
2021-06-01 08:00:20;0.99;20.0;0.0;0.0;1
2021-06-01 08:00:30;1.00;19.9;0.0;0.0;1
2021-06-01 08:00:40;1.02;20.0;0.0;0.0;0
2021-06-01 08:00:50;0.98;20.1;0.0;0.0;0
2021-06-01 08:01:00;1.00;20.0;0.0;0.0;0
2021-06-01 08:01:10;1.01;19.9;0.0;0.0;0
2021-06-01 08:01:20;1.60;20.0;1.0;1.0;0
2021-06-01 08:01:30;1.62;20.1;1.0;0.0;0
2021-06-01 08:01:40;1.61;20.0;1.0;0.0;1
2021-06-01 08:01:50;1.63;20.2;1.0;0.0;1
2021-06-01 08:02:00;1.60;20.1;1.0;0.0;1
2021-06-01 08:02:10;1.59;20.0;1.0;0.0;0
2021-06-01 08:02:20;1.01;20.0;0.0;0.0;0
2021-06-01 08:02:30;1.00;19.9;0.0;0.0;0
2021-06-01 08:02:40;0.99;20.0;0.0;0.0;0
2021-06-01 08:02:50;1.00;20.1;0.0;0.0;1
2021-06-01 08:03:00;1.01;20.0;0.0;0.0;0
2021-06-01 08:03:10;1.00;20.0;0.0;0.0;0
"""


@pytest.fixture(scope="module")
def realdata() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "quality" / "realdata.py"
    spec = importlib.util.spec_from_file_location("bench_quality_realdata", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def hand_labelled(tmp_path: Path, realdata: ModuleType) -> pd.DataFrame:
    path = tmp_path / "1.csv"
    path.write_text(HAND_LABELLED)
    frame: pd.DataFrame = realdata.read_skab(path)
    return frame


def test_a_hand_labelled_file_through_the_bench_scoring(
    realdata: ModuleType, hand_labelled: pd.DataFrame
) -> None:
    tally = realdata.score_frame(hand_labelled, scored_from=0)
    # rows: flagged 2, 3, 10, 11, 12, 17; anomalous 8-13
    assert tally.confusion == Confusion(tp=3, fp=3, tn=11, fn=3)
    figures = realdata.figures(tally)
    assert figures["outlier_f1"] == 0.5  # 3 / (3 + 3)
    assert figures["far_pct"] == pytest.approx(21.43)  # 3 of 14
    assert figures["mar_pct"] == 50.0  # 3 of 6
    assert (tally.episodes, tally.anomalies, tally.files, tally.rows) == (3, 1, 1, 20)
    # openings at 20 s (false), 100 s (a third into [80, 140] s), 170 s (false)
    assert tally.openings.false_positives == 2
    assert tally.openings.score(STANDARD) == pytest.approx(100 * (THIRD_STANDARD - 0.22 + 1) / 2)
    assert figures["nab_standard_openings"] == pytest.approx(75.79)
    assert tally.openings.score(LOW_FP) == pytest.approx(100 * (THIRD_LOW_FP - 0.44 + 1) / 2)
    assert tally.openings.score(LOW_FN) == pytest.approx(100 * (THIRD_STANDARD - 0.22 + 2) / 3)
    # every flagged row: 100 s counts, 110 s and 120 s are ignored, 20, 30 and 170 s are false
    assert tally.rows_nab.score(STANDARD) == pytest.approx(100 * (THIRD_STANDARD - 0.33 + 1) / 2)
    # every change: on at 20, off at 40, on at 100 (counts), off at 130 (ignored), on at 170,
    # off at 180 s: four false
    assert tally.changes_nab.false_positives == 4
    assert tally.changes_nab.score(STANDARD) == pytest.approx(100 * (THIRD_STANDARD - 0.44 + 1) / 2)
    # the headline NAB figures are SKAB's notebooks' protocol: every change of the flag
    assert figures["nab_standard"] == pytest.approx(tally.changes_nab.score(STANDARD), abs=0.005)
    assert figures["nab_low_fp"] == pytest.approx(tally.changes_nab.score(LOW_FP), abs=0.005)
    assert figures["windows_detected"] == tally.changes_nab.detected == 1
    # the false rows 2 and 3 are 50 and 60 s before the fault (within the 60 s window), 17 apart
    assert tally.false_rows == FalseRows(overrun=0, early=2, apart=1)
    assert figures["far_early_pct"] == pytest.approx(14.29)  # 2 of 14
    assert figures["far_apart_pct"] == pytest.approx(7.14)
    assert figures["far_overrun_pct"] == 0.0


def test_the_labels_as_flags_are_the_benchs_reference(
    realdata: ModuleType, hand_labelled: pd.DataFrame
) -> None:
    tally = realdata.labels_as_flags(hand_labelled, scored_from=0)
    # flags on at 80 s, the window's start (worth A_TP), off at 140 s, its end (ignored)
    assert tally.changes_nab.detected == 1
    assert tally.changes_nab.false_positives == 0
    assert realdata.labels_figures(tally) == {
        "nab_standard_labels": 100.0,
        "nab_low_fp_labels": 100.0,
        "nab_low_fn_labels": 100.0,
        "windows_detected_labels": 1,
    }
    # the file's own flags are left alone
    assert np.flatnonzero(hand_labelled["alert"]).tolist() == [2, 3, 10, 11, 12, 17]
    # and labels that end 20 s after the window, at 160 s, give one false positive
    late = hand_labelled.copy()
    late.loc[14:15, "anomaly"] = 1.0
    assert realdata.labels_as_flags(late, scored_from=0).changes_nab.false_positives == 1


def test_false_rows_are_told_apart_by_where_they_lie() -> None:
    # rows 10 s apart, a 25 s window; faults in rows 5-7 and 14-15; flagged: 1 (apart: 40 s
    # before the first fault), 3-9 (3, 4: early; 8, 9: the alert outlasts the fault), 11 (apart:
    # a new run after the fault, 30 s before the next), 13-16 (13 early, 16 overrun)
    times = np.arange(18, dtype=np.int64) * 10 * S
    truth = np.zeros(18, bool)
    truth[[5, 6, 7, 14, 15]] = True
    flagged = np.zeros(18, bool)
    flagged[[1, 3, 4, 5, 6, 7, 8, 9, 11, 13, 14, 15, 16]] = True
    found = false_rows(times, truth, flagged, 25 * S)
    assert found == FalseRows(overrun=3, early=3, apart=2)
    assert found.total == int((flagged & ~truth).sum())
    assert false_rows(times, truth, truth, 25 * S) == FalseRows(), "no false row, nothing"
    assert false_rows(times, truth, flagged, 30 * S) == FalseRows(3, 4, 1), "11 is 30 s early"
    assert found + found == FalseRows(6, 6, 4)


def test_skab_split_scores_from_the_given_row_and_a_run_under_way_counts_there(
    realdata: ModuleType, hand_labelled: pd.DataFrame
) -> None:
    tally = realdata.score_frame(hand_labelled, scored_from=3)
    # rows 3-19: flagged 3, 10, 11, 12, 17; the run of rows 2-3 counts as opening at row 3
    assert tally.confusion == Confusion(tp=3, fp=2, tn=9, fn=3)
    assert tally.episodes == 3
    assert tally.openings.false_positives == 2
    assert tally.rows == 17


def test_the_bench_runs_the_engine_on_the_sensors_only(
    realdata: ModuleType, hand_labelled: pd.DataFrame
) -> None:
    flags, _, scores = realdata.detect(hand_labelled, 5)
    relabelled = hand_labelled.assign(anomaly=1.0, changepoint=1.0, alert=1)
    again, _, _ = realdata.detect(relabelled, 5)
    assert flags.dtype == np.bool_
    assert flags.shape == (20,)
    assert flags.tolist() == again.tolist()
    assert scores.shape == (20,)
    assert np.all((scores >= 0) & (scores <= 1))


def test_the_bench_runs_a_chosen_combination_of_detectors(
    realdata: ModuleType, hand_labelled: pd.DataFrame
) -> None:
    make = detector_factory("seasonal,flatline")
    assert [m.kind for m in make().members()] == ["seasonal", "flatline"]
    assert make() is not make(), "one detector per device"
    flags, _, _ = realdata.detect(hand_labelled, 5, make)
    assert flags.shape == (20,)
    assert detector_factory(None)().hyper_json() == default_detector().hyper_json()
    with pytest.raises(UnknownDetector, match="'nope'"):
        detector_factory("seasonal,nope")
