"""simulator → Mosquitto → gateway → Kafka → Spark scorer → alerts → API, on the real stack."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from tests.integration.conftest import Isolated, fleetwatch
from tests.polling import wait_until

DEVICES, ROUNDS, SPIKE_AT = 3, 20, 45  # 60 readings; the 45th is the only spike


def test_one_extreme_reading_gives_exactly_one_alert_through_the_api(
    isolated: Isolated, tmp_path: Path
) -> None:
    raw, alerts_topic = isolated.topics.telemetry_raw, isolated.topics.alerts
    checkpoint = versioned(tmp_path / "checkpoints", "score", PLAN_VERSION)
    isolated.start("gateway", "gateway")
    isolated.start("score", "score")
    isolated.start("api", "api", "--anonymous-read")  # reads without a key, on loopback
    api = f"http://127.0.0.1:{isolated.api_port}"

    def api_up() -> bool:
        try:
            return httpx.get(f"{api}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(api_up, 60, "the API to answer")
    wait_until(lambda: (checkpoint / "metadata").exists(), 120, "the scoring query to start")

    truth = tmp_path / "truth.jsonl"
    sim = fleetwatch(
        "sim",
        "run",
        "--devices",
        str(DEVICES),
        "--rate",
        "10",
        "--count",
        str(ROUNDS),
        "--spike-every",
        str(SPIKE_AT),
        "--prefix",
        f"dev{isolated.tag}",
        "--truth",
        str(truth),
        env=isolated.env,
    )
    assert sim.returncode == 0, sim.stderr
    spikes = [json.loads(line) for line in truth.read_text().splitlines()]
    assert len(spikes) == 1

    # every reading reached Kafka, and the scorer committed a batch covering all of them
    readings = DEVICES * ROUNDS
    wait_until(
        lambda: sum(isolated.end_offsets(raw).values()) == readings,
        60,
        f"{readings} readings in {raw}",
    )
    ends = isolated.end_offsets(raw)
    wait_until(
        lambda: committed_offsets(checkpoint, raw) == ends,
        120,
        "the scorer to commit every reading",
    )
    # one episode: opened by the spike (and resolved by the calm readings after it, if any)
    produced = sum(isolated.end_offsets(alerts_topic).values())
    events = [json.loads(r.value) for r in isolated.read_all(alerts_topic, produced)]
    assert [e["status"] for e in events][:1] == ["open"], f"normal readings alerted: {events}"
    assert {e["status"] for e in events} <= {"open", "resolve"}
    assert len({e["alert_id"] for e in events}) == 1
    opened = events[0]
    assert (opened["device_id"], opened["seq"]) == (spikes[0]["device_id"], spikes[0]["seq"])
    assert opened["params_version"] == 0  # no learned parameters: the fixed baseline

    body = wait_until(
        lambda: (b := httpx.get(f"{api}/alerts").json())["count"] >= 1 and b,
        60,
        "the API to catch up",
    )
    assert body["count"] == 1
    alert = body["data"][0]
    assert alert["alert_id"] == opened["alert_id"]
    device = httpx.get(f"{api}/devices/{alert['device_id']}").json()
    assert device["alert_count"] == 1
    assert device["last_alert"]["alert_id"] == alert["alert_id"]

    # a device resends a reading (same device, same seq): the log keeps both, one episode
    # opens for it, once
    now = time.time_ns() // 1_000_000
    resent = reading_payload(ROUNDS, now, now, {"temperature": 60.0})
    device_id = alert["device_id"]
    with isolated.mqtt_client() as client:
        for _ in range(2):
            client.publish(
                f"{isolated.mqtt_root}/{device_id}/telemetry", resent, qos=1
            ).wait_for_publish(10)
    wait_until(
        lambda: sum(isolated.end_offsets(raw).values()) == readings + 2,
        60,
        "both copies in the log",
    )
    ends = isolated.end_offsets(raw)
    wait_until(lambda: committed_offsets(checkpoint, raw) == ends, 120, "the scorer to take both")
    total = sum(isolated.end_offsets(alerts_topic).values())
    after = [json.loads(r.value) for r in isolated.read_all(alerts_topic, total)][len(events) :]
    assert [(e["status"], e["device_id"], e["seq"]) for e in after] == [("open", device_id, ROUNDS)]
    wait_until(
        lambda: httpx.get(f"{api}/alerts").json()["count"] >= 2, 60, "the new alert in the API"
    )
