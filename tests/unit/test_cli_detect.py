"""`fleetwatch detect` end to end on CSV files in a temporary directory."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner, Result

from fleetwatch.cli import detect as detect_cli
from fleetwatch.cli.main import app
from fleetwatch.filemode.scoring import OUTPUT_COLUMNS, detect_frame
from tests.unit.recordings import recording

Invoke = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(detect_cli.console, "width", 200)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["detect", *[str(a) for a in args]])


def test_detect_scores_every_row_and_reports(run: Invoke, tmp_path: Path) -> None:
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    frame = recording(rows=3000, devices=("a", "b", "c"), spike=("b", 800))
    frame.to_csv(source, index=False)
    result = run(source, "--out", out)
    assert result.exit_code == 0, result.output
    scored = pd.read_csv(out, keep_default_na=False)
    assert list(scored.columns) == [*frame.columns, *OUTPUT_COLUMNS]
    assert len(scored) == len(frame)
    assert scored["device_id"].tolist() == frame["device_id"].tolist()
    assert scored.loc[frame.index[frame["device_id"] == "b"][800], "alert"]
    for text in ("timestamp (iso)", "device_id", "temp, hum", "3,000", "rows/s"):
        assert text in result.output
    alerts = int(scored["alert"].sum())
    assert re.search(rf"alerts +│ {alerts:,} \(", result.output)


def test_the_input_text_is_written_back_unchanged(run: Invoke, tmp_path: Path) -> None:
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    source.write_text(
        "ts,value,label\n1767225600,1.10,x\n1767225660,n/a,y\n1767225720,0007,\nbad,2,z\n"
    )
    result = run(source, "--out", out)
    assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert lines[0] == "ts,value,label,anomaly_score,alert,alert_metric,reason"
    assert lines[1].startswith("1767225600,1.10,x,")
    assert lines[3].startswith("1767225720,0007,,")
    assert lines[4].endswith("timestamp 'bad' could not be read")
    assert "unreadable timestamps" in result.output
    assert "ts (s)" in result.output


def test_pieces_keep_each_devices_detector(run: Invoke, tmp_path: Path) -> None:
    """Pieces of 1,500 rows hold 500 rows per device, ten whole chunks of 50: the same
    chunks as one frame, so the same scores."""
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    frame = recording(rows=4500, devices=("a", "b", "c"), spike=("c", 1200))
    frame.to_csv(source, index=False)
    result = run(source, "--out", out, "--piece-rows", 1500)
    assert result.exit_code == 0, result.output
    scored = pd.read_csv(out, keep_default_na=False)
    whole = detect_frame(frame, "timestamp", "device_id", ["temp", "hum"])
    np.testing.assert_allclose(scored["anomaly_score"], whole["anomaly_score"], atol=1e-6)
    assert scored["alert"].tolist() == whole["alert"].tolist()


def test_named_columns(run: Invoke, tmp_path: Path) -> None:
    source, out = tmp_path / "in.csv", tmp_path / "out.csv"
    frame = recording(rows=400, devices=("a", "b"))
    frame.rename(columns={"timestamp": "when", "device_id": "unit"}).to_csv(source, index=False)
    result = run(source, "--out", out, "--timestamp", "when", "--device", "unit", "--values", "hum")
    assert result.exit_code == 0, result.output
    assert "unit" in result.output
    assert "│ hum " in result.output


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, (), "no such file"),
        ("timestamp,v\n2026-01-01T00:00:00,1\n", ("--values", "w"), "unknown value column 'w'"),
        ("timestamp,v\n2026-01-01T00:00:00,x\n", (), "no numeric value columns"),
        ("label,v\nx,1\n", (), "no timestamp column"),
        ("timestamp,v\n", (), "has a header but no rows"),
        ("", (), "cannot read"),
    ],
)
def test_errors_are_one_line(
    run: Invoke, tmp_path: Path, content: str | None, args: tuple[str, ...], message: str
) -> None:
    source = tmp_path / "in.csv"
    if content is not None:
        source.write_text(content)
    result = run(source, "--out", tmp_path / "out.csv", *args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_chosen_combination_of_detectors(run: Invoke, tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    frame = recording(rows=3000, devices=("a",), spike=("a", 800))
    frame.to_csv(source, index=False)
    chosen, default = tmp_path / "chosen.csv", tmp_path / "default.csv"
    assert run(source, "--out", default).exit_code == 0
    result = run(source, "--out", chosen, "--detectors", "flatline")
    assert result.exit_code == 0, result.output
    only_flat = pd.read_csv(chosen, keep_default_na=False)
    with_all = pd.read_csv(default, keep_default_na=False)
    assert with_all.loc[800, "alert"], "the default detector flags the spike"
    assert not only_flat["alert"].any(), "a flat-line detector alone does not"
    bad = run(source, "--out", chosen, "--detectors", "seasonal,nope")
    assert bad.exit_code == 1
    assert "unknown detector kind 'nope'" in bad.output
    assert "Traceback" not in bad.output


def test_the_false_alert_budget_is_a_setting(
    run: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``score.false_alerts_per_device_day``: a looser budget alerts more on the same heavy-tailed
    noise; a budget that is not positive is refused, naming the setting."""
    source = tmp_path / "in.csv"
    rng = np.random.default_rng(11)
    n = 6000
    times = pd.Timestamp("2026-01-05T00:00:00Z") + pd.to_timedelta(np.arange(n) * 10, unit="s")
    frame = pd.DataFrame({"timestamp": times.strftime("%Y-%m-%dT%H:%M:%SZ"), "value": 0.0})
    frame["value"] = 20.0 + rng.standard_t(3, n)
    frame.to_csv(source, index=False)
    counts = {}
    for budget in ("1", "500"):
        monkeypatch.setenv("FLEETWATCH_SCORE__FALSE_ALERTS_PER_DEVICE_DAY", budget)
        out = tmp_path / f"out-{budget}.csv"
        result = run(source, "--out", out)
        assert result.exit_code == 0, result.output
        counts[budget] = int(pd.read_csv(out)["alert"].sum())
    assert counts["500"] > counts["1"], counts
    monkeypatch.setenv("FLEETWATCH_SCORE__FALSE_ALERTS_PER_DEVICE_DAY", "0")
    refused = run(source, "--out", tmp_path / "out-0.csv")
    assert refused.exit_code != 0
    assert "false_alerts_per_device_day" in refused.output


def test_fleet_scores_the_devices_as_one_fleet(
    run: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--fleet``: the scores of ``detect_frame(fleet=True)``, the pools counted in the
    summary; ``score.fleet_model=off`` gives each device's scores alone."""
    source = tmp_path / "in.csv"
    frame = recording(rows=1200, devices=("a", "b", "c"))
    frame.to_csv(source, index=False)
    fleet_out, alone_out = tmp_path / "fleet.csv", tmp_path / "alone.csv"
    result = run(source, "--out", fleet_out, "--fleet", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["fleet_pools"] > 0
    expected = detect_frame(frame, "timestamp", "device_id", ["temp", "hum"], fleet=True)
    got = pd.read_csv(fleet_out, keep_default_na=False)
    np.testing.assert_allclose(got["anomaly_score"], expected["anomaly_score"], atol=1e-6)
    assert got["alert"].tolist() == expected["alert"].tolist()
    alone = run(source, "--out", alone_out, "--json")
    assert alone.exit_code == 0, alone.output
    assert "fleet_pools" not in json.loads(alone.stdout.strip().splitlines()[-1])
    assert fleet_out.read_bytes() != alone_out.read_bytes()
    monkeypatch.setenv("FLEETWATCH_SCORE__FLEET_MODEL", "off")
    off_out = tmp_path / "off.csv"
    assert run(source, "--out", off_out, "--fleet").exit_code == 0
    assert off_out.read_bytes() == alone_out.read_bytes()


def test_fleet_needs_a_device_column(run: Invoke, tmp_path: Path) -> None:
    source = tmp_path / "in.csv"
    recording(rows=200).to_csv(source, index=False)
    result = run(source, "--out", tmp_path / "out.csv", "--fleet")
    assert result.exit_code == 1
    assert "--fleet pools the file's devices" in result.output
    assert "--device" in result.output
    assert "Traceback" not in result.output
