"""What the scorer did in a micro-batch — readings scored, late, repeated, dead-lettered, alert
events by kind and severity, devices failing or quarantined — counted where it happens and
brought to the driver's metrics.

The scoring runs in Spark's Python workers; the metrics are served by the driver. The counts
travel in the query itself:

1. worker: the processor adds *count rows* to a bucket's output (:func:`count_rows`: role
   :data:`COUNT_ROLE`, key = the count's name, value = the number), one per count that is not
   zero, and one with the bucket's quarantined devices (:func:`quarantined`, zero included);
2. JVM: :func:`counted` collects them with ``DataFrame.observe`` (one aggregate: the list of
   the batch's count rows) and drops them before the sink. The list is in the micro-batch's
   progress report (``observedMetrics``);
3. driver: :func:`batch_sums` sums it per name of :data:`COUNT_NAMES` (the most for each
   bucket's quarantined devices), a fixed list, so the label sets stay bounded, and
   :meth:`ScorerMetrics.record` adds the sums to the counters and keeps each bucket's last
   quarantined count (a bucket reports it when it runs: a quarantine that times out shows
   when its bucket next has readings).

Both steps after the operator are stateless, so a checkpoint written before them resumes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as PromCounter

from fleetwatch.contracts.alerts import ALERT_KINDS, SEVERITIES
from fleetwatch.streaming.buckets import BUCKETS
from fleetwatch.streaming.scorer.bucket_step import BucketOutput, BucketState
from fleetwatch.streaming.scorer.output import Role

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COUNT_ROLE = "count"
OBSERVATION = "score_counts"
"""The name of the observed metrics in a progress report's ``observedMetrics``."""
COLLECTED = "counts"
"""The observed metric: the list of the batch's count rows as ``{"name", "n"}``."""

READING_COUNTS = (
    "scored",
    "late",
    "duplicates",
    "unreadable",
    "dead_letters",
    "failed",
    "held",
    "forgotten",
)
"""Readings scored, behind the watermark (to ``telemetry.late``), repeated (dropped); raw
records that are not readings, records sent to ``telemetry.deadletter`` (those among them);
device micro-batches that failed, readings of quarantined devices (dead-lettered unscored),
devices that left the state after ``score.expire_after_s`` of silence."""
QUARANTINED = "quarantined:"
"""The count of a bucket's quarantined devices: ``quarantined:{bucket}``."""
ALERT_EVENTS = ("open", "resolve", "withdraw")
"""The alert events counted (an ``update`` is neither a new alert nor its end)."""


def alert_count_name(event: str, kind: str, severity: str) -> str:
    return f"alert:{event}:{kind}:{severity}"


SUMMED: tuple[str, ...] = (
    *READING_COUNTS,
    *(alert_count_name(e, k, s) for e in ALERT_EVENTS for k in ALERT_KINDS for s in SEVERITIES),
)
LATEST: tuple[str, ...] = tuple(f"{QUARANTINED}{b}" for b in range(BUCKETS))
COUNT_NAMES: tuple[str, ...] = (*SUMMED, *LATEST)


_NAMES = frozenset(COUNT_NAMES)


def bucket_counts(out: BucketOutput, unreadable: int = 0) -> dict[str, int]:
    """A bucket's micro-batch counted (the names of :data:`SUMMED` that are not zero);
    ``unreadable``: raw records that are not readings, dead-lettered besides ``out.dead``."""
    counts: Counter[str] = Counter(
        scored=out.scored,
        late=out.late,
        duplicates=out.duplicates,
        unreadable=unreadable,
        dead_letters=unreadable + len(out.dead),
        failed=out.failed,
        held=out.held,
        forgotten=out.forgotten,
    )
    for _, role, value in out.records:
        if role != Role.ALERTS:
            continue
        alert = json.loads(value)
        event = str(alert.get("status"))
        if event not in ALERT_EVENTS:
            continue
        kind = str(alert.get("detector"))
        kind = kind if kind in ALERT_KINDS else "other"
        counts[alert_count_name(event, kind, str(alert.get("severity")))] += 1
    return {name: n for name, n in counts.items() if n and name in _NAMES}


def quarantined(bucket_id: int, bucket: BucketState, now_ms: int) -> dict[str, int]:
    """The count of the bucket's devices quarantined at ``now_ms``."""
    held = sum(1 for until in bucket["devices"].quarantined_until().values() if until > now_ms)
    return {f"{QUARANTINED}{bucket_id}": held}


def count_rows(counts: Mapping[str, int]) -> dict[str, list[Any]]:
    """The count rows of the operator's output (``topic, key, value, role, headers``)."""
    return {
        "topic": [None] * len(counts),
        "key": list(counts),
        "value": [str(n) for n in counts.values()],
        "role": [COUNT_ROLE] * len(counts),
        "headers": [None] * len(counts),
    }


def counted(scored: DataFrame) -> DataFrame:
    """The operator's output with its count rows collected into the progress report and
    dropped: what goes on is only rows for a topic.

    One aggregate, the list of the batch's count rows (``name``, ``n``), which the driver
    sums (:meth:`ScorerMetrics.record`): a ``sum`` per name would have every output row of
    every micro-batch evaluate a condition per name in the JVM."""
    # lazy: pyspark is imported only where Spark runs
    from pyspark.sql import functions as F

    is_count = F.col("role") == COUNT_ROLE
    entry = F.struct(F.col("key").alias("name"), F.col("value").cast("long").alias("n"))
    return scored.observe(
        OBSERVATION, F.collect_list(F.when(is_count, entry)).alias(COLLECTED)
    ).where(~is_count)


def batch_sums(observed: Mapping[str, Any]) -> dict[str, int]:
    """A progress report's collected count rows (``observedMetrics[OBSERVATION]``) → each
    count of :data:`COUNT_NAMES` in the batch: summed, a bucket's quarantined devices the
    most it reported. Names outside the list are left out (the label sets stay bounded)."""
    sums: dict[str, int] = {}
    for entry in observed.get(COLLECTED) or ():
        name, n = entry.get("name"), _count(entry.get("n"))
        if name not in _NAMES:
            continue
        if name.startswith(QUARANTINED):
            sums[name] = max(sums.get(name, 0), n)
        else:
            sums[name] = sums.get(name, 0) + n
    return sums


class ScorerMetrics:
    """The scorer's metrics (``fleetwatch_score_*``), from each report's observed sums."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, doc: str) -> PromCounter:
            return PromCounter(f"fleetwatch_score_{name}", doc, registry=registry)

        self.readings = {
            "scored": counter("readings_scored", "Readings scored"),
            "late": counter(
                "late_readings",
                "Readings behind the watermark: written to the late topic, not scored",
            ),
            "duplicates": counter(
                "duplicate_readings",
                "Repeated readings (same device, seq and device time within the lateness), dropped",
            ),
            "unreadable": counter(
                "unreadable_records",
                "Records of the raw topic that are not readings (dead-lettered)",
            ),
            "dead_letters": counter(
                "dead_letters",
                "Records the scorer sent to the dead-letter topic (not readings, failed "
                "batches, quarantined devices, metric names beyond the limit)",
            ),
            "failed": counter(
                "failed_device_batches",
                "A device's micro-batches that failed (its state kept as before, its records "
                "dead-lettered)",
            ),
            "held": counter(
                "quarantined_readings",
                "Readings of quarantined devices, dead-lettered unscored",
            ),
            "forgotten": counter(
                "forgotten_devices",
                "Devices that left the scorer's state after score.expire_after_s of silence",
            ),
        }
        self.alerts = PromCounter(
            "fleetwatch_score_alert_events",
            "Alert events by event (open, resolve, withdraw), detector kind and severity",
            ["event", "kind", "severity"],
            registry=registry,
        )
        for event in ALERT_EVENTS:  # every label set from 0: a rate needs a sample before the
            for kind in ALERT_KINDS:  # first alert, or a batch's alerts are born at their value
                for severity in SEVERITIES:
                    self.alerts.labels(event, kind, severity)
        self._quarantined: dict[str, int] = {}
        Gauge(
            "fleetwatch_score_quarantined_devices",
            "Devices quarantined, as of the last micro-batch of each bucket",
            registry=registry,
        ).set_function(lambda: sum(self._quarantined.values()))

    def record(self, progress: Mapping[str, Any]) -> None:
        """Add the counts of a progress report (its ``observedMetrics``), if it has them."""
        sums = batch_sums((progress.get("observedMetrics") or {}).get(OBSERVATION) or {})
        for name, counter in self.readings.items():
            if n := sums.get(name):
                counter.inc(n)
        for name, n in sums.items():
            if name.startswith("alert:") and n:
                _, event, kind, severity = name.split(":")
                self.alerts.labels(event, kind, severity).inc(n)
            elif name.startswith(QUARANTINED):
                self._quarantined[name] = n


def _count(value: Any) -> int:
    """A count of the report (a non-negative integer, else 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))
