"""The demo's first fleet model: nothing until enough devices have learned, then a model per
ready scope is registered in a real (local) MLflow store, promoted and published."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.fleet import bootstrap as fleet_bootstrap
from fleetwatch.fleet.registry import CHAMPION, ModelRegistry
from tests.unit.mlflow_store import fleet_params, local_settings, seeded_settings


def test_a_fleet_model_is_registered_promoted_and_published_once_enough_devices_learned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = seeded_settings(tmp_path)
    learned = {d: {"params": p} for d, p in fleet_params(3).items()}
    tables: list[dict[str, Any]] = [{"dev-0": learned["dev-0"]}, learned, learned, learned]
    reads = iter(tables)
    published: list[str] = []
    monkeypatch.setattr(fleet_bootstrap, "read_table", lambda s, timeout_s=30.0: next(reads))

    def publish(_settings: object, scope: str) -> tuple[str, int]:
        published.append(scope)
        return ("m", 1)

    monkeypatch.setattr(fleet_bootstrap, "publish_champion", publish)

    lines = fleet_bootstrap.first_fleet_models(settings, 3, threading.Event(), every_s=0.01)

    assert len(lines) == 1
    assert "from 3 devices" in lines[0]
    assert "promoted to champion" in lines[0]
    scope = published[0]
    assert lines[0].endswith(f"fleet:{scope}")
    registry = ModelRegistry(settings)
    name = lines[0].split()[2]
    assert registry.version(name, alias=CHAMPION).version == 1


def test_stopping_before_enough_devices_learned_registers_nothing(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    assert fleet_bootstrap.first_fleet_models(local_settings(tmp_path), 3, stop) == []
