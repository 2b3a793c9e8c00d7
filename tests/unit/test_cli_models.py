"""`fleetwatch models …` against a real MLflow store in the test's run directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from fleetwatch.cli import models as models_cli
from fleetwatch.cli.main import app
from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet.pca import pool_pca
from fleetwatch.fleet.registry import CHAMPION, ModelRegistry
from fleetwatch.fleet.tracking import MlflowTrainingObserver
from tests.unit.mlflow_store import fleet_params, seeded_settings

Invoke = Callable[..., Result]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A run directory whose store holds ``fleetwatch-hvac`` with two versions (the first
    logged in a training run with an evaluation metric) and an empty ``fleetwatch-empty``."""
    settings = seeded_settings(tmp_path_factory.mktemp("run"))
    params: dict[str, Any] = pool_pca(fleet_params())
    registry = ModelRegistry(settings)
    observer = MlflowTrainingObserver(settings, run_name="train-cli")
    observer.on_start({"trigger": "1 second"})
    registry.register("hvac", params, run_id=observer.run_id, devices=3)
    observer.on_stop()
    observer.log_evaluation({"recall": 0.75})
    registry.register("hvac", params, devices=3)
    registry.client.create_registered_model("fleetwatch-empty")
    return settings


@pytest.fixture
def run(store: Settings, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    monkeypatch.setenv("FLEETWATCH_RUN_DIR", str(store.run_path))
    monkeypatch.setattr(models_cli.console, "width", 200)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["models", *args])


def test_list_shows_every_version_and_its_aliases(run: Invoke) -> None:
    result = run("list")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "fleetwatch-hvac" in line]
    assert len(rows) == 2
    assert "challenger" in rows[1]
    assert "challenger" not in rows[0]


def test_show_gives_the_version_its_run_and_metrics(run: Invoke) -> None:
    result = run("show", "fleetwatch-hvac", "--version", "1")
    assert result.exit_code == 0, result.output
    assert "train-cli" in result.output
    assert "metric recall" in result.output
    assert "param trigger" in result.output
    assert "fleetwatch.devices" in result.output
    by_alias = run("show", "fleetwatch-hvac", "--alias", "challenger")
    assert by_alias.exit_code == 0, by_alias.output
    assert "│ 2 " in by_alias.output


def test_promote_and_rollback_move_the_champion(run: Invoke, store: Settings) -> None:
    promoted = run("promote", "fleetwatch-hvac", "--version", "1", "--no-publish")
    assert promoted.exit_code == 0, promoted.output
    assert "champion is version 1 (there was none)" in promoted.output
    again = run("promote", "fleetwatch-hvac", "--no-publish")  # the challenger, version 2
    assert "champion is version 2 (was 1)" in again.output
    back = run("rollback", "fleetwatch-hvac", "--no-publish")
    assert back.exit_code == 0, back.output
    assert "champion is version 1 (was 2)" in back.output
    assert ModelRegistry(store).version("fleetwatch-hvac", alias=CHAMPION).version == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "fleetwatch-nope"), "no registered model 'fleetwatch-nope'"),
        (("show", "fleetwatch-hvac", "--version", "9"), "fleetwatch-hvac has no version 9"),
        (("show", "fleetwatch-hvac", "--alias", "gold"), "has no alias 'gold'"),
        (("show", "fleetwatch-hvac", "--version", "1", "--alias", "x"), "not both"),
        (("show", "fleetwatch-empty"), "fleetwatch-empty has no versions"),
        (("promote", "fleetwatch-nope"), "no registered model 'fleetwatch-nope'"),
        (("promote", "fleetwatch-hvac", "--version", "9"), "has no version 9"),
        (("rollback", "fleetwatch-empty"), "no previous-champion to roll back to"),
    ],
)
def test_mistakes_are_one_line_errors(run: Invoke, args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_tracking_uri_points_elsewhere(run: Invoke, tmp_path: Path) -> None:
    result = run("list", "--tracking-uri", f"sqlite:///{tmp_path}/other.db")
    assert result.exit_code == 0, result.output
    assert "no registered models" in result.output


def test_a_champion_the_scorer_cannot_be_told_of_is_a_clear_error(
    run: Invoke, store: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("promote", "fleetwatch-hvac", "--version", "1", "--no-publish")  # (if it is not yet)
    monkeypatch.setenv("FLEETWATCH_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")  # nothing listens
    result = run("publish", "fleetwatch-hvac")
    assert result.exit_code == 1
    assert "the scorer was not told" in result.output
    assert "Traceback" not in result.output


def test_list_and_show_as_json(run: Invoke) -> None:
    listed = run("list", "--json")
    assert listed.exit_code == 0, listed.output
    versions = json.loads(listed.stdout)
    hvac = [v for v in versions if v["name"] == "fleetwatch-hvac"]
    assert [v["version"] for v in hvac] == [1, 2]
    assert all(isinstance(v["aliases"], list) and v["created_ms"] > 0 for v in hvac)
    shown = run("show", "fleetwatch-hvac", "--version", "1", "--json")
    assert shown.exit_code == 0, shown.output
    one = json.loads(shown.stdout)
    assert one["version"] == 1
    assert one["run"]["name"] == "train-cli"
    assert one["run"]["metrics"]["recall"] == 0.75


def test_register_fleet_as_json(run: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models_cli, "register_fleet_models", lambda settings: {"hvac": 3})
    result = run("register-fleet", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"hvac": 3}
