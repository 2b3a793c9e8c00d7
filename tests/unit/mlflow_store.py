"""A real MLflow store (SQLite, in the test's directory) for the tracking and registry tests."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from fleetwatch.contracts.settings import Settings
from fleetwatch.models.multivariate import PcaDetector
from tests.mlflow_template import seed_store
from tests.unit import signals


def quiet_mlflow() -> None:
    """MLflow logs its schema migrations and model validation at INFO; tests need none of it."""
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def local_settings(tmp_path: Path) -> Settings:
    """Settings whose embedded MLflow store lives under ``tmp_path``."""
    quiet_mlflow()
    return Settings(run_dir=tmp_path)


def seeded_settings(tmp_path: Path) -> Settings:
    """:func:`local_settings` whose store starts migrated (:func:`~tests.mlflow_template.
    seed_store`): for the tests of what goes into a store, not of making one."""
    return seed_store(local_settings(tmp_path))


def device_readings(seed: int, offset: float, n: int = signals.TRAIN) -> pd.DataFrame:
    """One device's correlated readings, its level moved by ``offset``."""
    frame = signals.wide(n, seed)
    frame[["temperature", "humidity"]] += offset
    return signals.long(frame)


def fleet_params(devices: int = 3) -> dict[str, dict[str, object]]:
    """Fitted PCA parameters of a few devices with different levels."""
    return {
        f"dev-{i}": PcaDetector(halflife_hours=None)
        .learn(device_readings(seed=10 + i, offset=0.3 * (i - 1)))
        .to_params()
        for i in range(devices)
    }
