import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetwatch.cli.main import app
from fleetwatch.simulator.evaluate import AlertEvent, TruthEvent, matches

TRUTH = [
    {
        "class": "anomaly",
        "device_id": "d1",
        "kind": "spike",
        "metrics": ["temperature"],
        "start_ms": 1_000,
        "end_ms": 1_000,
    },
    {
        "class": "anomaly",
        "device_id": "d1",
        "kind": "drift",
        "metrics": ["temperature"],
        "start_ms": 10_000,
        "end_ms": 20_000,
    },
    {
        "class": "anomaly",
        "device_id": "d2",
        "kind": "level_shift",
        "metrics": ["humidity"],
        "start_ms": 5_000,
        "end_ms": 8_000,
    },
    {
        "class": "anomaly",
        "device_id": "d3",
        "kind": "dropout",
        "metrics": ["temperature", "humidity"],
        "start_ms": 50_000,
        "end_ms": 60_000,
    },
    {
        "class": "misbehaviour",
        "device_id": "d2",
        "kind": "duplicate",
        "start_ms": 6_000,
        "end_ms": 6_000,
        "params": {"seq": 6},
    },
]


def alert(
    n: int, device: str, metric: str, event_ms: int, status: str = "open"
) -> dict[str, object]:
    return {
        "alert_id": f"a{n}",
        "device_id": device,
        "metric": metric,
        "event_ms": event_ms,
        "status": status,
    }


ALERTS = [
    alert(1, "d1", "temperature", 1_000),  # spike, delay 0 s
    alert(2, "d1", "temperature", 2_500),  # spike again, inside end + 2 s tolerance: true
    alert(3, "d1", "temperature", 14_000),  # drift, delay 4 s
    alert(4, "d2", "temperature", 6_000),  # d2's anomaly is on humidity: false
    alert(5, "d2", "humidity", 7_000),  # level shift, delay 2 s
    alert(6, "d3", "temperature", 70_000),  # after the dropout + tolerance: false
    alert(7, "d1", "temperature", 14_500, "resolve"),  # not an opening: ignored
    alert(3, "d1", "temperature", 14_000),  # redelivered: counted once
]


def test_eval_scores_a_hand_made_pair(tmp_path: Path) -> None:
    truth, alerts = tmp_path / "truth.jsonl", tmp_path / "alerts.jsonl"
    truth.write_text("".join(json.dumps(r) + "\n" for r in TRUTH))
    alerts.write_text("".join(json.dumps(r) + "\n" for r in ALERTS))
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "eval",
            str(truth),
            "--alerts",
            str(alerts),
            "--tolerance",
            "2",
            "--device-days",
            "2",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # 6 opening alerts, 4 true (a1 a2 a3 a5), 2 false; 3 of 4 anomalies detected
    assert report["precision"] == pytest.approx(4 / 6)
    assert report["recall"] == pytest.approx(3 / 4)
    assert report["f1"] == pytest.approx(2 * (4 / 6) * 0.75 / (4 / 6 + 0.75))
    # delays 0, 4, 2 s: median 2; p95 interpolates between 2 and 4
    assert report["delay_p50_s"] == pytest.approx(2.0)
    assert report["delay_p95_s"] == pytest.approx(3.8)
    assert report["false_alerts_per_device_day"] == pytest.approx(1.0)
    spike = report["by_kind"]["spike"]
    assert (spike["precision"], spike["recall"]) == (pytest.approx(2 / 4), 1.0)
    dropout = report["by_kind"]["dropout"]
    assert (dropout["recall"], dropout["f1"], dropout["delay_p50_s"]) == (0.0, 0.0, None)
    assert set(report["by_kind"]) == {"spike", "drift", "level_shift", "dropout"}


def test_eval_reads_device_days_from_the_run_sidecar(tmp_path: Path) -> None:
    truth, alerts = tmp_path / "truth.jsonl", tmp_path / "alerts.jsonl"
    truth.write_text(json.dumps(TRUTH[0]) + "\n")
    alerts.write_text(json.dumps(alert(9, "d9", "temperature", 5)) + "\n")
    day = 24 * 3600 * 1000
    sidecar = {"scenario": {"devices": 4}, "start_ms": 0, "end_ms": day // 2}
    (tmp_path / "truth.jsonl.run.json").write_text(json.dumps(sidecar))
    result = CliRunner().invoke(app, ["sim", "eval", str(truth), "--alerts", str(alerts), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["false_alerts_per_device_day"] == pytest.approx(0.5)
    assert (report["precision"], report["recall"]) == (0.0, 0.0)


def test_a_device_wide_alert_matches_an_anomaly_of_any_of_its_metrics() -> None:
    gap = TruthEvent("d3", "dropout", ("temperature", "humidity"), 40_000, 55_000)
    shift = TruthEvent("d3", "level_shift", ("humidity",), 80_000, 90_000)
    after_gap = AlertEvent("d3", "*", 56_000)  # the first reading after the gap carries it
    assert matches(after_gap, gap, 2_000)
    assert not matches(after_gap, shift, 2_000)  # outside the shift's time
    assert not matches(AlertEvent("d3", "temperature", 85_000), shift, 2_000)
    assert matches(AlertEvent("d3", "*", 85_000), shift, 2_000)


def test_sim_record_reports_as_one_json_document(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    args = ["sim", "record", str(out), "--devices", "3", "--count", "5", "--seed", "2", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # the human line goes to stderr
    assert report["recording"] == str(out)
    assert report["messages"] == 15
    written = out.read_text().splitlines()
    assert len(written) > report["messages"]  # a header and truth records beside the messages
