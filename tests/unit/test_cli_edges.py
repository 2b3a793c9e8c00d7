"""The CLI at its edges: ``--version``, expected failures as one line (``--debug``: the
traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetwatch.cli import replay as replay_cli
from fleetwatch.cli import stack as stack_cli
from fleetwatch.cli.main import app
from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.stack.manager import ComponentStatus


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


def test_version_prints_the_installed_distributions_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"fleetwatch {metadata.version('fleetwatch')}"


class _BrokenStack:
    def __init__(self, settings: Any) -> None:
        pass

    def status(self) -> list[Any]:
        raise FleetwatchError("the stack's run directory is not readable")


@pytest.mark.parametrize(
    "error",
    [
        FleetwatchError("the stack's run directory is not readable"),
        ConnectionRefusedError(111, "Connection refused"),
    ],
)
def test_an_expected_failure_is_one_line_without_a_traceback(
    error: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    def status(self: Any) -> list[Any]:
        raise error

    monkeypatch.setattr(stack_cli, "Stack", type("Broken", (_BrokenStack,), {"status": status}))
    result = CliRunner().invoke(app, ["stack", "status"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("fleetwatch: ")
    assert "Traceback" not in result.output
    assert "--debug" in lines[0]


def test_debug_prints_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack_cli, "Stack", _BrokenStack)
    result = CliRunner().invoke(app, ["--debug", "stack", "status"])
    assert result.exit_code == 1
    assert "Traceback (most recent call last)" in result.output
    assert "FleetwatchError: the stack's run directory is not readable" in result.output
    assert result.output.strip().splitlines()[-1].startswith("fleetwatch: the stack's run")


def test_an_unexpected_error_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def status(self: Any) -> list[Any]:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(stack_cli, "Stack", type("Buggy", (_BrokenStack,), {"status": status}))
    result = CliRunner().invoke(app, ["stack", "status"])
    assert isinstance(result.exception, ZeroDivisionError)


def test_debug_shows_the_traceback_of_a_failure_a_command_reports_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Failing(_BrokenStack):
        def up(self, with_prometheus: bool = False) -> float:
            raise FleetwatchError("kafka did not become ready in 90 s")

    monkeypatch.setattr(stack_cli, "Stack", Failing)
    quiet = CliRunner().invoke(app, ["stack", "up"])
    assert quiet.exit_code == 1
    assert quiet.output.strip() == "fleetwatch: kafka did not become ready in 90 s"
    loud = CliRunner().invoke(app, ["--debug", "stack", "up"])
    assert loud.exit_code == 1
    assert "Traceback (most recent call last)" in loud.output


def test_devices_list_as_json(run_dir: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["devices", "add", "pump-7"]).exit_code == 0
    assert runner.invoke(app, ["devices", "add", "pump-8"]).exit_code == 0
    result = runner.invoke(app, ["devices", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == ["pump-7", "pump-8"]


def test_stack_status_as_json_keeps_its_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    class HalfUp(_BrokenStack):
        def status(self) -> list[ComponentStatus]:
            return [
                ComponentStatus("kafka", 4242, "127.0.0.1:9092", "/run/kafka.log"),
                ComponentStatus("mosquitto", None, "127.0.0.1:1883", "/run/mosquitto.log"),
            ]

    monkeypatch.setattr(stack_cli, "Stack", HalfUp)
    result = CliRunner().invoke(app, ["stack", "status", "--json"])
    assert result.exit_code == 3
    body = json.loads(result.stdout)
    assert [(c["name"], c["pid"], c["running"]) for c in body] == [
        ("kafka", 4242, True),
        ("mosquitto", None, False),
    ]


def test_replay_diff_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    events = {
        "alerts.a": [{"event_id": "e1", "score": 0.9}, {"event_id": "e2", "score": 0.5}],
        "alerts.b": [{"event_id": "e1", "score": 0.9}, {"event_id": "e3", "score": 0.7}],
    }
    monkeypatch.setattr(replay_cli, "read_events", lambda kafka, topic: events[topic])
    result = CliRunner().invoke(app, ["replay", "diff", "alerts.a", "alerts.b", "--json"])
    assert result.exit_code == 1  # they differ
    body = json.loads(result.stdout)
    assert body["identical"] is False
    assert (body["same"], body["only_a"], body["only_b"]) == (1, ["e2"], ["e3"])


def test_the_cli_loads_a_subcommands_machinery_only_when_it_runs() -> None:
    """Starting ``fleetwatch`` (a gateway worker, ``devices add``) imports neither the data
    libraries nor the detectors nor Spark; ``detect`` does, when it runs."""
    probe = (
        "import sys; import fleetwatch.cli.main as m; "
        "heavy = {'pandas', 'scipy', 'pyspark', 'fleetwatch.models.base'}; "
        "print(sorted(heavy & set(sys.modules))); "
        "m.load_subcommand('detect'); print(sorted(heavy & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    at_start, after_detect = done.stdout.splitlines()
    assert at_start == "[]"
    assert "fleetwatch.models.base" in after_detect
    assert "pandas" in after_detect


def test_every_subcommand_loads_under_its_own_name() -> None:
    from fleetwatch.cli.main import SUBCOMMANDS, load_subcommand

    for name in SUBCOMMANDS:
        assert load_subcommand(name).name == name
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    assert all(name in result.output for name in SUBCOMMANDS)
