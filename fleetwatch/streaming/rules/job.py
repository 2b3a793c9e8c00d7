"""The rules query: operators' rules judged on ``telemetry.raw`` beside the scorer's models, in
the scorer's process and Spark session, alerts to ``alerts``.

The plan (PLAN_VERSION 1)::

    telemetry.raw ─ from_json (the metrics the rules name) ─ watermark(score.allowed_lateness)
        └─ the values the rules' SQL computes per reading, each once (projection.rule_atoms)
             └─ groupBy(bucket).transformWithStateInPandas(BucketJudge, EventTime)
                  └─ alert events ─▶ Kafka sink (alerts)

The rules come from the compacted ``rules`` topic
(:class:`~fleetwatch.streaming.rules.follow.RuleFollower`).
Spark fixes a query's expressions when it starts, so a change of the rules restarts the query
with the new SQL, from its checkpoint, once its current micro-batch is done: the stateful
operator and its state schema do not depend on the rules (the projection's output type is the
same whatever they are), so each device's windows and open episodes carry over, and only the
rules that changed start afresh (:mod:`~fleetwatch.streaming.rules.step`). The scorer's own
query does not stop. A first start reads ``telemetry.raw`` from the longest window plus the
allowed lateness ago, so every window is whole from the start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from fleetwatch.contracts import clock
from fleetwatch.contracts.rules import RuleRecord, duration_ms
from fleetwatch.contracts.settings import Settings
from fleetwatch.kafka_config import spark_options
from fleetwatch.streaming import buckets
from fleetwatch.streaming.checkpoints import versioned
from fleetwatch.streaming.kafka_io import kafka_stream
from fleetwatch.streaming.progress_metrics import following
from fleetwatch.streaming.query_loop import stop_after_batch
from fleetwatch.streaming.rules.compiled import CompiledRule
from fleetwatch.streaming.rules.conditions import RuleError, compile_rule, rules_session
from fleetwatch.streaming.rules.fast import start_fast
from fleetwatch.streaming.rules.follow import RuleFollower
from fleetwatch.streaming.rules.processor import OUTPUT_SCHEMA, rule_judge
from fleetwatch.streaming.rules.projection import atoms_of, metrics_of, raw_readings, rule_atoms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

logger = logging.getLogger(__name__)

PLAN_VERSION = 1
JOB = "rules"
QUERY_NAME = f"fleetwatch-{JOB}"
SETTLE_S = 0.2
"""After a change, the follower reads on until the topic has been quiet this long, so that a
burst of edits (``rules apply`` of a file) restarts the query once."""
RETRY_S = 5.0
"""A query that failed is started again after this long."""


def compiled(spark: SparkSession, records: Iterable[RuleRecord]) -> list[CompiledRule]:
    """The rules as the query runs them; a rule Spark cannot compile (the API checks every rule
    before it publishes one, so a record from elsewhere) is logged and left out."""
    out = []
    for record in sorted(records, key=lambda r: r.id):
        try:
            out.append(compile_rule(spark, record))
        except RuleError as exc:
            logger.error("rule %s v%d left out: %s", record.id, record.version, exc.message)
    return out


def start(spark: SparkSession, settings: Settings, rules: list[CompiledRule]) -> StreamingQuery:
    """The rules query over ``rules`` (at least one)."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    topics = settings.topics
    longest = max((r.window_ms[0] for r in rules if r.window_ms is not None), default=0)
    lateness = settings.score.allowed_lateness
    back_ms = longest + duration_ms(lateness)
    raw = kafka_stream(
        spark,
        settings,
        topics.telemetry_raw,
        from_timestamp_ms=clock.now_ms() - back_ms,
        max_offsets_per_trigger=settings.score.max_offsets_per_trigger,
    )
    readings = raw_readings(raw, metrics_of(rules)).withWatermark("event_time", lateness)
    bucket = partial(buckets.bucket_of, buckets=buckets.BUCKETS)
    values = rule_atoms(readings, atoms_of(rules)).withColumn("bucket", bucket(F.col("device_id")))
    judged = values.groupBy("bucket").transformWithStateInPandas(
        statefulProcessor=rule_judge(rules, topics.alerts, settings.score.expire_after_s * 1000),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="EventTime",
    )
    checkpoint = versioned(settings.checkpoint_root, "rules", PLAN_VERSION)
    query = (
        judged.writeStream.format("kafka")
        .queryName(QUERY_NAME)
        .options(**spark_options(settings.kafka))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=settings.score.trigger_interval)
        .start()
    )
    logger.info(
        "judging %d rules (%s) on %s -> %s (checkpoint %s)",
        len(rules),
        ", ".join(f"{r.id} v{r.version}" for r in rules),
        topics.telemetry_raw,
        topics.alerts,
        checkpoint,
    )
    return query


class RulesRunner:
    """Follows the ``rules`` topic and keeps the rules query running on the current rules, in a
    thread of the scorer's process (:meth:`start`, :meth:`stop`)."""

    def __init__(
        self, settings: Settings, progress: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        """``progress``: handed each progress report of the rules query (its metrics)."""
        self.settings = settings
        self.progress = progress
        self.query: StreamingQuery | None = None
        self.fast: StreamingQuery | None = None
        """The real-time query of the rules without a window
        (:mod:`~fleetwatch.streaming.rules.fast`)."""
        self.applied: dict[str, int] = {}
        """Rule id → the version the running query judges."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, spark: SparkSession) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(rules_session(spark),), name="rules", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 90.0) -> None:
        """Stop following, and stop the query once its current micro-batch is done."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _follower(self) -> RuleFollower | None:
        """A follower of the ``rules`` topic, once the topic is there (a stack made before
        rules existed gets it from ``fleetwatch topics create``)."""
        while not self._stop.is_set():
            try:
                return RuleFollower(self.settings.kafka, self.settings.topics.rules)
            except LookupError as exc:
                logger.error("no rules are judged: %s", exc)
                self._stop.wait(RETRY_S * 6)
        return None

    def _run(self, spark: SparkSession) -> None:
        follower = self._follower()
        if follower is None:
            return
        if self.progress is None:
            self._follow(spark, follower)
            return
        with following(spark, QUERY_NAME, self.progress):
            self._follow(spark, follower)

    def _follow(self, spark: SparkSession, follower: RuleFollower) -> None:
        failed_at: float | None = None
        try:
            while not self._stop.is_set():
                changed = follower.poll(0.5)
                while changed and follower.poll(SETTLE_S):
                    pass
                query = self.query
                if failed_at is None and query is not None and not query.isActive:
                    logger.error("the rules query failed: %s", query.exception())
                    failed_at = time.monotonic()
                retry = failed_at is not None and time.monotonic() - failed_at >= RETRY_S
                if changed or retry:
                    started = self._restart(spark, follower.rules.values())
                    failed_at = None if started else time.monotonic()
        finally:
            self._halt()
            follower.close()

    def _restart(self, spark: SparkSession, records: Iterable[RuleRecord]) -> bool:
        """The queries on ``records``; False (logged) when they could not start: the caller
        starts them again after :data:`RETRY_S`."""
        rules = compiled(spark, records)
        self._halt()
        self.applied = {r.id: r.version for r in rules}
        if not rules:
            logger.info("no rules to judge")
            return True
        try:
            self.query = start(spark, self.settings, rules)
            if self.settings.score.rules_fast_path:
                self.fast = start_fast(spark, self.settings, rules)
        except Exception:  # the scoring query goes on; the rules start again after RETRY_S
            logger.exception("the rules query could not start; trying again in %.0f s", RETRY_S)
            self._halt()
            return False
        return True

    def _halt(self) -> None:
        query, self.query = self.query, None
        if query is not None and query.isActive and not stop_after_batch(query):
            logger.warning("rules micro-batch not done in 60 s; it runs again on the next start")
        fast, self.fast = self.fast, None
        if fast is not None and fast.isActive:
            fast.stop()  # stateless: what it had not checkpointed it reads again
