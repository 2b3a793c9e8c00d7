"""Training runs in MLflow: the trainer's hooks, and evaluation metrics.

The trainer calls a :class:`TrainingObserver` at three points: ``on_start(config)`` once,
``on_batch(...)`` after each mini-batch it has published, ``on_stop()`` once on the way out.
:class:`MlflowTrainingObserver` turns them into one MLflow run per training process:

- ``on_start``: a run in the training experiment; the configuration flattened into params
  (nested keys joined with ``.``);
- ``on_batch``: metrics at ``step=batch_id`` — ``devices_updated``, and the batch's event-time
  range ``batch_from_ms`` / ``batch_to_ms`` when it has one — plus the running totals as tags
  (``fleetwatch.batches``, ``fleetwatch.devices_updated``, ``fleetwatch.trained_from_ms`` /
  ``…_to_ms``, the widest range seen). Tags rather than params because they change: MLflow
  params are write-once. All of it is one ``log_batch`` request;
- ``on_stop``: the run ends (``FINISHED``).

:meth:`MlflowTrainingObserver.log_evaluation` adds evaluation metrics (e.g. what
``fleetwatch sim eval --json`` reports, through :func:`evaluation_metrics`) to the run, also
after ``on_stop``.

Failure policy: a store that cannot be reached at ``on_start`` is a configuration error and
raises :class:`TrackingError`. Later failures are logged and dropped — tracking must not stop
the training it describes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.training import TrainedBatch
from fleetwatch.fleet.store import client_for, experiment_id, mlflow_errors
from fleetwatch.models.errors import TrackingError

logger = logging.getLogger(__name__)

_MAX_PARAMS_PER_REQUEST = 100
_MAX_PARAM_CHARS = 6000


class MlflowTrainingObserver:
    """One MLflow run per training process (see the module notes)."""

    def __init__(
        self, settings: Settings, client: MlflowClient | None = None, run_name: str | None = None
    ) -> None:
        self.settings = settings
        self._client = client
        self.run_name = run_name
        self.run_id: str | None = None
        self.batches = 0
        self.devices_updated = 0
        self.trained_from_ms: int | None = None
        self.trained_to_ms: int | None = None

    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            self._client = client_for(self.settings)
        return self._client

    def on_start(self, config: Mapping[str, Any]) -> None:
        with mlflow_errors("cannot start the MLflow training run"):
            run = self.client.create_run(
                experiment_id(self.client, self.settings),
                run_name=self.run_name,
                tags={"fleetwatch.stage": "train"},
            )
            self.run_id = str(run.info.run_id)
            params = [Param(k, v) for k, v in flatten_config(config)]
            for i in range(0, len(params), _MAX_PARAMS_PER_REQUEST):
                self.client.log_batch(self.run_id, params=params[i : i + _MAX_PARAMS_PER_REQUEST])
        logger.info(
            "training run %s in experiment %r", self.run_id, self.settings.mlflow.experiment
        )

    def on_batch(self, batch: TrainedBatch) -> None:
        run_id = self._require_run()
        batch_id, devices_updated = batch.batch_id, batch.devices_updated
        trained_from_ms, trained_to_ms = batch.trained_from_ms, batch.trained_to_ms
        self.batches += 1
        self.devices_updated += devices_updated
        if trained_from_ms is not None:
            low = self.trained_from_ms
            self.trained_from_ms = trained_from_ms if low is None else min(low, trained_from_ms)
        if trained_to_ms is not None:
            high = self.trained_to_ms
            self.trained_to_ms = trained_to_ms if high is None else max(high, trained_to_ms)
        now = now_ms()
        metrics = [Metric("devices_updated", float(devices_updated), now, batch_id)]
        if trained_from_ms is not None:
            metrics.append(Metric("batch_from_ms", float(trained_from_ms), now, batch_id))
        if trained_to_ms is not None:
            metrics.append(Metric("batch_to_ms", float(trained_to_ms), now, batch_id))
        tags = [
            RunTag("fleetwatch.batches", str(self.batches)),
            RunTag("fleetwatch.last_batch_id", str(batch_id)),
            RunTag("fleetwatch.devices_updated", str(self.devices_updated)),
        ]
        if self.trained_from_ms is not None:
            tags.append(RunTag("fleetwatch.trained_from_ms", str(self.trained_from_ms)))
        if self.trained_to_ms is not None:
            tags.append(RunTag("fleetwatch.trained_to_ms", str(self.trained_to_ms)))
        try:
            self.client.log_batch(run_id, metrics=metrics, tags=tags)
        except (MlflowException, OSError):
            logger.exception("could not log batch %d to MLflow run %s", batch_id, run_id)

    def on_stop(self) -> None:
        if self.run_id is None:
            return
        try:
            self.client.set_terminated(self.run_id, "FINISHED")
        except (MlflowException, OSError):
            logger.exception("could not end MLflow run %s", self.run_id)

    def log_evaluation(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Evaluation metrics of this run (precision, recall, false alerts per device-day…)."""
        run_id = self._require_run()
        now = now_ms()
        batch = [Metric(k, float(v), now, step or 0) for k, v in metrics.items()]
        with mlflow_errors(f"cannot log evaluation metrics to run {run_id}"):
            self.client.log_batch(run_id, metrics=batch)

    def _require_run(self) -> str:
        if self.run_id is None:
            raise TrackingError("the training run has not started (on_start was not called)")
        return self.run_id


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(dotted.key, text)`` pairs of a nested configuration, values cut to MLflow's limit."""
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten_config(value, f"{name}.")
        else:
            yield name, str(value)[:_MAX_PARAM_CHARS]


def evaluation_metrics(report: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of an evaluation report (``fleetwatch sim eval --json``) as metric names
    and values: nested keys joined with ``.``, ``None`` and non-numbers left out."""
    out: dict[str, float] = {}
    for key, value in report.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(evaluation_metrics(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out
