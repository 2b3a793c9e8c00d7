"""The scorer: ``telemetry.raw`` → score every metric of every reading → ``alerts``.

Thin Spark glue around :func:`fleetwatch.streaming.scoring.score_readings`. Spark's Kafka
source and sink, checkpointed: a restart resumes from the last committed micro-batch, and the
deterministic alert ids make the sink's at-least-once redelivery harmless downstream.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from fleetwatch.contracts.errors import FleetwatchError
from fleetwatch.contracts.settings import Settings
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.streaming.checkpoints import resume_offsets, versioned
from fleetwatch.streaming.scoring import ALERT_COLUMNS, score_batch
from fleetwatch.streaming.session import wait_for_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

logger = logging.getLogger(__name__)


class ScoringError(FleetwatchError):
    """The scoring query failed (the message carries Spark's reason)."""


PLAN_VERSION = 2
"""Bump when the query's stateful plan changes (Spark cannot reuse the old checkpoint)."""

READING_SCHEMA = (
    "device_id STRING, seq BIGINT, event_ms BIGINT, received_ms BIGINT, metrics MAP<STRING, DOUBLE>"
)
ALERT_SCHEMA = (
    "alert_id STRING, device_id STRING, metric STRING, status STRING, detector STRING, "
    "params_version BIGINT, seq BIGINT, event_ms BIGINT, received_ms BIGINT, detected_ms BIGINT, "
    "value DOUBLE, expected DOUBLE, band DOUBLE, score DOUBLE, reason STRING"
)


def _score_batches(
    detector: FixedBaseline, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield from score_batch(batch, detector, now_ms=time.time_ns() // 1_000_000)


def readings_frame(raw: DataFrame, dedup_window: str) -> DataFrame:
    """Kafka rows of ``telemetry.raw`` → one row per distinct reading, in event time.

    The raw log is at-least-once (an MQTT redelivery, a device resend, a gateway restart can
    repeat a reading), so the scorer owns de-duplication: the first (device_id, seq) seen within
    ``dedup_window`` of event time is kept, the rest dropped (state in the RocksDB store).
    """
    from pyspark.sql import functions as F

    return (
        raw.select(F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r"))
        .where(F.col("r.device_id").isNotNull() & F.col("r.seq").isNotNull())
        .select("r.*")
        .withColumn("event_time", F.timestamp_millis("event_ms"))
        .withWatermark("event_time", dedup_window)
        .dropDuplicatesWithinWatermark(["device_id", "seq"])
    )


def alerts_frame(readings: DataFrame, detector: FixedBaseline) -> DataFrame:
    """Readings (:func:`readings_frame`) → alert rows (:data:`ALERT_SCHEMA`)."""
    from pyspark.sql import functions as F

    per_metric = readings.select(
        "device_id", "seq", "event_ms", "received_ms", F.explode("metrics").alias("metric", "value")
    )
    return per_metric.mapInArrow(partial(_score_batches, detector), ALERT_SCHEMA)


def start(spark: SparkSession, settings: Settings, detector: FixedBaseline) -> StreamingQuery:
    from pyspark.sql import functions as F

    kafka = settings.kafka.bootstrap_servers
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka)
        .option("subscribe", settings.topics.telemetry_raw)
        .option(
            "startingOffsets",
            resume_offsets(
                settings.checkpoint_root,
                "score",
                PLAN_VERSION,
                settings.topics.telemetry_raw,
                kafka,
            ),
        )
        .option("failOnDataLoss", "false")
        .load()
    )
    alerts = alerts_frame(readings_frame(raw, settings.score.dedup_window), detector)
    out = alerts.select(
        F.col("device_id").alias("key"),
        F.to_json(F.struct(*ALERT_COLUMNS)).alias("value"),
    )
    checkpoint = versioned(settings.checkpoint_root, "score", PLAN_VERSION)
    query = (
        out.writeStream.format("kafka")
        .queryName("fleetwatch-score")
        .option("kafka.bootstrap.servers", kafka)
        .option("topic", settings.topics.alerts)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=settings.spark.trigger_interval)
        .start()
    )
    logger.info(
        "scoring %s -> %s (checkpoint %s)",
        settings.topics.telemetry_raw,
        settings.topics.alerts,
        checkpoint,
    )
    return query


def run(settings: Settings, stop: threading.Event) -> None:
    """Run until ``stop`` is set, then stop the query cleanly (the current batch completes)."""
    from fleetwatch.streaming.session import build_session

    detector = FixedBaseline(bands=dict(settings.score.baseline))
    spark = build_session(settings, "fleetwatch-score")
    try:
        query = start(spark, settings, detector)
        while query.isActive and not stop.is_set():
            if wait_for_query(query, 1):
                break
        if query.isActive:
            logger.info("stopping the scoring query")
            query.stop()
        if query.exception() is not None:
            raise ScoringError(f"scoring query failed: {query.exception()}")
    finally:
        spark.stop()
