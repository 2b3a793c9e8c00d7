"""The fast path of rules without a window: a Spark Real-Time Mode query that writes an early
``open`` to ``alerts.fast`` for every reading on which such a rule holds, within milliseconds
of the reading reaching ``telemetry.raw``.

Real-Time Mode runs one long-lived task per Kafka partition and takes projections and filters,
not Python's stateful operators, so this query keeps no state: it cannot tell the first
firing reading of an episode from the next ones. Each early event names the episode the
stateful rules query (:mod:`~fleetwatch.streaming.rules.job`) opens when that reading is the
first, with the same id (:func:`~fleetwatch.contracts.rules.rule_alert_id`, SHA-256 in both);
the API (its materialiser) keeps an early event only when no episode of the rule is open on
the device, and the stateful path's events then carry the episode on. The plan is::

    telemetry.raw ─ from_json ─ the rules' loosest bound (loosest) ─ each rule's SQL
        (projection.rule_values)
        └─ explode the rules that fire ─ alert JSON ─▶ Kafka sink (alerts.fast), realTime
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fleetwatch.contracts import clock
from fleetwatch.contracts.alerts import RULE_KIND
from fleetwatch.contracts.rules import duration_ms
from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import spark_options
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.streaming.checkpoints import versioned
from fleetwatch.streaming.kafka_io import kafka_stream
from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.loosest import loosest
from fleetwatch.streaming.rules.projection import metrics_of, raw_readings, rule_values

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

logger = logging.getLogger(__name__)

PLAN_VERSION = 1
QUERY_NAME = "fleetwatch-rules-fast"
CHECKPOINT_EVERY = "5 minutes"
"""Real-Time Mode's checkpoint interval, Spark's default: not a latency (readings are judged as
they arrive), but each interval ends a batch, which is checkpointed before the next is planned
and scheduled, and readings arriving meanwhile wait for it (some 400 ms under load). A restart
reads up to this much of ``telemetry.raw`` again: its early opens the API holds already (same
ids) and drops, and a rule's new version judges only readings received after it
(:attr:`~fleetwatch.streaming.rules.compiled.CompiledRule.since_ms`)."""


def early_alerts(values: DataFrame, rules: list[CompiledRule]) -> DataFrame:
    """Rows of :func:`~fleetwatch.streaming.rules.projection.rule_values` → ``key`` (the
    device) and ``value`` (an :class:`~fleetwatch.contracts.alerts.Alert` ``open`` as JSON)
    for each rule that holds on the reading."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    fired = values.select(
        "device_id",
        "seq",
        "event_ms",
        "received_ms",
        F.explode(F.filter("rules", lambda r: r["fired"])).alias("r"),
    )

    def per_rule(pick: str) -> Column:
        """The firing rule's ``pick`` (a map literal looked up by id: flat however many)."""
        pairs = [F.lit(x) for rule in rules for x in (rule.id, str(getattr(rule, pick)))]
        return F.element_at(F.create_map(*pairs), F.col("r.id"))

    metric = per_rule("metric")
    start = F.col("event_ms")
    key = F.concat_ws(
        "\x1f", F.col("device_id"), metric, F.concat(F.lit("rule:"), F.col("r.id")), start
    )
    alert_id = F.substring(F.sha2(key, 256), 1, 24)
    version = per_rule("version").cast("int")
    alert = F.struct(
        alert_id.alias("alert_id"),
        F.col("device_id").alias("device_id"),
        metric.alias("metric"),
        F.lit("open").alias("status"),
        F.lit(RULE_KIND).alias("detector"),
        F.lit(0).alias("params_version"),
        F.col("seq").alias("seq"),
        start.alias("event_ms"),
        F.coalesce(F.col("received_ms"), start).alias("received_ms"),
        F.unix_millis(F.current_timestamp()).alias("detected_ms"),
        F.col("r.values")[0].alias("value"),
        F.lit(None).cast("double").alias("expected"),
        F.lit(None).cast("double").alias("band"),
        F.lit(1.0).alias("score"),
        F.concat(F.lit("rule "), F.col("r.id"), F.lit(": "), per_rule("name")).alias("reason"),
        per_rule("severity").alias("severity"),
        start.alias("start_ms"),
        F.lit(0).alias("revision"),
        F.concat(alert_id, F.lit(".0")).alias("event_id"),
        F.col("r.id").alias("rule_id"),
        version.alias("rule_version"),
        F.lit(True).alias("early"),
    )
    value = F.to_json(alert, {"ignoreNullFields": "false"})
    return fired.select(F.col("device_id").alias("key"), value.alias("value"))


def start_fast(
    spark: SparkSession, settings: Settings, rules: list[CompiledRule]
) -> StreamingQuery | None:
    """The real-time query over the rules without a window, or None when there are none or
    the session has too few task slots to hold one per partition beside the other queries."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    stateless = [r for r in rules if r.window_ms is None]
    if not stateless:
        return None
    # one task slot per partition of telemetry.raw, for as long as the query runs
    held = len(end_offsets(settings.kafka, settings.topics.telemetry_raw))
    needed = held + settings.spark.shuffle_partitions
    slots = spark.sparkContext.defaultParallelism
    if slots < needed:
        logger.warning(
            "no fast path for rules: it holds %d task slots for as long as it runs, and the "
            "session has %d (spark.master local[N] with N >= %d gives them)",
            held,
            slots,
            needed,
        )
        return None
    # a first start reads from as far back as the stateful query's watermark lets a reading be
    # (its episodes' first readings are then read by both); a restart, from the checkpoint
    back_ms = duration_ms(settings.score.allowed_lateness)
    raw = kafka_stream(
        spark, settings, settings.topics.telemetry_raw, from_timestamp_ms=clock.now_ms() - back_ms
    )
    readings = raw_readings(raw, metrics_of(stateless))
    bound = loosest(stateless)
    if bound is not None:  # most readings fire no rule: they skip the rules' expressions
        readings = readings.where(F.expr(bound))
    values = rule_values(readings, stateless)
    checkpoint = versioned(settings.checkpoint_root, "rules-fast", PLAN_VERSION)
    writer: Any = (  # pyspark's overloads of trigger() do not list realTime yet
        early_alerts(values, stateless)
        .writeStream.format("kafka")
        .queryName(QUERY_NAME)
        .options(**spark_options(settings.kafka))
        .option("topic", settings.topics.alerts_fast)
        .option("checkpointLocation", str(checkpoint))
        .outputMode("update")
    )
    query: StreamingQuery = writer.trigger(realTime=CHECKPOINT_EVERY).start()
    logger.info(
        "fast path for %d rules without a window -> %s", len(stateless), settings.topics.alerts_fast
    )
    return query
