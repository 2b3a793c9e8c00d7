"""Fleet models in a real MLflow registry (SQLite in a temporary directory): register,
promote, roll back, load the champion's parameters and the pyfunc model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd
import pytest

from fleetwatch.contracts.settings import Settings
from fleetwatch.fleet.model import compose, load
from fleetwatch.fleet.pca import pool_pca
from fleetwatch.fleet.registry import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS_CHAMPION,
    TAG_ROLLED_BACK,
    ModelRegistry,
    champion_params,
    model_name,
)
from fleetwatch.fleet.tails import field_of, tails_of
from fleetwatch.fleet.tracking import MlflowTrainingObserver
from fleetwatch.models.errors import FleetModelError, RegistryError, UnknownModel, UnknownVersion
from fleetwatch.models.multivariate import PcaDetector
from fleetwatch.models.tail import StreamTail
from tests.unit import signals
from tests.unit.mlflow_store import fleet_params, local_settings, seeded_settings


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One store for the module (creating its schema is the slow part); tests use their own
    scopes."""
    return seeded_settings(tmp_path_factory.mktemp("mlflow"))


@pytest.fixture(scope="module")
def params() -> dict[str, Any]:
    return pool_pca(fleet_params())


@pytest.fixture(scope="module")
def registry(settings: Settings) -> ModelRegistry:
    return ModelRegistry(settings)


def _aliases(registry: ModelRegistry, name: str) -> dict[str, int]:
    return {a: v.version for v in registry.versions(name) for a in v.aliases}


def test_a_registered_version_is_the_challenger(
    registry: ModelRegistry, params: dict[str, Any]
) -> None:
    first = registry.register("reg", params, devices=3)
    assert first.name == "fleetwatch-reg"
    assert (first.version, first.aliases) == (1, (CHALLENGER,))
    assert first.tags["fleetwatch.devices"] == "3"
    assert first.tags["fleetwatch.trained_to_ms"] == str(params["trained_to_ms"])
    assert first.run_id is not None
    run = registry.run(first.run_id)
    assert run.status == "FINISHED"
    assert run.params["scope"] == "reg"
    second = registry.register("reg", params, devices=3)
    assert _aliases(registry, second.name) == {CHALLENGER: 2}


def test_promote_then_rollback_walks_the_champion_back(
    registry: ModelRegistry, params: dict[str, Any]
) -> None:
    name = model_name(registry.settings, "walk")
    for _ in range(3):
        registry.register("walk", params)
    move = registry.promote(name, 1)
    assert (move.champion, move.replaced) == (1, None)
    assert _aliases(registry, name) == {CHAMPION: 1, CHALLENGER: 3}
    registry.promote(name, 2)
    assert registry.promote(name).champion == 3  # the challenger by default
    assert _aliases(registry, name) == {CHAMPION: 3, PREVIOUS_CHAMPION: 2}

    back = registry.rollback(name)
    assert (back.champion, back.replaced) == (2, 3)
    assert _aliases(registry, name) == {CHAMPION: 2, PREVIOUS_CHAMPION: 1}
    assert registry.version(name, 3).tags[TAG_ROLLED_BACK] == "true"
    registry.rollback(name)
    assert _aliases(registry, name) == {CHAMPION: 1}
    with pytest.raises(RegistryError, match="no previous-champion to roll back to"):
        registry.rollback(name)


def test_wrong_names_versions_and_aliases_are_clear_errors(
    registry: ModelRegistry, params: dict[str, Any]
) -> None:
    name = registry.register("errs", params).name
    with pytest.raises(UnknownModel, match="no registered model 'fleetwatch-nope'"):
        registry.promote("fleetwatch-nope")
    with pytest.raises(UnknownVersion, match="has no version 7"):
        registry.promote(name, 7)
    with pytest.raises(UnknownVersion, match="has no alias 'gold'"):
        registry.version(name, alias="gold")
    registry.promote(name)
    with pytest.raises(RegistryError, match="already the champion"):
        registry.promote(name, 1)
    with pytest.raises(RegistryError, match="has no challenger"):
        registry.promote(name)
    with pytest.raises(RegistryError, match="scope 'a/b'"):
        registry.register("a/b", params)


def test_champion_params_round_trip_into_a_detector_that_scores_the_same(
    registry: ModelRegistry, settings: Settings, params: dict[str, Any]
) -> None:
    assert champion_params(settings, "trip") is None  # no such model yet
    name = registry.register("trip", params).name
    assert champion_params(settings, "trip") is None  # no champion yet
    registry.promote(name)
    loaded = champion_params(settings, "trip")
    assert loaded is not None
    assert loaded == compose(params, {}), "the shape before is registered in the current one"
    probe = signals.after_training("decoupled")
    expected = PcaDetector.from_params(params).score(probe)
    got = PcaDetector.from_params(loaded["pca"]).score(probe)
    np.testing.assert_array_equal(got.score, expected.score)
    assert expected.alert.any()


def test_the_pooled_tails_travel_with_the_champion_and_bad_ones_are_refused(
    registry: ModelRegistry, settings: Settings, params: dict[str, Any]
) -> None:
    tail = StreamTail(2000.0)
    tail.summary.add(np.abs(np.random.default_rng(1).normal(0, 1, 500)))
    tail.interval_ms = 1000.0
    tails = {"temperature": tail.state() | {"halflife": 2000.0}}
    level, seasonal = field_of("level"), field_of("seasonal")
    name = registry.register("tails", params | {level: tails, seasonal: tails}).name
    registry.promote(name)
    loaded = champion_params(settings, "tails")
    assert loaded is not None
    assert loaded[level] == tails
    assert loaded[seasonal] == tails
    weight = tails_of(loaded)["seasonal"]["temperature"].summary.weight
    assert weight == pytest.approx(500.0, rel=0.01)
    with pytest.raises(FleetModelError, match="bad pooled tails"):
        registry.register("tails", params | {seasonal: {"temperature": {"counts": [1.0]}}})


def test_the_pyfunc_champion_predicts_what_the_detector_scores(
    registry: ModelRegistry,
    settings: Settings,
    params: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = registry.register("pyfunc", params).name
    registry.promote(name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", settings.mlflow_tracking_uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", settings.mlflow_tracking_uri)
    model = mlflow.pyfunc.load_model(f"models:/{name}@champion")
    detector = PcaDetector.from_params(params)

    probe = signals.after_training("decoupled")
    out = model.predict(probe)
    np.testing.assert_allclose(out["anomaly_score"], detector.score(probe).score, rtol=1e-12)
    assert out["alert"].any()

    # two devices with the same event times are scored each on its own
    other = signals.after_training("decoupled", seed=5)
    both = pd.concat([probe.assign(device_id="a"), other.assign(device_id="b")])
    scores = model.predict(both)["anomaly_score"].to_numpy()
    own = np.concatenate([detector.score(probe).score, detector.score(other).score])
    np.testing.assert_allclose(scores, own, rtol=1e-12)


def test_a_fleet_model_of_tails_alone_registers_and_its_pyfunc_scores_nothing(
    registry: ModelRegistry, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope of single-metric devices: pooled tails, no PCA part."""
    tail = StreamTail(2000.0)
    tail.summary.add(np.abs(np.random.default_rng(2).normal(0, 1, 500)))
    tail.interval_ms = 1000.0
    tails = {"temperature": tail.state() | {"halflife": 2000.0}}
    fleet = compose(None, {field_of("level"): tails, field_of("seasonal"): tails})
    info = registry.register("single", fleet, devices=4)
    assert info.tags["fleetwatch.kind"] == "fleet"
    assert "fleetwatch.trained_to_ms" not in info.tags
    assert info.description.startswith("the tails of temperature pooled from 4")
    registry.promote(info.name)
    loaded = champion_params(settings, "single")
    assert loaded == fleet
    detector, pooled = load(loaded)
    assert detector is None
    assert pooled["level"]["temperature"].summary.weight == pytest.approx(500.0, rel=0.01)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", settings.mlflow_tracking_uri)
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", settings.mlflow_tracking_uri)
    model = mlflow.pyfunc.load_model(f"models:/{info.name}@champion")
    probe = pd.DataFrame({"event_ms": [0, 1000], "metric": "temperature", "value": [21.0, 99.0]})
    out = model.predict(probe)
    assert out["anomaly_score"].tolist() == [0.0, 0.0]
    assert not out["alert"].any()
    with pytest.raises(FleetModelError, match="not a fleet model's parameters"):
        registry.register("single", {"kind": "level", "schema": 1})


def test_a_fleet_model_can_be_logged_in_the_training_run(
    registry: ModelRegistry, settings: Settings, params: dict[str, Any]
) -> None:
    observer = MlflowTrainingObserver(settings)
    observer.on_start({"mode": "test"})
    version = registry.register("inrun", params, run_id=observer.run_id, devices=3)
    observer.on_stop()
    assert version.run_id == observer.run_id
    assert "fleet-models/inrun" in version.source


def test_the_store_can_be_elsewhere(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)
    part = settings.mlflow.model_copy(update={"tracking_uri": f"sqlite:///{tmp_path}/other.db"})
    elsewhere = settings.model_copy(update={"mlflow": part})
    assert ModelRegistry(elsewhere).names() == []
    assert (tmp_path / "other.db").is_file()
