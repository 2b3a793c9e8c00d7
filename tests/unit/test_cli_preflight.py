"""`score`, `train`, `replay` and `api` check that Kafka (and the API's database) answer before
they start Spark or uvicorn, and otherwise stop at once in one line naming what is missing."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetwatch.cli import api as api_cli
from fleetwatch.cli import preflight
from fleetwatch.cli import replay as replay_cli
from fleetwatch.cli.main import app
from fleetwatch.streaming.scorer import job as scoring
from fleetwatch.streaming.trainer import job as training


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("started although a preflight check should have failed")


@pytest.fixture
def nothing_listens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Kafka's bootstrap servers where nothing listens; Spark and uvicorn must not start."""
    servers = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS", servers)
    monkeypatch.setattr(preflight, "TIMEOUT_S", 1.0)
    monkeypatch.setattr(scoring, "run", _never)
    monkeypatch.setattr(training, "run", _never)
    monkeypatch.setattr(replay_cli, "build_session", _never)
    monkeypatch.setattr(api_cli, "serve_api", _never)
    return servers


@pytest.mark.parametrize(
    "args",
    [
        ["score"],
        ["train"],
        ["train", "--from", "2025-01-01T00:00:00Z", "--to", "2025-01-02T00:00:00Z"],
        ["replay", "--output-topic", "alerts.replayed"],
        ["api"],
    ],
)
def test_a_stage_stops_at_once_when_kafka_does_not_answer(
    args: list[str], nothing_listens: str
) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    took = time.monotonic() - started
    assert result.exit_code == 1, result.output
    assert result.output.strip() == (
        f"fleetwatch: cannot reach Kafka at {nothing_listens} within 1 s: "
        "Failed to get metadata: Local: Broker transport failure"
    )
    assert took < 5


def test_the_default_wait_is_short(nothing_listens: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preflight, "TIMEOUT_S", 5.0)
    started = time.monotonic()
    result = CliRunner().invoke(app, ["score"])
    assert result.exit_code == 1
    assert time.monotonic() - started < 8


def test_the_api_stops_when_its_database_does_not_answer(
    nothing_listens: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_cli, "require_kafka", lambda kafka: None)
    url = f"postgresql+psycopg://fleetwatch:secret@127.0.0.1:{free_port()}/fleetwatch"
    monkeypatch.setenv("FLEETWATCH_API__DATABASE_URL", url)
    result = CliRunner().invoke(app, ["api"])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("fleetwatch: cannot reach the API database postgresql+psycopg://")
    assert "secret" not in lines[0]
    assert "Connection refused" in lines[0]
