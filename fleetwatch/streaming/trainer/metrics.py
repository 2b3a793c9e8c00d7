"""The trainer's own metrics (``fleetwatch_train_*``): parameters published and how fresh the
newest are. They are taken where the publisher tells its
:class:`~fleetwatch.streaming.trainer.observer.TrainingObserver` what a batch did (on the
driver, after the batch's parameters are on ``model.params``)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from fleetwatch.contracts.training import TrainedBatch
from fleetwatch.streaming.trainer.observer import TrainingObserver


class TrainerMetrics:
    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.published_at: float | None = None
        self.learned_to: float | None = None
        self.published = Counter(
            "fleetwatch_train_params_published",
            "Devices' parameter records published to model.params",
            registry=registry,
        )
        self.failed = Counter(
            "fleetwatch_train_device_failures",
            "Devices whose learning of a micro-batch raised (their parameters unchanged)",
            registry=registry,
        )
        self.batches = Counter(
            "fleetwatch_train_publishing_batches",
            "Micro-batches that published parameters",
            registry=registry,
        )
        Gauge(
            "fleetwatch_train_params_freshness_seconds",
            "Seconds since the newest parameters were published (NaN: none yet by this process)",
            registry=registry,
        ).set_function(lambda: self._since(self.published_at))
        Gauge(
            "fleetwatch_train_learned_event_time_lag_seconds",
            "Now minus the newest event time learned into published parameters "
            "(NaN: none yet by this process)",
            registry=registry,
        ).set_function(lambda: self._since(self.learned_to))

    def batch_published(self, devices: int, trained_to_ms: int | None) -> None:
        self.published.inc(devices)
        self.batches.inc()
        self.published_at = self.clock()
        if trained_to_ms is not None:
            newest = trained_to_ms / 1000
            self.learned_to = newest if self.learned_to is None else max(self.learned_to, newest)

    def _since(self, moment: float | None) -> float:
        return math.nan if moment is None else self.clock() - moment


class MeteredObserver:
    """A :class:`TrainingObserver` that counts each published batch in :class:`TrainerMetrics`
    and then tells ``inner``."""

    def __init__(self, inner: TrainingObserver, metrics: TrainerMetrics) -> None:
        self.inner = inner
        self.metrics = metrics

    def on_start(self, config: Mapping[str, Any]) -> None:
        self.inner.on_start(config)

    def on_batch(self, batch: TrainedBatch) -> None:
        self.metrics.batch_published(batch.devices_updated, batch.trained_to_ms)
        self.inner.on_batch(batch)

    def on_stop(self) -> None:
        self.inner.on_stop()
