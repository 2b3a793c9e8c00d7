"""What the trainer reports of each micro-batch that published parameters, to whatever observes
it (the MLflow run, the trainer's metrics)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainedBatch:
    """Micro-batch ``batch_id`` published new parameters for ``devices_updated`` devices,
    learned from readings with event times in ``[trained_from_ms, trained_to_ms]`` (epoch
    milliseconds; ``None`` when the batch learned from none)."""

    batch_id: int
    devices_updated: int
    trained_from_ms: int | None
    trained_to_ms: int | None
