"""The connection to MLflow: one client per store, the training experiment, typed errors.

Nothing here touches MLflow's process-global state (``mlflow.set_tracking_uri``, the fluent
active run): the trainer's hooks run on Spark's streaming thread while the CLI runs on the main
one, so every call goes through an explicit :class:`MlflowClient` and an explicit run id.

The embedded default is a SQLite store in the run directory (tracking and model registry in
``{run_dir}/mlflow/mlflow.db``, artifacts under ``{run_dir}/mlflow/artifacts``); with
``mlflow.tracking_uri`` set (``--tracking-uri``) the same calls go to a tracking server, which
also serves the registry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from fleetwatch.contracts.settings import Settings
from fleetwatch.models.errors import TrackingError

logger = logging.getLogger(__name__)


def with_tracking_uri(settings: Settings, tracking_uri: str | None) -> Settings:
    """The settings with ``mlflow.tracking_uri`` replaced when ``tracking_uri`` is given."""
    if tracking_uri is None:
        return settings
    part = settings.mlflow.model_copy(update={"tracking_uri": tracking_uri})
    return settings.model_copy(update={"mlflow": part})


def client_for(settings: Settings) -> MlflowClient:
    """A client on the configured store (creating the embedded store's directory)."""
    if settings.mlflow_local:
        settings.mlflow_artifacts.mkdir(parents=True, exist_ok=True)
    uri = settings.mlflow_tracking_uri
    with mlflow_errors(f"cannot open the MLflow store at {uri}"):
        return MlflowClient(tracking_uri=uri, registry_uri=uri)


def experiment_id(client: MlflowClient, settings: Settings) -> str:
    """The training experiment's id, created on first use (in the embedded store with its
    artifacts in the run directory)."""
    name = settings.mlflow.experiment
    with mlflow_errors(f"cannot read or create the MLflow experiment {name!r}"):
        found = client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        location = settings.mlflow_artifacts.as_uri() if settings.mlflow_local else None
        created = str(client.create_experiment(name, artifact_location=location))
        logger.info("created MLflow experiment %r (%s)", name, created)
        return created


@contextmanager
def mlflow_errors(what: str) -> Iterator[None]:
    """Turn MLflow's exceptions (and the OS errors of a local store) into
    :class:`TrackingError` with what was being done."""
    try:
        yield
    except MlflowException as exc:
        raise TrackingError(f"{what}: {exc.message}") from exc
    except OSError as exc:
        raise TrackingError(f"{what}: {exc}") from exc
