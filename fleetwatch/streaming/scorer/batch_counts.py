"""What the scorer did in a micro-batch — readings scored, late, repeated, records skipped, alert
events by kind and severity — counted where it happens and brought to the driver's metrics.

The scoring runs in Spark's Python workers; the metrics are served by the driver. The counts
travel in the query itself:

1. worker: the processor adds *count rows* to a bucket's output (:func:`count_rows`: role
   :data:`COUNT_ROLE`, key = the count's name, value = the number), one per count that is not
   zero;
2. JVM: :func:`counted` sums them with ``DataFrame.observe`` — one aggregate per name of
   :data:`COUNT_NAMES`, a fixed list, so the label sets stay bounded — and drops them before
   the sink. The sums are in the micro-batch's progress report (``observedMetrics``);
3. driver: :meth:`ScorerMetrics.record` adds a report's sums to the counters.

Both steps after the operator are stateless, so a checkpoint written before them resumes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, get_args

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from fleetwatch.contracts.alerts import Severity
from fleetwatch.models.baseline import FixedBaseline
from fleetwatch.models.registry import KINDS
from fleetwatch.streaming.scorer.bucket_step import BucketOutput
from fleetwatch.streaming.scorer.device_moves import DEVICE_WIDE_KIND
from fleetwatch.streaming.scorer.device_step import Role
from fleetwatch.streaming.scorer.episodes import DROPOUT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

COUNT_ROLE = "count"
OBSERVATION = "score_counts"
"""The name of the observed metrics in a progress report's ``observedMetrics``."""

READING_COUNTS = ("scored", "late", "duplicates", "skipped")
"""Readings scored, behind the watermark (to ``telemetry.late``), repeated (dropped), and raw
records that are not readings (skipped)."""
ALERT_EVENTS = ("open", "resolve", "withdraw")
"""The alert events counted (an ``update`` is neither a new alert nor its end)."""
ALERT_KINDS = (
    *sorted(k for k in KINDS if k != "combined"),
    FixedBaseline.kind,
    DROPOUT,
    DEVICE_WIDE_KIND,
    "other",
)
"""Detector kinds an alert can name; another (a detector registered later) counts as ``other``
until it is added here."""
SEVERITIES: tuple[str, ...] = get_args(Severity)


def alert_count_name(event: str, kind: str, severity: str) -> str:
    return f"alert:{event}:{kind}:{severity}"


COUNT_NAMES: tuple[str, ...] = (
    *READING_COUNTS,
    *(alert_count_name(e, k, s) for e in ALERT_EVENTS for k in ALERT_KINDS for s in SEVERITIES),
)


_NAMES = frozenset(COUNT_NAMES)


def bucket_counts(out: BucketOutput, skipped: int = 0) -> dict[str, int]:
    """A bucket's micro-batch counted (the names of :data:`COUNT_NAMES` that are not zero)."""
    counts: Counter[str] = Counter(
        scored=out.scored, late=out.late, duplicates=out.duplicates, skipped=skipped
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
    """The operator's output with its count rows summed into the progress report and
    dropped: what goes on is only rows for a topic."""
    from pyspark.sql import functions as F

    is_count = F.col("role") == COUNT_ROLE
    number = F.col("value").cast("long")
    sums = [
        F.sum(F.when(is_count & (F.col("key") == name), number)).alias(name) for name in COUNT_NAMES
    ]
    return scored.observe(OBSERVATION, *sums).where(~is_count)


class ScorerMetrics:
    """The scorer's counters (``fleetwatch_score_*``), from each report's observed sums."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.readings = {
            "scored": PromCounter(
                "fleetwatch_score_readings_scored",
                "Readings scored",
                registry=registry,
            ),
            "late": PromCounter(
                "fleetwatch_score_late_readings",
                "Readings behind the watermark: written to the late topic, not scored",
                registry=registry,
            ),
            "duplicates": PromCounter(
                "fleetwatch_score_duplicate_readings",
                "Repeated readings (same device, seq and device time within the lateness), dropped",
                registry=registry,
            ),
            "skipped": PromCounter(
                "fleetwatch_score_skipped_records",
                "Records of the raw topic that are not readings (skipped)",
                registry=registry,
            ),
        }
        self.alerts = PromCounter(
            "fleetwatch_score_alert_events",
            "Alert events by event (open, resolve, withdraw), detector kind and severity",
            ["event", "kind", "severity"],
            registry=registry,
        )

    def record(self, progress: Mapping[str, Any]) -> None:
        """Add the counts of a progress report (its ``observedMetrics``), if it has them."""
        sums = (progress.get("observedMetrics") or {}).get(OBSERVATION) or {}
        for name, counter in self.readings.items():
            if n := _count(sums.get(name)):
                counter.inc(n)
        for name, value in sums.items():
            if name.startswith("alert:") and (n := _count(value)):
                _, event, kind, severity = name.split(":")
                self.alerts.labels(event, kind, severity).inc(n)


def _count(value: Any) -> int:
    """A sum of the report (``None`` when no row of the batch had that count)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))
