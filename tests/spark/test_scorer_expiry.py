"""The scorer's Spark plan forgets a device silent for ``score.expire_after_s`` of event time
with a tombstone on each of its compacted topics: ``device.state`` and ``device.sessions``
(key = the device id, no value), after the records that said it fell silent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.spark.test_scorer_plan import SETTINGS, T0, TOPICS, Steps, reading, spark

__all__ = ["spark"]  # the module's Spark session, shared with the plan's tests

EXPIRE_MS = SETTINGS.score.expire_after_s * 1000


def test_a_device_silent_for_expire_after_is_forgotten_with_tombstones(
    spark: Any, tmp_path: Path
) -> None:
    steps = Steps(spark, tmp_path)
    t = T0 + 600_000
    first = steps.run([reading("quiet", i, t + i * 1000, temperature=21.0) for i in range(3)])
    assert {r["key"] for r in first if r["topic"] == TOPICS.device_state} == {"quiet"}

    # another device reports past quiet's expiry: the watermark passes quiet's session gap
    # (it falls silent), then its expiry (it is forgotten), each on a timer of its own
    rows: list[dict[str, Any]] = []
    later = t + EXPIRE_MS + 60_000
    for n in range(3):
        rows += steps.run([reading("busy", n, later + n * 120_000, temperature=21.0)])
        if any(r["value"] is None for r in rows):
            break
    of_quiet = [r for r in rows if r["key"] == "quiet" or "quiet" in (r["value"] or "")]
    tombstones = [(r["topic"], r["key"]) for r in of_quiet if r["value"] is None]
    assert sorted(tombstones) == sorted(
        [(TOPICS.device_state, "quiet"), (TOPICS.device_sessions, "quiet")]
    )
    said = [json.loads(r["value"]) for r in of_quiet if r["value"] is not None]
    assert [s["status"] for s in said if "status" in s] == ["silent"]  # before it went
    assert [s["end_reason"] for s in said if "end_reason" in s] == ["gap"]
    assert of_quiet[-1]["value"] is None  # nothing of it after its tombstones
    assert all(r["value"] is not None for r in rows if r["key"] == "busy")
