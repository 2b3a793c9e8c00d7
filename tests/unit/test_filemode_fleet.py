"""File mode with ``fleet``: the file's devices scored in lockstep of event time, each held to
its scope's fleet model pooled from the others as production pools it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleetwatch.evaluation.detections import run_starts
from fleetwatch.filemode.columns import FileColumns, FileModeError
from fleetwatch.filemode.fleet import FilePool
from fleetwatch.filemode.scoring import FileDetector, detect_frame
from tests.unit.recordings import recording

VALUES = ["temp", "hum"]
DEVICES = ("a", "b", "c", "d")
CHUNK = 50
START_MS = 1_767_225_600_000


def scored(frame: pd.DataFrame, fleet: bool) -> pd.DataFrame:
    return detect_frame(frame, "timestamp", "device_id", VALUES, CHUNK, fleet=fleet)


def same_rows(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    return bool(
        np.array_equal(a["anomaly_score"].to_numpy(), b["anomaly_score"].to_numpy())
        and a["alert"].tolist() == b["alert"].tolist()
        and a["reason"].tolist() == b["reason"].tolist()
    )


@pytest.fixture(scope="module")
def four() -> pd.DataFrame:
    """Four devices, a reading a minute each (interleaved by time), a spike on ``b``."""
    return recording(rows=1600, devices=DEVICES, spike=("b", 300))


@pytest.fixture(scope="module")
def four_in_fleet(four: pd.DataFrame) -> pd.DataFrame:
    return scored(four, fleet=True)


def test_rows_before_the_first_champion_score_as_alone_and_later_ones_do_not(
    four: pd.DataFrame, four_in_fleet: pd.DataFrame
) -> None:
    alone = scored(four, fleet=False)
    # a device's first chunk learns at its end; the chunk after it is scored with that version,
    # which the pool takes once that chunk has begun: the third chunk is the first to see it
    first_helped = 2 * CHUNK
    step = four.groupby("device_id").cumcount()
    before = (step < first_helped).to_numpy()
    assert same_rows(four_in_fleet[before], alone[before])
    after = ~before
    assert not same_rows(four_in_fleet[after], alone[after]), "the fleet changes later scores"


@pytest.mark.parametrize("cut", [401, 777, 1003, 1402])
def test_appending_later_rows_leaves_earlier_rows_identical(
    four: pd.DataFrame, four_in_fleet: pd.DataFrame, cut: int
) -> None:
    head = scored(four.iloc[:cut], fleet=True)
    assert same_rows(head, four_in_fleet.iloc[:cut])


def test_the_same_file_gives_the_same_output_whatever_its_row_order(
    four: pd.DataFrame, four_in_fleet: pd.DataFrame
) -> None:
    assert same_rows(scored(four, fleet=True), four_in_fleet)
    shuffled = four.sample(frac=1.0, random_state=5)
    assert same_rows(scored(shuffled, fleet=True).sort_index(), four_in_fleet)


def heavy_tailed_fleet(
    old: int = 4,
    rows: int = 1500,
    young_from: int = 700,
    metrics: tuple[str, ...] = ("temp", "hum"),
    df: float = 2.0,
) -> pd.DataFrame:
    """``old`` devices of Student-t (``df`` dof) noise on ``metrics`` from the start, a reading
    every 10 s, and a ``young`` one of the same noise from reading ``young_from``."""
    rng = np.random.default_rng(1)
    parts = []
    levels = {"temp": 20, "hum": 50}
    for d in range(old + 1):
        name = "young" if d == old else f"old{d}"
        steps = np.arange(young_from if name == "young" else 0, rows)
        noise = {m: np.round(levels[m] + 0.5 * rng.standard_t(df, steps.size), 4) for m in metrics}
        parts.append(
            pd.DataFrame({"timestamp": START_MS + steps * 10_000, "device_id": name, **noise})
        )
    frame = pd.concat(parts).sort_values("timestamp", kind="stable")
    return frame.reset_index(drop=True)


def test_a_young_device_of_a_fleet_that_knows_heavy_tailed_noise_alerts_less_than_alone() -> None:
    """Noise heavier than Student-t 2, whose far readings a young stream's own tail (the
    seasonal member's) does not yet expect; its fleet's pooled tails do."""
    frame = heavy_tailed_fleet(df=1.5)
    young = frame["device_id"] == "young"
    in_fleet = scored(frame, fleet=True).loc[young, "alert"].to_numpy(bool)
    alone = scored(frame.loc[young], fleet=False)["alert"].to_numpy(bool)
    alerts_alone = int(run_starts(alone).sum())
    alerts_in_fleet = int(run_starts(in_fleet).sum())
    assert alerts_alone >= 2, "alone, the young device alerts on its first far readings"
    assert alerts_in_fleet < alerts_alone
    assert in_fleet.mean() < alone.mean()


def test_a_fleet_of_single_metric_devices_lends_a_young_one_its_pooled_tails() -> None:
    """No joint model of one metric: the champion is the pooled tails alone."""
    frame = heavy_tailed_fleet(rows=2500, young_from=1200, metrics=("temp",))
    columns = FileColumns("timestamp", "device_id", ("temp",), "ms")
    detector = FileDetector(columns, CHUNK, fleet=True)
    in_fleet = detector.score_piece(frame.astype(str))
    assert detector.pool is not None
    champion = detector.pool.champion("temp")
    assert champion is not None
    assert champion.detector is None
    assert set(champion.tails["level"]) == {"temp"}
    young = (frame["device_id"] == "young").to_numpy()
    helped = in_fleet.loc[young, "alert"].to_numpy(bool)
    alone = detect_frame(frame.loc[young], "timestamp", "device_id", ["temp"], CHUNK)
    alerts_alone = int(run_starts(alone["alert"].to_numpy(bool)).sum())
    assert alerts_alone >= 2, "alone, the young device alerts on its first far readings"
    assert int(run_starts(helped).sum()) < alerts_alone


def test_pools_come_at_the_cadence_and_only_from_new_parameters() -> None:
    assert (FilePool().first_ms, FilePool().every_ms) == (120_000, 60_000)  # offline.py's
    pool = FilePool(first_ms=30_000, every_ms=10_000)
    pool.until(0, {})
    assert pool.due_ms == 30_000
    pool.until(29_999, {})
    assert pool.due_ms == 30_000
    pool.until(30_000 + 3 * 10_000 + 5, {})
    assert pool.due_ms == 30_000 + 4 * 10_000
    assert (pool.pools, pool.champions) == (0, {}), "no device has parameters: nothing to pool"


def test_the_fleet_champion_is_the_scope_of_the_devices_metrics(four: pd.DataFrame) -> None:
    columns = FileColumns("timestamp", "device_id", tuple(VALUES), "iso")
    detector = FileDetector(columns, CHUNK, fleet=True)
    detector.score_piece(four.astype(str))
    assert detector.pool is not None
    assert set(detector.pool.champions) == {"hum_temp"}
    assert detector.pool.pools > 1
    champion = detector.pool.champion("hum_temp")
    assert champion is not None
    assert set(champion.tails["level"]) == {"hum", "temp"}


def test_a_file_without_a_device_column_is_no_fleet() -> None:
    columns = FileColumns("timestamp", None, tuple(VALUES), "iso")
    with pytest.raises(FileModeError, match="no device column"):
        FileDetector(columns, fleet=True)


def test_a_fleet_of_one_device_is_pooled_from_itself(four: pd.DataFrame) -> None:
    one = four.loc[four["device_id"] == "a"]
    columns = FileColumns("timestamp", "device_id", tuple(VALUES), "iso")
    detector = FileDetector(columns, CHUNK, fleet=True)
    out = detector.score_piece(one.astype(str))
    assert len(out) == len(one)
    assert detector.pool is not None
    assert set(detector.pool.champions) == {"hum_temp"}
