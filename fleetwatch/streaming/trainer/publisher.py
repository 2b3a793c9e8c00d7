"""The trainer's ``foreachBatch``: a micro-batch's parameter updates written to
``model.params``, then reported to the training observer; a clean stop that never leaves a
written batch uncommitted."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import spark_options
from fleetwatch.streaming.trainer.errors import StopRequested
from fleetwatch.streaming.trainer.observer import TrainingObserver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)


class BatchPublisher:
    """The ``foreachBatch`` function: write the batch's updates, then tell the observer.

    A clean stop (:meth:`close`) waits for a batch being written, and refuses the batches that
    start after it, so the query never stops between a write and its commit (which would
    re-publish that batch's versions on restart)."""

    def __init__(self, settings: Settings, observer: TrainingObserver) -> None:
        self.kafka = spark_options(settings.kafka)
        self.topic = settings.topics.model_params
        self.observer = observer
        self.last_batch: int | None = None
        """The id of the last batch handled (written or empty)."""
        self.refused = False
        self._lock = threading.Lock()
        self._closing = False

    def close(self) -> int | None:
        """Refuse new batches; returns the last batch handled, once it is done."""
        with self._lock:
            self._closing = True
            return self.last_batch

    def write(self, records: DataFrame) -> None:
        """Write ``key, value`` rows to ``model.params`` (a batch Kafka write)."""
        (records.write.format("kafka").options(**self.kafka).option("topic", self.topic).save())

    def __call__(self, updates: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closing:
                self.refused = True
                raise StopRequested(f"batch {batch_id} refused: the trainer is stopping")
            self._publish(updates, batch_id)
            self.last_batch = batch_id

    def _publish(self, updates: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        updates.persist()
        try:
            summary = updates.agg(
                F.count("*").alias("n"),
                F.min("batch_from_ms").alias("lo"),
                F.max("batch_to_ms").alias("hi"),
            ).first()
            if summary is None or not summary["n"]:
                return
            self.write(updates.select(F.col("device_id").alias("key"), "value"))
        finally:
            updates.unpersist()
        n, lo, hi = int(summary["n"]), int(summary["lo"]), int(summary["hi"])
        logger.info("batch %d: parameters of %d devices published to %s", batch_id, n, self.topic)
        try:
            self.observer.on_batch(batch_id, n, lo, hi)
        except Exception:
            logger.exception("the training observer failed on batch %d; training goes on", batch_id)
