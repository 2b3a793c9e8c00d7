"""Progress bars: on a terminal only; how far a Spark query is, from its progress reports;
`detect --json`."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from fleetwatch.cli import detect as detect_cli
from fleetwatch.cli import progress
from fleetwatch.cli.main import app
from tests.polling import wait_until
from tests.unit.recordings import recording


def _report(raw: dict[str, int], params: dict[str, int], rows: int) -> dict[str, Any]:
    return {
        "numInputRows": rows,
        "sources": [
            {
                "description": "KafkaV2[Subscribe[model.params]]",
                "endOffset": {"model.params": params},
            },
            {
                "description": "KafkaV2[Subscribe[telemetry.raw]]",
                "endOffset": {"telemetry.raw": raw},
            },
        ],
    }


def test_offsets_read_follow_the_named_topic() -> None:
    assert progress.offsets_read(_report({"0": 120, "1": 80}, {"0": 5}, 0), "telemetry.raw") == 200
    as_text = {"sources": [{"endOffset": json.dumps({"telemetry.raw": {"0": 7}})}]}
    assert progress.offsets_read(as_text, "telemetry.raw") == 7
    files = {"sources": [{"description": "FileStreamSource", "endOffset": {"logOffset": 3}}]}
    assert progress.offsets_read(files, "telemetry.raw") is None


def test_a_bar_moves_by_offsets_or_else_by_rows() -> None:
    seen: list[int] = []
    handle = progress.reports_to(seen.append, "telemetry.raw")
    handle(_report({"0": 10}, {"0": 1}, 10))
    handle(_report({"0": 30}, {"0": 1}, 20))
    assert seen == [10, 30]
    by_rows: list[int] = []
    handle = progress.reports_to(by_rows.append, "telemetry.raw")
    handle({"numInputRows": 100, "sources": [{"endOffset": {"logOffset": 0}}]})
    handle({"numInputRows": 50, "sources": [{"endOffset": {"logOffset": 1}}]})
    assert by_rows == [100, 150]


def test_the_follower_reads_reports_appended_after_it_started(tmp_path: Path) -> None:
    log = tmp_path / "progress.jsonl"
    log.write_text(json.dumps({"batchId": 0}) + "\n")  # an earlier run's
    seen: list[dict[str, Any]] = []
    follower = progress.ReportFollower(log, seen.append)
    follower.start()
    try:
        with log.open("a") as f:
            f.write(json.dumps({"batchId": 1}) + "\n")
            f.flush()
        wait_until(lambda: len(seen) == 1, 5, "the report appended")
        with log.open("a") as f:
            f.write(json.dumps({"batchId": 2}) + "\n")
    finally:
        follower.stop()
    assert [r["batchId"] for r in seen] == [1, 2]


def test_no_bar_off_a_terminal() -> None:
    assert not progress.attached()  # the test's stderr is captured
    with progress.bar("nothing", 10) as update:
        update(5)


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path / "run"))
    return tmp_path


def test_detect_shows_a_bar_on_a_terminal(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(progress, "_err", Console(file=screen, force_terminal=True, width=120))
    seen: list[int] = []
    real_bar = progress.bar

    def watched(description: str, total: int | None) -> Any:
        seen.append(total or -1)
        return real_bar(description, total)

    monkeypatch.setattr(progress, "bar", watched)
    source, out = run_dir / "in.csv", run_dir / "out.csv"
    frame = recording(rows=3000, devices=("a", "b"))
    frame.to_csv(source, index=False)
    result = CliRunner().invoke(app, ["detect", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert seen == [len(frame)]
    assert "detect in.csv" in screen.getvalue()


def test_detect_as_json(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect_cli.console, "width", 200)
    source, out = run_dir / "in.csv", run_dir / "out.csv"
    frame = recording(rows=2000, devices=("a", "b", "c"))
    frame.to_csv(source, index=False)
    result = CliRunner().invoke(app, ["detect", str(source), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows"] == len(frame)
    assert summary["devices"] == 3
    assert summary["out"] == str(out)
    assert summary["columns"]["device"] == "device_id"


def test_data_rows_counts_the_lines_after_the_header(tmp_path: Path) -> None:
    with_end = tmp_path / "a.csv"
    with_end.write_text("t,v\n1,2\n3,4\n")
    without_end = tmp_path / "b.csv"
    without_end.write_text("t,v\n1,2\n3,4")
    assert detect_cli._data_rows(with_end) == 2
    assert detect_cli._data_rows(without_end) == 2
