"""Reprocessing with the scorer's own plan: a range of ``telemetry.raw`` → alert events on a
topic of one's choosing (``fleetwatch replay``), and comparing two alert topics
(``fleetwatch replay diff``).

A replay is :func:`fleetwatch.streaming.scorer.job.scored_frame` over the log with
``trigger(availableNow=True)`` and a fresh checkpoint: the same per-device code, the parameters
on ``model.params`` (the versions there now), the same event-time rules. For the same
parameter versions and readings in event-time order, it emits the same events — same
``alert_id``, ``event_id``, status, revision and values — as the live scorer did; only
``detected_ms`` (wall-clock) differs. Where the live scorer saw readings late (behind its
watermark), a replay that reads them in one pass does not: that difference is the point of
the late topic, and :func:`diff` shows it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetwatch.contracts import wire
from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.contracts.topics import TopicSpec, topic_specs
from fleetwatch.kafka_config import spark_options
from fleetwatch.kafka_topic import read_to_end
from fleetwatch.stack.topics import ensure_topics
from fleetwatch.streaming.checkpoint_files import HadoopFiles, join
from fleetwatch.streaming.kafka_io import kafka_stream
from fleetwatch.streaming.scorer.job import params_stream, scored_frame, scorer_input
from fleetwatch.streaming.scorer.output import Role

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

IGNORED = ("detected_ms",)
"""Fields that are wall-clock, not a result: left out of comparisons."""


def create_output_topic(settings: Settings, name: str) -> None:
    """The output topic, with the ``alerts`` topic's configuration, unless it exists."""
    spec = next(s for s in topic_specs(settings.topics) if s.name == settings.topics.alerts)
    ensure_topics(
        settings.kafka,
        [TopicSpec(name, spec.key, spec.config)],
        settings.kafka.partitions,
        settings.kafka.replication_factor,
    )


def replay(
    spark: SparkSession,
    settings: Settings,
    output_topic: str,
    from_ms: int | None = None,
    to_ms: int | None = None,
) -> None:
    """Score readings with ``from_ms <= event_ms < to_ms`` (either end open) from the log and
    write the alert events to ``output_topic``; returns when the range is done."""
    from pyspark.sql import functions as F  # lazy: pyspark is imported only where Spark runs

    create_output_topic(settings, output_topic)
    raw = kafka_stream(spark, settings, settings.topics.telemetry_raw, from_timestamp_ms=from_ms)
    event_ms = F.get_json_object(F.col("value").cast("string"), "$.event_ms").cast("bigint")
    if from_ms is not None:
        raw = raw.where(event_ms >= F.lit(from_ms))
    if to_ms is not None:
        raw = raw.where(event_ms < F.lit(to_ms))
    params = params_stream(spark, settings)
    lateness, lifts = settings.score.allowed_lateness, settings.topics.quarantine_lifts
    out = scored_frame(scorer_input(raw, params, lateness, lifts), settings)
    checkpoint = join(settings.checkpoint_root, f"replay-{uuid.uuid4().hex[:12]}")
    query = (
        out.where(F.col("role") == Role.ALERTS.value)
        .select("key", "value")
        .writeStream.format("kafka")
        .queryName("fleetwatch-replay")
        .options(**spark_options(settings.kafka))
        .option("topic", output_topic)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the replay failed: {query.exception()}")
    progress = query.recentProgress  # Spark keeps the latest 100 reports only
    batches = progress[-1].batchId + 1 if progress else 0
    logger.info(
        "replayed %s and %s into %s in %d micro-batches; the last %d read %d records",
        settings.topics.telemetry_raw,
        settings.topics.model_params,
        output_topic,
        batches,
        len(progress),
        sum(p.numInputRows for p in progress),
    )
    HadoopFiles(spark).delete(checkpoint)


def read_events(kafka: KafkaSettings, topic: str, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Every alert event on ``topic`` up to its current end (records that are not JSON
    objects are skipped); :class:`LookupError` when there is no such topic."""
    group = f"fleetwatch-replay-diff-{uuid.uuid4().hex[:8]}"
    records = read_to_end(kafka, topic, group, timeout_s)
    return [event for _, value in records if (event := wire.loads_object(value)) is not None]


@dataclass
class Diff:
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    same: int = 0

    @property
    def identical(self) -> bool:
        return not (self.only_a or self.only_b or self.changed)


def _by_event(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        key = str(e.get("event_id") or f"{e.get('alert_id')}.{e.get('revision')}")
        out[key] = {k: v for k, v in e.items() if k not in IGNORED}
    return out


def diff(a: Iterable[dict[str, Any]], b: Iterable[dict[str, Any]]) -> Diff:
    """Events by ``event_id`` (repeats of one event — the log is at-least-once — count once)."""
    left, right = _by_event(a), _by_event(b)
    result = Diff()
    for key in sorted(left.keys() | right.keys()):
        if key not in right:
            result.only_a.append(key)
        elif key not in left:
            result.only_b.append(key)
        elif left[key] != right[key]:
            result.changed.append(key)
        else:
            result.same += 1
    return result
