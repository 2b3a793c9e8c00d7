"""The trainer's ``foreachBatch``: a micro-batch's parameter updates written to
``model.params``, then reported to the training observer; a clean stop that never leaves a
written batch uncommitted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from fleetwatch.contracts.settings import Settings
from fleetwatch.contracts.training import TrainedBatch
from fleetwatch.kafka_config import spark_options
from fleetwatch.streaming.trainer.errors import StopRequested
from fleetwatch.streaming.trainer.observer import TrainingObserver
from fleetwatch.streaming.trainer.processor import FAILED

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

PRODUCER_OPTIONS = {
    "kafka.batch.size": str(256 * 1024),
    "kafka.linger.ms": "20",
    "kafka.compression.type": "lz4",
}
"""The Kafka producer of a batch's ``model.params`` write. A device's record is its whole
parameters (about 15 KB), so the client's default ``batch.size`` (16 KB) holds one record: a
produce request then carries one record per partition and the write of a 10,000-device batch
waits for thousands of round trips to the broker. 256 KB holds a few dozen records, and a
request of them stays within the broker's default ``message.max.bytes`` (1 MB) whatever the
compression; ``linger.ms`` lets a batch fill while the rows are handed over; lz4 (as the gateway
writes ``telemetry.raw``) shrinks the JSON several times for the broker's log and every reader
for little CPU. The records, their keys and their order per key are the same."""


class BatchPublisher:
    """The ``foreachBatch`` function: write the batch's updates, then tell the observer.

    A clean stop (:meth:`close`) waits for a batch being written, and refuses the batches that
    start after it, so the query never stops between a write and its commit (which would
    re-publish that batch's versions on restart)."""

    def __init__(
        self,
        settings: Settings,
        observer: TrainingObserver,
        on_failed: Callable[[int], None] | None = None,
    ) -> None:
        self.kafka = spark_options(settings.kafka)
        self.topic = settings.topics.model_params
        self.observer = observer
        self.on_failed = on_failed
        """Told how many devices of a batch failed to learn (their rows are not written)."""
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
        """Write ``key, value`` rows to ``model.params`` (a batch Kafka write; a null value is a
        tombstone)."""
        (
            records.write.format("kafka")
            .options(**PRODUCER_OPTIONS)
            .options(**self.kafka)
            .option("topic", self.topic)
            .save()
        )

    def __call__(self, updates: DataFrame, batch_id: int) -> None:
        with self._lock:
            if self._closing:
                self.refused = True
                raise StopRequested(f"batch {batch_id} refused: the trainer is stopping")
            self._publish(updates, batch_id)
            self.last_batch = batch_id

    def _publish(self, updates: DataFrame, batch_id: int) -> None:
        # lazy: pyspark is imported only where Spark runs
        from pyspark.sql import functions as F

        updates.persist()
        learned = F.col("version") != FAILED  # null for a tombstone, whose range is null too
        try:
            summary = updates.agg(
                F.count("*").alias("rows"),
                F.count("value").alias("n"),
                F.count(F.when(F.col("version") == FAILED, 1)).alias("failed"),
                F.min(F.when(learned, F.col("batch_from_ms"))).alias("lo"),
                F.max(F.when(learned, F.col("batch_to_ms"))).alias("hi"),
            ).first()
            if summary is None or not summary["rows"]:
                return
            written = updates.where(F.col("version").isNull() | (F.col("version") != FAILED))
            if summary["rows"] > summary["failed"]:
                self.write(written.select(F.col("device_id").alias("key"), "value"))
        finally:
            updates.unpersist()
        n, failed = int(summary["n"]), int(summary["failed"])
        forgotten = int(summary["rows"]) - n - failed
        if failed:
            logger.warning(
                "batch %d: %d devices failed to learn; their parameters are unchanged",
                batch_id,
                failed,
            )
            if self.on_failed is not None:
                self.on_failed(failed)
        if forgotten:
            logger.info(
                "batch %d: %d devices silent for score.expire_after_s forgotten (tombstones on %s)",
                batch_id,
                forgotten,
                self.topic,
            )
        if not n:
            return
        lo, hi = int(summary["lo"]), int(summary["hi"])
        logger.info("batch %d: parameters of %d devices published to %s", batch_id, n, self.topic)
        try:
            self.observer.on_batch(TrainedBatch(batch_id, n, lo, hi))
        except Exception:
            logger.exception("the training observer failed on batch %d; training goes on", batch_id)
