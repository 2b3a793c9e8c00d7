"""Time one device cannot bend: a device whose clock jumps 50 minutes ahead, through the real
gateway and scorer, makes no other device's readings late and ends no other device's session.

The scorer's watermark is shared by every device: it follows the largest event time seen. The
gateway corrects each device's clock by a running median of its offsets, which lags a jump of
the device's clock by half its window; the readings in between would carry a corrected time
as far ahead. The gateway clamps them to their arrival (``accept.MAX_AHEAD_MS``), which is what
this test holds: without the clamp the honest device's next readings go to ``telemetry.late``
and its session ends (``gap``) when the watermark passes its silence timer.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.ingest.accept import MAX_AHEAD_MS
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from tests.integration.conftest import Isolated
from tests.integration.topic_reads import read, stable_end
from tests.polling import wait_until

JUMP_MS = 50 * 60_000
"""Within the gateway's 7-day clock-skew bound (accepted, not refused) and within the hour
ahead that Kafka's broker takes by default (``log.message.timestamp.after.max.ms``)."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_clock_jumping_ahead_makes_no_other_device_late(
    isolated: Isolated, tmp_path: Path
) -> None:
    lateness = pd.Timedelta(isolated.settings.score.allowed_lateness)
    assert lateness.total_seconds() * 1000 > MAX_AHEAD_MS, "the clamp lies within the lateness"
    raw = isolated.topics.telemetry_raw
    checkpoint = versioned(tmp_path / "checkpoints", "score", PLAN_VERSION)
    isolated.start("gateway", "gateway")
    isolated.start("score", "score")
    wait_until(lambda: (checkpoint / "metadata").exists(), 120, "the scoring query to start")
    honest, jumper = f"h{isolated.tag}", f"j{isolated.tag}"
    seqs = {honest: 0, jumper: 0}

    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)
        # the gateway's probes, however many it took, are in the log once it has settled;
        # from here on the log holds exactly them and the readings published below
        probes = sum(stable_end(isolated, raw, 60).values())

        def publish(device: str, skew_ms: int = 0) -> None:
            seqs[device] += 1
            at = now_ms() + skew_ms
            body = reading_payload(seqs[device], at, at, {"temperature": 21.0})
            client.publish(
                f"{isolated.mqtt_root}/{device}/telemetry", body, qos=1
            ).wait_for_publish(10)

        def scored() -> None:
            """Wait until every reading published is in the log and the scorer has committed a
            batch past all of them (its watermark for the next batch then includes them)."""
            expected = probes + sum(seqs.values())

            def all_in() -> dict[int, int] | None:
                ends = isolated.end_offsets(raw)
                return ends if sum(ends.values()) == expected else None

            ends = wait_until(all_in, 60, f"{expected} records in {raw}", interval_s=0.1)
            wait_until(
                lambda: committed_offsets(checkpoint, raw) == ends, 120, "the scorer to commit"
            )

        for _ in range(3):  # both devices on time: the jumper's offset estimate is ~0
            publish(honest)
            publish(jumper)
        scored()
        jumped_at = now_ms()
        for _ in range(5):  # its clock jumps: the median still holds the old offset
            publish(jumper, JUMP_MS)
        scored()
        for _ in range(3):  # the honest device goes on, batch after batch
            publish(honest)
            scored()

    late = [json.loads(r.value) for r in read(isolated, isolated.topics.telemetry_late)]
    assert not [r for r in late if r["record"]["device_id"] == honest], late

    # a session ends on a timer, in a batch after the readings': once that topic has settled
    stable_end(isolated, isolated.topics.device_sessions)
    sessions = [json.loads(r.value) for r in read(isolated, isolated.topics.device_sessions)]
    mine = [s for s in sessions if s["device_id"] == honest]
    assert mine, "the honest device has a session"
    assert all(s["end_reason"] is None for s in mine), mine

    records = [json.loads(r.value) for r in read(isolated, raw) if r.key]
    jumps = [r for r in records if r["device_id"] == jumper and r["device_event_ms"] > jumped_at]
    assert len(jumps) == 5
    # never ahead of the gateway's clock: the first three clamped to arrival (the median of
    # the offsets still near 0), the rest corrected by the median once the jump is its majority
    assert all(r["event_ms"] <= r["received_ms"] + MAX_AHEAD_MS for r in jumps), jumps
    assert [r["event_ms"] == r["received_ms"] for r in jumps][:3] == [True] * 3, jumps
