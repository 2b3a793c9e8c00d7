"""An embedded MLflow store that starts migrated. A new SQLite store runs MLflow's schema
migrations on its first use: seconds (about 8 on two busy cores) of every test that is about
what goes into a store. :func:`seed_store` copies there a migrated, empty store made once per
machine and MLflow version by the same client, under ``.cache/mlflow-store/``. The tests about
making a store start without one."""

from __future__ import annotations

import os
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path

from fleetwatch.contracts.settings import Settings


def _template() -> Path:
    folder = Settings().home / ".cache" / "mlflow-store"
    made = folder / f"mlflow-{version('mlflow')}.db"
    if made.exists():
        return made
    from fleetwatch.fleet.store import client_for  # lazy: mlflow takes seconds to import

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        settings = Settings(run_dir=Path(scratch))
        client = client_for(settings)
        client.search_experiments()  # the tracking store: created and migrated
        client.search_registered_models()  # the registry's, in the same database
        # whole or not at all: another process may be making it too
        os.replace(settings.run_path / "mlflow" / "mlflow.db", made)
    return made


def seed_store(settings: Settings) -> Settings:
    """``settings``, their embedded store (``{run_dir}/mlflow/mlflow.db``) a copy of the
    migrated empty one unless it exists."""
    assert settings.mlflow_local, "only the embedded store is seeded"
    target = settings.run_path / "mlflow" / "mlflow.db"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_template(), target)
    return settings
