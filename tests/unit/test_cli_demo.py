"""`fleetwatch demo` when a stage dies: it stops everything, names the stage and exits 1.

The stack and the alert consumer are stand-ins (the demo's own loop is what is tested); the
stages are real child processes, one of which fails the way a stage does."""

from __future__ import annotations

import stat
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from fleetwatch.cli import demo as demo_cli
from fleetwatch.cli.main import app
from fleetwatch.contracts.settings import Settings
from fleetwatch.stack.credentials import Credentials
from fleetwatch.stack.processes import ManagedProcess


class QuietStack:
    downs = 0
    reloads = 0

    def __init__(self, settings: Any) -> None:
        self.prometheus = SimpleNamespace(
            proc=SimpleNamespace(running=lambda: False), url="http://127.0.0.1:9090"
        )

    def status(self) -> list[Any]:
        return [SimpleNamespace(pid=None)]  # not up before the demo: the demo brings it down

    def up(self, with_prometheus: bool = False) -> float:
        assert with_prometheus, "the demo runs Prometheus too"
        return 0.0

    def down(self) -> None:
        QuietStack.downs += 1

    def reload_credentials(self) -> bool:
        QuietStack.reloads += 1
        return True


class NoAlerts:
    def __init__(self, config: dict[str, Any]) -> None:
        pass

    def subscribe(self, topics: list[str]) -> None:
        pass

    def poll(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        pass


def stages(failing: str | None, seen: dict[str, list[str]] | None = None) -> Any:
    def argv(*args: str) -> list[str]:
        if seen is not None:
            seen[args[0]] = list(args)
        if args[0] == failing:
            code = "import sys; print('KafkaException: broken'); sys.exit(3)"
        else:
            code = "import signal; signal.pause()"  # runs until the demo stops it
        return [sys.executable, "-c", code, *args]

    return argv


@pytest.fixture
def demo_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(demo_cli, "Stack", QuietStack)
    monkeypatch.setattr(demo_cli, "Consumer", NoAlerts)
    QuietStack.downs = 0
    QuietStack.reloads = 0
    return tmp_path / "run"


@pytest.mark.parametrize("failing", ["score", "sim"])
def test_a_stage_that_dies_fails_the_demo_and_is_named(
    demo_env: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    monkeypatch.setattr(demo_cli, "_stage_argv", stages(failing))
    threads = set(threading.enumerate())
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 1, result.output
    assert f"{failing} exited (KafkaException: broken)" in result.output
    assert "everything it started is down" in result.output
    assert QuietStack.downs == 1
    names = ["demo-gateway", "demo-score", "demo-api", "demo-sim"]
    assert not any(ManagedProcess(n, demo_env).running() for n in names)
    # its fleet-model thread ended with it rather than polling the parameter table on
    assert set(threading.enumerate()) <= threads


def test_the_demo_fleet_logs_in_with_credentials_issued_to_each_device(
    demo_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, list[str]] = {}
    monkeypatch.setattr(demo_cli, "_stage_argv", stages("sim", seen))
    CliRunner().invoke(app, ["demo", "--devices", "3"])
    sim = seen["sim"]
    issued = Path(sim[sim.index("--credentials") + 1])
    lines = [line.split(":", 1) for line in issued.read_text().splitlines()]
    assert [user for user, _ in lines] == ["sensor-0000", "sensor-0001", "sensor-0002"]
    assert Credentials(Settings(run_dir=demo_env)).devices() == [user for user, _ in lines]
    assert stat.S_IMODE(issued.stat().st_mode) == 0o600
    assert QuietStack.reloads == 1
