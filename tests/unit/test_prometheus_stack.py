"""`fleetwatch stack up --with-prometheus`: the config and file_sd targets rendered from the
settings (checked by Debian's promtool when it is installed), and how the stack lists it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetwatch.contracts.settings import (
    ApiSettings,
    GatewaySettings,
    KafkaSettings,
    PrometheusSettings,
    Settings,
    TrainSettings,
)
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.prometheus import STAGE_JOBS, PrometheusServer, default_targets


def settings(tmp_path: Path, **parts: object) -> Settings:
    return Settings(run_dir=tmp_path, **parts)  # type: ignore[arg-type]


def test_the_config_scrapes_itself_the_broker_and_the_stages_through_files(
    tmp_path: Path,
) -> None:
    server = PrometheusServer(
        settings(tmp_path, prometheus=PrometheusSettings(port=19090, scrape_interval_s=3))
    )
    config = server.render_config()
    assert "scrape_interval: 3s" in config
    assert '- targets: ["127.0.0.1:19090"]' in config
    assert '- targets: ["127.0.0.1:9404"]' in config
    for job in STAGE_JOBS:
        assert f"  - job_name: {job}\n" in config
        assert json.dumps(str(server.targets_file(job))) in config


def test_the_broker_job_is_left_out_when_its_metrics_are_off(tmp_path: Path) -> None:
    config = PrometheusServer(settings(tmp_path, kafka=KafkaSettings(metrics_port=0)))
    assert "job_name: kafka" not in config.render_config()


def test_default_targets_follow_the_settings_and_skip_ports_turned_off(tmp_path: Path) -> None:
    s = settings(
        tmp_path,
        gateway=GatewaySettings(metrics_port=19101),
        train=TrainSettings(metrics_port=0),
        api=ApiSettings(host="0.0.0.0", port=18000),
    )
    assert default_targets(s) == {
        "gateway": ["127.0.0.1:19101"],
        "scorer": ["127.0.0.1:9102"],
        "trainer": [],
        "api": ["127.0.0.1:18000"],
    }


def test_targets_files_are_file_sd_groups_replaced_whole(tmp_path: Path) -> None:
    server = PrometheusServer(settings(tmp_path))
    server.write_targets({"gateway": ["127.0.0.1:1"], "trainer": []})
    assert json.loads(server.targets_file("gateway").read_text()) == [
        {"targets": ["127.0.0.1:1"], "labels": {}}
    ]
    assert json.loads(server.targets_file("trainer").read_text()) == []
    assert not list(server.targets_dir.glob("*.partial"))
    with pytest.raises(ValueError, match="no scrape job 'kafka'"):
        server.write_targets({"kafka": ["127.0.0.1:2"]})


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus)")
def test_promtool_accepts_the_config(tmp_path: Path) -> None:
    server = PrometheusServer(settings(tmp_path))
    server.write_targets(default_targets(server.settings))
    server.config_file.parent.mkdir(parents=True, exist_ok=True)
    server.config_file.write_text(server.render_config())
    checked = subprocess.run(
        ["promtool", "check", "config", str(server.config_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_status_lists_prometheus_only_once_up_started_it(tmp_path: Path) -> None:
    stack = Stack(settings(tmp_path))
    assert [c.name for c in stack.status()] == ["kafka", "mosquitto"]
    pid_file = stack.prometheus.proc.pid_file
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text(json.dumps({"pid": 1, "argv": ["not-prometheus"]}))  # died, pid reused
    listed = {c.name: c for c in stack.status()}
    assert listed["prometheus"].pid is None, "shown stopped"
    assert listed["prometheus"].address == "http://127.0.0.1:9090"
    assert "prometheus" in [p.name for p in stack.processes]


def test_the_retention_must_be_a_duration() -> None:
    with pytest.raises(ValueError, match=r"prometheus\.retention"):
        PrometheusSettings(retention="two days")
