"""A normal simulated fleet beside hostile devices, through the real stack (Mosquitto, the
gateway, Kafka, the Spark scorer and trainer, the API): every hostile input is accounted for —
dead-lettered with its reason by the gateway or the scorer, or scored harmlessly — no stage
stops (the trainer reads the same records), the API shows no device quarantined and each
hostile device absent (all its input refused) or with exactly what its valid readings give,
and the normal fleet's alerts are exactly those a replay of its own readings alone gives (by
event id).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.kafka_config import client_config
from fleetwatch.simulator import hostile
from fleetwatch.stack.topics import ensure_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from fleetwatch.streaming.scorer.replay import IGNORED
from fleetwatch.streaming.trainer.job import JOB as TRAIN_JOB
from fleetwatch.streaming.trainer.job import PLAN_VERSION as TRAIN_PLAN
from tests.integration.conftest import Isolated, Record
from tests.integration.topic_reads import read, stable_end
from tests.polling import wait_until

DEVICES, ROUNDS, SPIKE_AT = 3, 20, 45


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_a_hostile_fleet_changes_nothing_for_the_normal_one(
    isolated: Isolated, tmp_path: Path
) -> None:
    topics = isolated.topics
    checkpoint = versioned(tmp_path / "checkpoints", "score", PLAN_VERSION)
    isolated.start("gateway", "gateway")
    isolated.start("score", "score")
    isolated.start("api", "api", "--anonymous-read")
    # The trainer reads the same records; it publishes to a parameter topic of its own, so
    # that the scorer's parameters stay those a replay of the normal readings alone has.
    learning = versioned(tmp_path / "checkpoints", TRAIN_JOB, TRAIN_PLAN)
    learned = f"{topics.model_params}.trainer"
    ensure_topics(isolated.settings.kafka, [TopicSpec(learned, "device_id")], 1)
    trainer_env = {
        "FLEETWATCH_TOPICS__MODEL_PARAMS": learned,
        "FLEETWATCH_TRAIN__TRACKING": "false",
        "FLEETWATCH_TRAIN__TRIGGER_INTERVAL": "2 seconds",
    }
    isolated.start("train", "train", env=isolated.env | trainer_env)
    api = f"http://127.0.0.1:{isolated.api_port}"
    wait_until(lambda: (checkpoint / "metadata").exists(), 120, "the scoring query to start")
    hostile_prefix, normal_prefix = f"h{isolated.tag}-", f"dev{isolated.tag}"
    started = now_ms()

    sim = subprocess.Popen(
        [
            sys.executable, "-m", "fleetwatch.cli.main", "sim", "run",
            "--devices", str(DEVICES), "--rate", "10", "--count", str(ROUNDS),
            "--spike-every", str(SPIKE_AT), "--prefix", normal_prefix,
        ],
        env=isolated.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    sent = hostile.mqtt_messages(now_ms())
    with isolated.mqtt_client() as client:
        for name, payloads in sent.items():
            for payload in payloads:
                topic = f"{isolated.mqtt_root}/{hostile_prefix}{name}/telemetry"
                client.publish(topic, payload, qos=1).wait_for_publish(10)
        reserved = f"{isolated.mqtt_root}/fleet:{isolated.tag}/telemetry"
        client.publish(reserved, reading_payload(1, now_ms(), now_ms(), {"t": 1.0}), qos=1)
    direct = hostile.raw_records(now_ms())
    producer = Producer(client_config(isolated.settings.kafka))
    direct_key = f"{hostile_prefix}direct"
    for value in direct:
        producer.produce(topics.telemetry_raw, value, key=direct_key.encode())
    assert producer.flush(30) == 0
    _, err = sim.communicate(timeout=120)
    assert sim.returncode == 0, err

    ends = stable_end(isolated, topics.telemetry_raw)
    raw = read(isolated, topics.telemetry_raw)
    # the log is complete: the normal fleet's readings alone are replayed beside the checks
    replay, replayed = replay_alone(isolated, raw, normal_prefix, started)
    wait_until(
        lambda: committed_offsets(checkpoint, topics.telemetry_raw) == ends,
        180,
        "the scorer to commit every record",
    )
    wait_until(  # the trainer read the same hostile records, and goes on
        lambda: committed_offsets(learning, topics.telemetry_raw) == ends,
        180,
        "the trainer to commit every record",
    )
    taught = {r.key.decode() for r in read(isolated, learned) if r.key}
    assert any(k.startswith(normal_prefix) for k in taught), "the trainer learned the fleet"
    stable_end(isolated, topics.telemetry_deadletter)
    dead = read(isolated, topics.telemetry_deadletter)

    # -- every hostile input is accounted for -------------------------------------------------
    accepted = Counter(r.key.decode() for r in raw if r.key)
    at_gateway = [d for d in dead if d.headers.get("fw.stage") == b"gateway"]
    at_scorer = [d for d in dead if d.headers.get("fw.stage") == b"score"]
    gateway_dead = Counter(d.key.decode() if d.key else "" for d in at_gateway)
    for name, payloads in sent.items():
        device = f"{hostile_prefix}{name}"
        assert accepted[device] + gateway_dead[device] == len(payloads), (
            f"{name}: {len(payloads)} sent, {accepted[device]} accepted, "
            f"{gateway_dead[device]} dead-lettered"
        )
    assert all(d.headers["fw.reason"] for d in at_gateway)
    for name in hostile.REFUSED_BY_GATEWAY:
        assert gateway_dead[f"{hostile_prefix}{name}"] == 1, f"{name} was not refused"
    reserved_dead = [d for d in at_gateway if d.headers["fw.mqtt_topic"] == reserved.encode()]
    assert len(reserved_dead) == 1
    assert b"not a valid device id" in reserved_dead[0].headers["fw.reason"]
    oversized = next(d for d in at_gateway if d.key == f"{hostile_prefix}oversized".encode())
    assert len(oversized.value) <= 512 * 1024  # the dead letter is capped, not the whole 1.5 MB

    # records past the gateway: each dead-lettered once by the scorer, with its reason and place
    direct_dead = [d for d in at_scorer if d.key == direct_key.encode()]
    assert sorted(d.value for d in direct_dead) == sorted(direct)
    assert len({d.headers["fw.source_offset"] for d in direct_dead}) == len(direct)
    assert all(d.headers["fw.source_topic"] == topics.telemetry_raw.encode() for d in direct_dead)
    reasons = {d.value: d.headers["fw.reason"].decode() for d in direct_dead}
    assert reasons[b"{not json"].startswith("not JSON")
    assert reasons[direct[2]] == "seq or event_ms outside a signed 64-bit integer"

    # the metric flood: names beyond score.max_metrics refused by the scorer, the rest scored
    flood_dead = [d for d in at_scorer if d.key == f"{hostile_prefix}metricflood".encode()]
    # the readings holding names past the 64th
    assert len(flood_dead) == hostile.FLOOD_READINGS - 64 // hostile.FLOOD_NAMES
    assert all(b"score.max_metrics" in d.headers["fw.reason"] for d in flood_dead)

    # -- the API: the storm's device saw its copies as duplicates; no stage stopped -----------
    def storm_state() -> dict[str, Any] | None:
        body = httpx.get(f"{api}/devices/{hostile_prefix}dupstorm", timeout=5)
        state = body.json().get("state") if body.status_code == 200 else None
        return state if state and state["last_seq"] == 7 else None

    assert wait_until(storm_state, 60, "the storm device in the API") is not None
    hostile_devices_in_api(api, hostile_prefix, sent, raw)
    for name, proc in isolated.procs.items():
        assert proc.poll() is None, f"{name} stopped; logs in {tmp_path}"
    # what is left reads the log and waits for the replay: the replay has the machine
    isolated.stop("gateway", "score", "api", "train")

    # -- the normal fleet: its alerts are those of its own readings replayed alone ------------
    live = [json.loads(r.value) for r in read(isolated, topics.alerts)]
    live_normal = {_event(e) for e in live if e["device_id"].startswith(normal_prefix)}
    assert any(e[1] == "open" for e in live_normal), "the spike was not alerted"
    code = replay.wait(timeout=300)
    assert code == 0, (tmp_path / "replay.log").read_text()[-3000:]
    again = {_event(json.loads(r.value)) for r in read(isolated, replayed)}
    assert again == live_normal


def replay_alone(
    isolated: Isolated, raw: list[Record], normal_prefix: str, started: int
) -> tuple[subprocess.Popen[bytes], str]:
    """The normal fleet's readings copied alone to a raw topic of their own, and a replay of
    that topic started into another (its process, and that topic)."""
    topics = isolated.topics
    alone = f"{topics.telemetry_raw}.alone"
    replayed = f"{topics.alerts}.alone"
    ensure_topics(
        isolated.settings.kafka,
        [TopicSpec(alone, "device_id"), TopicSpec(replayed, "device_id")],
        1,
    )
    copy = Producer(client_config(isolated.settings.kafka))
    normal = [r for r in raw if r.key and r.key.decode().startswith(normal_prefix)]
    assert len(normal) == DEVICES * ROUNDS
    for r in normal:
        copy.produce(alone, r.value, key=r.key, timestamp=json.loads(r.value)["event_ms"])
    assert copy.flush(30) == 0
    env = {**isolated.env, "FLEETWATCH_TOPICS__TELEMETRY_RAW": alone}
    replay = isolated.start(
        "replay",
        "replay",
        "--from", _iso(started - 3_600_000),
        "--to", _iso(now_ms() + 3_600_000),
        "--output-topic", replayed,
        env=env,
    )  # fmt: skip
    return replay, replayed


def hostile_devices_in_api(
    api: str, prefix: str, sent: dict[str, list[bytes]], raw: list[Record]
) -> None:
    """Through the API, no device is quarantined; each hostile device is absent, every input
    of it refused, or, for input that was valid readings (a duplicate storm, a flood of metric
    names), shows exactly what its accepted readings give — no name past
    ``score.max_metrics``, no seq it did not send, a repeat not counted as a reading — so none
    passes for a healthy device with state its input bent."""

    def listed(**query: str) -> dict[str, dict[str, Any]]:
        page = httpx.get(f"{api}/devices", params={"limit": "1000", **query}, timeout=10)
        assert page.status_code == 200, page.text
        return {d["device_id"]: d for d in page.json()["data"]}

    devices = {f"{prefix}{name}" for name in sent}
    accepted: dict[str, list[dict[str, Any]]] = {}
    for record in raw:  # what the gateway took from each (the direct records are not readings)
        if record.key and record.key.decode() in devices:
            accepted.setdefault(record.key.decode(), []).append(json.loads(record.value))

    def settled(device: str) -> dict[str, Any]:
        """The device's state, once the API has one."""

        def state() -> dict[str, Any] | None:
            body = httpx.get(f"{api}/devices/{device}", timeout=5)
            return body.json().get("state") if body.status_code == 200 else None

        found = wait_until(state, 60, f"{device}'s state in the API")
        assert found is not None
        return found

    # quarantine means a device's scoring raised batch after batch: every hostile input is
    # refused or scored, so none may come to that
    assert listed(status="quarantined") == {}
    everyone = listed()
    assert not [d for d in everyone if d.startswith(("fleet:", f"{prefix}direct"))], everyone
    for name in sent:
        device = f"{prefix}{name}"
        readings = accepted.get(device, [])
        if not readings:
            assert device not in everyone, f"{name}: every input refused, yet the API lists it"
            missing = httpx.get(f"{api}/devices/{device}", timeout=5)
            assert missing.status_code == 404, f"{name}: {missing.status_code} {missing.text}"
            continue
        state = settled(device)
        assert state["status"] in ("ok", "alerting", "silent"), (name, state)
        seqs = {r["seq"] for r in readings}
        names: list[str] = []
        for r in sorted(readings, key=lambda r: r["seq"]):
            names += [n for n in r["metrics"] if n not in names]
        allowed = set(names[:64])  # score.max_metrics, in the order the names came
        assert state["last_seq"] in seqs, (name, state["last_seq"], sorted(seqs))
        assert set(state["last_values"]) <= allowed, (name, sorted(state["last_values"]))
        sessions = httpx.get(f"{api}/devices/{device}/sessions", timeout=5).json()["data"]
        counted = sum(s["readings"] for s in sessions)
        assert 0 < counted <= len(seqs), f"{name}: {counted} readings in sessions of {len(seqs)}"
    storm = settled(f"{prefix}dupstorm")
    assert storm["last_seq"] == 7
    storm_sessions = httpx.get(f"{api}/devices/{prefix}dupstorm/sessions", timeout=5).json()
    assert [s["readings"] for s in storm_sessions["data"]] == [1]  # 30 copies, one reading


def _event(e: dict[str, Any]) -> tuple[Any, ...]:
    kept = {k: v for k, v in e.items() if k not in IGNORED}
    return (e["event_id"], e["status"], json.dumps(kept, sort_keys=True))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()
