"""File mode: causal chunked scoring of a recorded frame with the default detector."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleetwatch.filemode.columns import (
    FileColumns,
    FileModeError,
    choose_columns,
    parse_times,
    time_kind,
)
from fleetwatch.filemode.scoring import NO_VALUES, OUTPUT_COLUMNS, FileDetector, detect_frame
from tests.unit.recordings import START_S, recording

VALUES = ["temp", "hum"]


def one_device(frame: pd.DataFrame, chunk_rows: int = 50) -> pd.DataFrame:
    return detect_frame(frame, "timestamp", None, VALUES, chunk_rows)


def fleet(frame: pd.DataFrame, chunk_rows: int = 50) -> pd.DataFrame:
    return detect_frame(frame, "timestamp", "device_id", VALUES, chunk_rows)


def assert_same_scores(a: pd.DataFrame, b: pd.DataFrame) -> None:
    np.testing.assert_array_equal(a["anomaly_score"].to_numpy(), b["anomaly_score"].to_numpy())
    assert a["alert"].tolist() == b["alert"].tolist()
    assert a["reason"].tolist() == b["reason"].tolist()


def test_a_spike_and_a_level_shift_are_flagged_and_stationary_noise_is_not() -> None:
    scored = one_device(recording(spike=("", 1500), shift_from=("", 1700)))
    assert ((scored["anomaly_score"] >= 0) & (scored["anomaly_score"] <= 1)).all()
    assert scored["alert"].iloc[1498:1503].any(), "the spike at row 1500 is flagged within 2 rows"
    assert scored.loc[1500, "alert_metric"] == "temp"
    assert scored["alert"].iloc[1700:1730].any(), "the shift is flagged within 30 rows"
    assert (scored.loc[scored["alert"].iloc[1700:1730].idxmax(), "alert_metric"]) == "hum"
    # bound: after a 300-row warm-up, at most 1% of stationary rows alert
    assert scored["alert"].iloc[300:1495].mean() <= 0.01
    quiet = scored.loc[~scored["alert"]]
    assert (quiet["reason"] == "").all()
    assert (quiet["alert_metric"] == "").all()


@pytest.mark.parametrize("chunk_rows", [1, 7, 50])
def test_appending_later_rows_leaves_earlier_scores_identical(chunk_rows: int) -> None:
    frame = recording(rows=1200, spike=("", 900), shift_from=("", 1000))
    full = one_device(frame, chunk_rows)
    for cut in (401, 777, 901, 1003):
        head = one_device(frame.iloc[:cut], chunk_rows)
        assert_same_scores(head, full.iloc[:cut])


def test_a_row_is_never_scored_with_what_was_learned_from_itself() -> None:
    frame = recording(rows=200)
    scored = one_device(frame, chunk_rows=200)  # one chunk: nothing learned before it
    assert (scored["anomaly_score"] == 0).all()
    assert not scored["alert"].any()


def test_rows_keep_their_order_and_columns_and_are_scored_in_time_order() -> None:
    frame = recording(rows=1500, devices=("a", "b", "c"), spike=("b", 400))
    frame["note"] = [f"n{i}" for i in range(len(frame))]
    in_order = fleet(frame)
    shuffled = frame.sample(frac=1.0, random_state=3)
    scored = fleet(shuffled)
    assert list(scored.columns) == [*frame.columns, *OUTPUT_COLUMNS]
    assert scored.index.tolist() == shuffled.index.tolist()
    pd.testing.assert_frame_equal(scored[frame.columns], shuffled)
    assert_same_scores(scored.sort_index(), in_order)


def test_devices_are_scored_independently() -> None:
    frame = recording(rows=3000, devices=("a", "b", "c"), spike=("b", 800))
    scored = fleet(frame)
    alerts = scored.loc[scored["alert"]]
    assert "b" in set(alerts["device_id"])
    spike_row = frame.index[frame["device_id"] == "b"][800]
    assert scored.loc[spike_row, "alert"]
    only_a = frame.loc[frame["device_id"] == "a"]
    assert_same_scores(fleet(only_a), scored.loc[only_a.index])


def test_bad_values_and_timestamps_keep_their_rows() -> None:
    frame = recording(rows=600).astype(object)
    frame.loc[400, "temp"] = "n/a"
    frame.loc[401, "hum"] = None
    frame.loc[402, ["temp", "hum"]] = ["", "inf"]
    frame.loc[403, "timestamp"] = "garbage"
    scored = one_device(frame)
    assert len(scored) == len(frame)
    score = scored["anomaly_score"].to_numpy(dtype=np.float64)
    assert score[400] >= 0
    assert score[401] >= 0
    assert np.isnan(score[402])
    assert scored.loc[402, "reason"] == NO_VALUES
    assert np.isnan(score[403])
    assert scored.loc[403, "reason"] == "timestamp 'garbage' could not be read"
    assert not scored.loc[400:403, "alert"].any()


def test_counts_of_unscored_rows() -> None:
    frame = recording(rows=100).astype(str)
    frame.loc[5, "timestamp"] = "not a time"
    frame.loc[6, ["temp", "hum"]] = ["x", "y"]
    columns = FileColumns("timestamp", None, ("temp", "hum"), "iso")
    detector = FileDetector(columns)
    detector.score_piece(frame)
    assert (detector.bad_times, detector.no_values) == (1, 1)


def test_epoch_seconds_milliseconds_and_iso_give_the_same_scores() -> None:
    frame = recording(rows=800, spike=("", 600))
    seconds = START_S + 60 * np.arange(len(frame))
    iso = one_device(frame)
    for epoch in (seconds, seconds * 1000):
        assert_same_scores(one_device(frame.assign(timestamp=epoch)), iso)


def test_times_with_an_offset_are_converted_and_naive_times_are_utc() -> None:
    cells = pd.Series(["2026-01-01T00:00:00", "2026-01-01T01:00:00+01:00", "2026-01-01 00:00Z"])
    assert time_kind(cells) == "iso"
    assert parse_times(cells, "iso").tolist() == [START_S * 1000.0] * 3
    assert time_kind(pd.Series(["1767225600", "1767225660"])) == "s"
    assert time_kind(pd.Series(["1767225600000"])) == "ms"


def test_output_columns_already_in_the_file_are_refused() -> None:
    frame = recording(rows=10).assign(alert="x")
    with pytest.raises(FileModeError, match="already has output column"):
        one_device(frame)


def test_choose_columns_by_name_and_by_content() -> None:
    frame = recording(rows=50, devices=("a", "b")).astype(str)
    chosen = choose_columns(frame)
    assert chosen == FileColumns("timestamp", "device_id", ("temp", "hum"), "iso")
    renamed = frame.rename(columns={"timestamp": "when", "device_id": "unit"})
    found = choose_columns(renamed)
    assert (found.timestamp, found.device, found.values) == ("when", None, ("temp", "hum"))
    named = choose_columns(renamed, timestamp="when", device="unit", values=["hum"])
    assert (named.device, named.values) == ("unit", ("hum",))


def test_choose_columns_errors() -> None:
    frame = recording(rows=20).astype(str)
    with pytest.raises(FileModeError, match="unknown value column 'nope'"):
        choose_columns(frame, values=["nope"])
    with pytest.raises(FileModeError, match="no numeric value columns"):
        choose_columns(frame.assign(temp="warm", hum="damp"))
    with pytest.raises(FileModeError, match="no timestamp column"):
        choose_columns(frame.rename(columns={"timestamp": "label"}).assign(label="x"))
    with pytest.raises(FileModeError, match="both a value and a key"):
        choose_columns(frame, values=["timestamp"])
