"""The trainer's hook point: what a run-tracking backend (MLflow) is told about training.

The trainer calls :meth:`TrainingObserver.on_start` once with the run's configuration, then
:meth:`~TrainingObserver.on_batch` after each micro-batch that published parameters to
``model.params`` (batches that changed nothing, such as Spark's no-data batches, are not
reported), and :meth:`~TrainingObserver.on_stop` when the run ends (clean stop, end of a
backfill, or failure). An observer that raises in ``on_batch`` or ``on_stop`` is logged and
training goes on: tracking is not allowed to stop the parameters from flowing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.training import TrainedBatch

logger = logging.getLogger(__name__)


@runtime_checkable
class TrainingObserver(Protocol):
    def on_start(self, config: Mapping[str, Any]) -> None:
        """The run begins; ``config`` is JSON-able (mode, topics, range, detector, trigger…)."""

    def on_batch(self, batch: TrainedBatch) -> None:
        """``batch`` published new parameters for ``batch.devices_updated`` (≥ 1) devices."""

    def on_stop(self) -> None:
        """The run has ended; flush and close."""


class NoopObserver:
    """Tracks nothing."""

    def on_start(self, config: Mapping[str, Any]) -> None:
        return None

    def on_batch(self, batch: TrainedBatch) -> None:
        return None

    def on_stop(self) -> None:
        return None


def default_observer(settings: Settings) -> TrainingObserver:
    """The MLflow observer (:mod:`fleetwatch.fleet.tracking`) unless tracking is off."""
    if not settings.train.tracking:
        return NoopObserver()
    # lazy: mlflow takes a second to import
    from fleetwatch.fleet.tracking import MlflowTrainingObserver

    return MlflowTrainingObserver(settings)
