"""Spark's Kafka reader, configured once for every job: a stream from a topic (from resumed
offsets, the earliest, or a timestamp; optionally capped per micro-batch) and a topic read
once as a table. The cluster, its login and TLS come from the settings
(:func:`fleetwatch.kafka_config.spark_options`), for the readers here and every job's sink."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import spark_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def kafka_stream(
    spark: SparkSession,
    settings: Settings,
    topic: str,
    *,
    starting: str = "earliest",
    from_timestamp_ms: int | None = None,
    max_offsets_per_trigger: int | None = None,
    options: dict[str, str] | None = None,
) -> DataFrame:
    """A streaming read of ``topic``: from ``starting`` (``earliest``, ``latest`` or Spark's
    JSON of offsets per partition), or from the first record at or after ``from_timestamp_ms``
    when given. A record deleted by retention before it is read is skipped, not a failure.
    ``options``: further Kafka source options (a bench's fetch sizes), set last."""
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_options(settings.kafka))
        .option("subscribe", topic)
        .option("failOnDataLoss", "false")
    )
    if from_timestamp_ms is not None:
        reader = reader.option("startingTimestamp", str(from_timestamp_ms)).option(
            "startingOffsetsByTimestampStrategy", "latest"
        )
    else:
        reader = reader.option("startingOffsets", starting)
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load()


def kafka_table(spark: SparkSession, settings: Settings, topic: str) -> DataFrame:
    """``topic`` from its earliest to its latest offset, read once as a batch."""
    return (
        spark.read.format("kafka")
        .options(**spark_options(settings.kafka))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
