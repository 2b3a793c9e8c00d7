"""The scorer: ``telemetry.raw`` ⋈ ``model.params`` → per-device scoring in event time →
``alerts``, ``device.state``, ``device.sessions`` and ``telemetry.late``.

The plan (PLAN_VERSION 14)::

    telemetry.raw (key = device id, value = JSON, timestamp = event time)
        ─ watermark(timestamp, score.allowed_lateness) ─ (device, value as text) ─────┐
                                                                                        union
    model.params (compacted, read from the earliest offset) ─parse─────────────────────┘
    (a fleet champion's record, key fleet:{scope}, is copied to every bucket)
        └─ groupBy(bucket = buckets.bucket_of(device_id, buckets.BUCKETS))
              .transformWithStateInPandas(BucketScorer, EventTime)
              └─ observe(the count rows' sums) ─ count rows dropped (batch_counts)
                   └─ (topic, key, value) rows ─▶ Kafka sink (the topic per row)

The union of the two streams into one stateful operator keyed by device is the stream-table
join: a device's parameters live in its state (``ValueState`` on the RocksDB store) and a new
version on ``model.params`` takes effect at the next reading, without a restart; every alert
carries the version it was scored with. Everything per device — the alert episodes, the
de-duplication of repeated readings, sessions, the latest state — is in that operator's state,
checkpointed with the Kafka offsets, so a restart (even after ``kill -9``) resumes from the
last committed micro-batch with the state of that batch: the ids and revisions it emits again
are the ones it emitted before. The per-device logic is pure Python in
:mod:`fleetwatch.streaming.scorer.device_step`.

The event-time column carrying the watermark is dropped before the operator, so Spark does
not drop late rows on its own: the operator sees them, writes them to ``telemetry.late`` with
the watermark they missed, and counts them (``late`` among each batch's observed counts,
:mod:`~fleetwatch.streaming.scorer.batch_counts`).

"""

from __future__ import annotations

import logging
import threading
from functools import partial
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from fleetwatch.contracts.identifiers import FLEET_KEY_PREFIX, QUARANTINE_KEY_PREFIX
from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import spark_options
from fleetwatch.runtime import serve_metrics
from fleetwatch.streaming import buckets
from fleetwatch.streaming.checkpoint_files import HadoopFiles
from fleetwatch.streaming.checkpoints import resume_offsets, versioned
from fleetwatch.streaming.kafka_io import kafka_stream
from fleetwatch.streaming.progress_metrics import progress_exported, progress_log
from fleetwatch.streaming.query_loop import stop_after_batch, watch
from fleetwatch.streaming.readiness import QueryReadiness
from fleetwatch.streaming.rules.job import JOB as RULES_JOB
from fleetwatch.streaming.rules.job import RulesRunner
from fleetwatch.streaming.scorer.batch_counts import ScorerMetrics, counted
from fleetwatch.streaming.scorer.errors import ScoringError
from fleetwatch.streaming.scorer.processor import OUTPUT_COLUMNS, device_scorer
from fleetwatch.streaming.spark_session import build_session

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

logger = logging.getLogger(__name__)

PLAN_VERSION = 14
"""Bump when the query's stateful plan changes (Spark cannot reuse the old checkpoint), or the
layout of its state (plan 10: the device state's fields by name,
:class:`~fleetwatch.streaming.scorer.device_state.DeviceScoringState`; plan 11: the level
detector's averages, ``level_averages``; plan 12: each reading's partition and offset in
the operator's input, dead letters and ``headers`` in its output, the quarantine fields; plan 13:
what the PCA member carries of its last readings, ``joint_surprise``; plan 14: the metrics held
since a move the fleet knows, ``familiar_moves``)."""
OUTPUT_SCHEMA = ", ".join(f"{name} STRING" for name in OUTPUT_COLUMNS)
"""``headers``: a dead letter's Kafka headers as JSON ``[[key, value], ...]`` (null on the
other records), made the Kafka sink's ``headers`` column by :func:`kafka_rows`."""
JOB = "score"
QUERY_NAME = f"fleetwatch-{JOB}"


def scorer_input(raw: DataFrame, params: DataFrame, lateness: str, lifts_topic: str) -> DataFrame:
    """Kafka rows of ``telemetry.raw`` and of ``model.params`` with ``lifts_topic``
    (:func:`params_stream`) → the operator's input: one row per reading with ``src = 'r'``, and
    one row per parameter record or quarantine lift with ``src = 'p'``, each with the
    ``bucket`` of its device. A fleet champion's record (``fleet:{scope}``,
    :mod:`fleetwatch.contracts.fleet`) goes to every bucket. A lift (``quarantine:{device}``)
    counts only from ``lifts_topic`` and goes to its device's bucket; nothing else counts from
    that topic, so writing lifts gives no way to write parameters.

    A reading reaches the operator as the gateway wrote it: the device id is the record's key,
    its event time the record's timestamp (the watermark's column), and the value the JSON
    text the operator parses and checks
    (:func:`~fleetwatch.streaming.scorer.readings.readings_by_device`; a value that is not a
    reading is skipped and counted there). The JVM does not parse the value: Spark's
    ``from_json`` was a quarter of the scorer JVM's CPU at 5,000 readings/s (plan 8, Java
    Flight Recorder), and the operator parsed the text again after ``to_json``.
    The operator's Python side pays per row and per column it is handed, so the reading stays
    one text column (plan 7: 10 array columns cost 38 ms per 2,300-row micro-batch, one text
    4 ms)."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    bucket = partial(buckets.bucket_of, buckets=buckets.BUCKETS)
    # Bytes that are not UTF-8 reach no Python worker (its Arrow conversion fails the whole
    # batch on them): such a key is made valid, and such a reading's text is null, which the
    # operator dead-letters (a null value, a tombstone, is left out here).
    key, value = F.col("key").cast("string"), F.col("value").cast("string")
    device = F.make_valid_utf8(key)
    text = F.when(F.is_valid_utf8(key) & F.is_valid_utf8(value), value)
    readings = (
        raw.where(key.isNotNull() & value.isNotNull())
        .select(
            device.alias("device_id"),
            text.alias("reading"),
            F.col("timestamp").alias("event_time"),
            "partition",
            "offset",
        )
        .withWatermark("event_time", lateness)
        .select(
            "device_id",
            bucket(F.col("device_id")).alias("bucket"),
            F.lit("r").alias("src"),
            "reading",
            F.lit(None).cast("string").alias("params"),
            "partition",
            "offset",
        )
    )
    every_bucket = F.sequence(F.lit(0), F.lit(buckets.BUCKETS - 1))
    is_lift = device.startswith(QUARANTINE_KEY_PREFIX)
    lifted = device.substr(F.lit(len(QUARANTINE_KEY_PREFIX) + 1), F.length(device))
    updates = (
        params.where(is_lift == (F.col("topic") == F.lit(lifts_topic)))
        .select(
            device.alias("device_id"),
            F.explode(
                F.when(device.startswith(FLEET_KEY_PREFIX), every_bucket)
                .when(is_lift, F.array(bucket(lifted)))
                .otherwise(F.array(bucket(device)))
            ).alias("bucket"),
            F.lit("p").alias("src"),
            F.lit(None).cast("string").alias("reading"),
            F.make_valid_utf8(value).alias("params"),
            "partition",
            "offset",
        )
        .where(F.col("device_id").isNotNull())
    )
    return readings.unionByName(updates)


def params_stream(spark: SparkSession, settings: Settings) -> DataFrame:
    """``model.params`` and the quarantine lifts, from their earliest offsets, as one stream
    (one source: a lift's topic is in its rows' ``topic``)."""
    topics = settings.topics
    return kafka_stream(spark, settings, f"{topics.model_params},{topics.quarantine_lifts}")


def scored_frame(inputs: DataFrame, settings: Settings) -> DataFrame:
    """The operator's input (:func:`scorer_input`) → output rows (:data:`OUTPUT_SCHEMA`), the
    micro-batch's counts summed into its progress report
    (:func:`~fleetwatch.streaming.scorer.batch_counts.counted`)."""
    return counted(
        inputs.groupBy("bucket").transformWithStateInPandas(
            statefulProcessor=device_scorer(settings),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="EventTime",
        )
    )


def kafka_rows(out: DataFrame) -> DataFrame:
    """The operator's output (:data:`OUTPUT_SCHEMA`) → the Kafka sink's columns, ``headers``
    as Kafka wants them (parsed in the JVM only where the operator set them: dead letters)."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    pairs = F.from_json(F.col("headers"), "array<array<string>>")
    headers = F.transform(
        pairs, lambda h: F.struct(h[0].alias("key"), h[1].cast("binary").alias("value"))
    )
    return out.select("topic", "key", "value", headers.alias("headers"))


CODE_GENERATION_OFF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""The SQL confs of :attr:`~fleetwatch.contracts.settings.ScoreSettings.code_generation` off."""


def query_confs(settings: Settings) -> dict[str, str]:
    """The SQL confs the scoring query starts with, beyond the session's."""
    # one task for the stateful step (score.shuffle_partitions): its state set up once a batch
    confs = {"spark.sql.shuffle.partitions": str(settings.score.shuffle_partitions)}
    return confs if settings.score.code_generation else confs | CODE_GENERATION_OFF


def start(spark: SparkSession, settings: Settings) -> StreamingQuery:
    for key, value in query_confs(settings).items():
        spark.conf.set(key, value)  # the query takes the session's confs as it starts
    topics = settings.topics
    raw = kafka_stream(
        spark,
        settings,
        topics.telemetry_raw,
        starting=resume_offsets(
            settings.checkpoint_root,
            "score",
            PLAN_VERSION,
            topics.telemetry_raw,
            settings.kafka,
            HadoopFiles(spark),
        ),
        max_offsets_per_trigger=settings.score.max_offsets_per_trigger,
    )
    params = params_stream(spark, settings)
    lateness = settings.score.allowed_lateness
    out = scored_frame(scorer_input(raw, params, lateness, topics.quarantine_lifts), settings)
    checkpoint = versioned(settings.checkpoint_root, "score", PLAN_VERSION)
    query = (
        kafka_rows(out)
        .writeStream.format("kafka")
        .queryName(QUERY_NAME)
        .options(**spark_options(settings.kafka))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=settings.score.trigger_interval)
        .start()
    )
    logger.info(
        "scoring %s with %s -> %s, %s, %s, %s (checkpoint %s)",
        topics.telemetry_raw,
        topics.model_params,
        topics.alerts,
        topics.device_state,
        topics.device_sessions,
        topics.telemetry_late,
        checkpoint,
    )
    return query


def run(settings: Settings, stop: threading.Event) -> None:
    """Run until ``stop`` is set, then stop the query cleanly (the current batch completes),
    with the operators' rules judged beside it (:mod:`fleetwatch.streaming.rules.job`).
    Meanwhile its metrics, health and readiness (:mod:`~fleetwatch.streaming.readiness`) are
    served on ``score.metrics_port`` (unless 0)."""
    registry = CollectorRegistry()
    port = settings.score.metrics_port
    ready = QueryReadiness()
    with serve_metrics(registry, port, "FLEETWATCH_SCORE__METRICS_PORT", ready):
        spark = build_session(settings, QUERY_NAME)
        try:
            counts = ScorerMetrics(registry).record if port else None
            log = progress_log(settings.spark.progress_log)
            with progress_exported(
                spark, JOB, registry if port else None, (counts, log), beside=(RULES_JOB,)
            ):
                query = start(spark, settings)
                ready.follow(query)
                rules = RulesRunner(settings)
                rules.start(spark)
                watch(query, stop)
                rules.stop()
                if query.isActive:
                    logger.info("stopping the scoring query after its current micro-batch")
                    if not stop_after_batch(query):
                        logger.warning(
                            "micro-batch not done in 60 s; it runs again on the next start"
                        )
            if query.exception() is not None:
                raise ScoringError(f"scoring query failed: {query.exception()}")
        finally:
            spark.stop()
