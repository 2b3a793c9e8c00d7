"""A normal simulated fleet beside hostile devices, through the real stack (Mosquitto, the
gateway, Kafka, the Spark scorer and trainer, the API).

Fifty normal devices report every second for over 30 s, with labelled spikes. Beside them: the
hostile inputs of :mod:`fleetwatch.simulator.hostile` (each dead-lettered with its reason by the
gateway or the scorer, or scored harmlessly), records written past the gateway, a device
flooding at 50 times the gateway's per-device rate for the whole run (its excess dead-lettered
as ``rate_limited``, the API showing it rate-limited), and a device logged in with its own
account presenting the gateway's client id (the gateway never loses its session).

No normal reading is lost: each one the simulator sent is in ``telemetry.raw``, none is late
(a late reading is not scored), and the scorer commits past all of them. No stage stops (the
trainer reads the same records), no device is quarantined, each hostile device is absent from
the API (all its input refused) or shows exactly what its valid readings give, and the normal
fleet's alerts are exactly those a replay of its own readings alone gives (by event id).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import paho.mqtt.client as mqtt
from confluent_kafka import Producer

from fleetwatch.contracts import deadletter
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.kafka_config import client_config
from fleetwatch.simulator import hostile
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.topics import ensure_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from fleetwatch.streaming.scorer.policy import Policy
from fleetwatch.streaming.scorer.replay import IGNORED
from fleetwatch.streaming.trainer.job import JOB as TRAIN_JOB
from fleetwatch.streaming.trainer.job import PLAN_VERSION as TRAIN_PLAN
from tests.integration.conftest import Isolated, Record, connect, fleetwatch
from tests.integration.topic_reads import read, stable_end
from tests.polling import wait_until

DEVICES, RATE, ROUNDS = 50, 1.0, 32
"""The normal fleet: readings a second per device, readings per device (over 30 s)."""
SPIKE_EVERY = 170
"""Every 170th reading of the fleet a spike: nine, spread over devices and the run."""
DEVICE_RATE, DEVICE_BURST = 2.0, 50
"""The test's gateway's limit per device: twice a normal device's rate; a burst that takes the
duplicate storm's 30 copies whole."""
FLOOD_RATE = 50 * DEVICE_RATE
TAKEOVER_AT_S, TAKEOVER_READINGS = 10.0, 5
"""Into the flood, when the session thief logs in; its readings under each client id."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Flood:
    """A device publishing readings at :data:`FLOOD_RATE` a second, each stamped with the time it
    is published (the gateway's limiter counts on the device's ``sent`` clock)."""

    def __init__(self, client: mqtt.Client, topic: str) -> None:
        self.client, self.topic = client, topic
        self.payloads: list[bytes] = []
        self.sent_ms: list[int] = []
        self._infos: list[mqtt.MQTTMessageInfo] = []
        self._start = time.monotonic()

    def publish_until(self, done: Callable[[], bool], limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while not done() and time.monotonic() < deadline:
            pause = self._start + len(self.payloads) / FLOOD_RATE - time.monotonic()
            if pause > 0:
                time.sleep(pause)  # the device's pace, not a wait for an outcome
            sent = now_ms()
            payload = reading_payload(len(self.payloads), sent, sent, {"t": 20.0})
            self._infos.append(self.client.publish(self.topic, payload, qos=1))
            self.payloads.append(payload)
            self.sent_ms.append(sent)

    def acknowledged(self) -> None:
        for info in self._infos:
            info.wait_for_publish(30)
            assert info.is_published(), "a flood message was not acknowledged by the broker"


def take_the_gateway_s_id(isolated: Isolated, device: str, password: str) -> list[bytes]:
    """``device``, logged in with its own account, presents the gateway's client id (and its
    first worker's): refused on the stages' listener, let in on the devices' in a session of
    its own, where it publishes readings as itself. The payloads it published."""
    gateway_id = isolated.env["FLEETWATCH_GATEWAY__CLIENT_ID"]
    topic = f"{isolated.mqtt_root}/{device}/telemetry"
    services = isolated.settings.mqtt.services_port
    payloads: list[bytes] = []
    for client_id in (gateway_id, f"{gateway_id}-0"):
        assert connect(isolated, device, password, client_id, services)[0] is False
        ok, thief = connect(isolated, device, password, client_id)
        assert ok, f"{device} was refused on the devices' listener as {client_id}"
        for _ in range(TAKEOVER_READINGS):
            now = now_ms()
            payloads.append(reading_payload(len(payloads), now, now, {"t": 1.0}))
            thief.publish(topic, payloads[-1], qos=1).wait_for_publish(10)
        thief.disconnect()
        thief.loop_stop()
    return payloads


def gateway_metrics(isolated: Isolated) -> dict[str, float]:
    port = isolated.metrics_ports["gateway"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.findall(r"^(fleetwatch_gateway_mqtt_\w+) (\S+)$", text, re.MULTILINE)
    return {name: float(value) for name, value in found}


def test_a_hostile_fleet_changes_nothing_for_the_normal_one(
    isolated: Isolated, tmp_path: Path
) -> None:
    topics = isolated.topics
    checkpoint = versioned(tmp_path / "checkpoints", "score", PLAN_VERSION)
    limits = {
        "FLEETWATCH_GATEWAY__DEVICE_RATE": str(DEVICE_RATE),
        "FLEETWATCH_GATEWAY__DEVICE_BURST": str(DEVICE_BURST),
    }
    isolated.start("gateway", "gateway", env=isolated.env | limits)
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
    hostile_prefix, normal_prefix = f"h{isolated.tag}-", f"dev{isolated.tag}"
    flood_device, thief = f"{hostile_prefix}flood", f"{hostile_prefix}thief"
    issued = fleetwatch("devices", "add", thief, "--json", env=isolated.stack_env)
    assert issued.returncode == 0, issued.stderr
    password = json.loads(issued.stdout.strip().splitlines()[-1])["password"]
    wait_until(lambda: (checkpoint / "metadata").exists(), 120, "the scoring query to start")
    truth = tmp_path / "truth.jsonl"
    started = now_ms()

    with isolated.mqtt_client() as client:
        isolated.await_gateway(client)  # connected: a session the thief could take
        sim = subprocess.Popen(
            [
                sys.executable, "-m", "fleetwatch.cli.main", "sim", "run", "--quiet",
                "--devices", str(DEVICES), "--rate", str(RATE), "--count", str(ROUNDS),
                "--spike-every", str(SPIKE_EVERY), "--prefix", normal_prefix,
                "--truth", str(truth),
            ],
            env=isolated.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        sent = hostile.mqtt_messages(now_ms())
        for name, payloads in sent.items():
            for payload in payloads:
                topic = f"{isolated.mqtt_root}/{hostile_prefix}{name}/telemetry"
                client.publish(topic, payload, qos=1).wait_for_publish(10)
        reserved = f"{isolated.mqtt_root}/fleet:{isolated.tag}/telemetry"
        client.publish(reserved, reading_payload(1, now_ms(), now_ms(), {"t": 1.0}), qos=1)
        flood = Flood(client, f"{isolated.mqtt_root}/{flood_device}/telemetry")
        flood.publish_until(lambda: sim.poll() is not None, TAKEOVER_AT_S)
        sent["thief"] = take_the_gateway_s_id(isolated, thief, password)
        flood.publish_until(lambda: sim.poll() is not None, 120)
        flood.acknowledged()
        sent["flood"] = flood.payloads
    direct = hostile.raw_records(now_ms())
    producer = Producer(client_config(isolated.settings.kafka))
    direct_key = f"{hostile_prefix}direct"
    for value in direct:
        producer.produce(topics.telemetry_raw, value, key=direct_key.encode())
    assert producer.flush(30) == 0
    _, err = sim.communicate(timeout=60)
    assert sim.returncode == 0, err
    reported = re.search(rb"sent (\d+) messages \((\d+) readings\)", err)
    assert reported is not None, err
    assert int(reported[1]) == int(reported[2]) == DEVICES * ROUNDS, err
    spikes = [json.loads(line) for line in truth.read_text().splitlines()]
    spiked = {t["device_id"] for t in spikes if t.get("kind") == "spike"}
    assert len([t for t in spikes if t.get("kind") == "spike"]) >= 5, spikes

    ends = stable_end(isolated, topics.telemetry_raw)
    raw = read(isolated, topics.telemetry_raw)
    # -- no normal reading is lost: every one the simulator sent is in the log, once ---------
    fleet = Scenario(devices=DEVICES, prefix=normal_prefix)
    expected = {(fleet.device_id(i), seq) for i in range(DEVICES) for seq in range(ROUNDS)}
    normal = [r for r in raw if r.key and r.key.decode().startswith(normal_prefix)]
    got = Counter((r.key.decode(), json.loads(r.value)["seq"]) for r in normal if r.key)
    assert set(got) == expected, f"missing {sorted(expected - set(got))[:10]}"
    assert max(got.values()) == 1, [k for k, n in got.items() if n > 1][:10]
    times = [json.loads(r.value)["event_ms"] for r in normal]
    assert max(times) - min(times) >= 30_000, "the normal fleet ran under 30 s"
    # the log is complete: the normal fleet's readings alone are replayed beside the checks
    replay, replayed = replay_alone(isolated, normal, started)
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
    # a reading behind the watermark is not scored: for a normal device, lost
    late = [json.loads(r.value)["record"] for r in read(isolated, topics.telemetry_late)]
    late_normal = [(r["device_id"], r["seq"]) for r in late if (r["device_id"], r["seq"]) in got]
    assert late_normal == [], f"normal readings late: {late_normal[:10]}"
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
    assert len(oversized.value) <= 512 * 1024  # the dead letter is capped, not the whole 600 KB
    # only the flood went over its rate; the thief's readings all went through as its own
    limited = Counter(
        d.key.decode() if d.key else ""
        for d in at_gateway
        if d.headers.get(deadletter.KIND) == deadletter.RATE_LIMITED.encode()
    )
    assert set(limited) == {flood_device}, limited
    assert limited[flood_device] == gateway_dead[flood_device]
    # the limiter counts on the flood's clock: its burst, then its rate over what it spanned
    span_s = (flood.sent_ms[-1] - flood.sent_ms[0]) / 1000
    allowed = DEVICE_BURST + DEVICE_RATE * span_s
    assert allowed - 3 <= accepted[flood_device] <= allowed + 3, (
        f"flood: {len(flood.payloads)} sent over {span_s:.1f} s, {accepted[flood_device]} "
        f"accepted, {allowed:.0f} allowed"
    )
    assert len(flood.payloads) >= 0.8 * FLOOD_RATE * span_s, "the flood ran under its rate"
    assert accepted[thief] == len(sent["thief"]) == 2 * TAKEOVER_READINGS

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

    # -- the API: the flood shown rate-limited, every hostile device as its input gives ------
    def rate_limited() -> dict[str, Any]:
        """The flood's rate limit in the API, once it counts every dead letter ({} before)."""
        body = httpx.get(f"{api}/devices/{flood_device}", timeout=5)
        shown = body.json().get("rate_limited") if body.status_code == 200 else None
        return shown if shown and shown["dead_letters"] == limited[flood_device] else {}

    shown = wait_until(rate_limited, 60, "the flood's dead letters in the API")
    assert shown["recently"] is True, shown
    hostile_devices_in_api(api, hostile_prefix, sent, raw)
    normal_devices_in_api(api, normal)
    # the thief never took the gateway's session: it stayed connected throughout
    metrics = gateway_metrics(isolated)
    assert metrics.get("fleetwatch_gateway_mqtt_connected") == 1.0, metrics
    assert metrics.get("fleetwatch_gateway_mqtt_reconnects_total") == 0.0, metrics
    for name, proc in isolated.procs.items():
        assert proc.poll() is None, f"{name} stopped; logs in {tmp_path}"
    # what is left reads the log and waits for the replay: the replay has the machine
    isolated.stop("gateway", "score", "api", "train")

    # -- the normal fleet: its alerts are those of its own readings replayed alone ------------
    live = [json.loads(r.value) for r in read(isolated, topics.alerts)]
    live_normal = {_event(e) for e in live if e["device_id"].startswith(normal_prefix)}
    opened = {e["device_id"] for e in live if e["status"] == "open"}
    assert opened & spiked, f"no labelled spike alerted: {sorted(spiked)} spiked, {opened} open"
    code = replay.wait(timeout=300)
    assert code == 0, (tmp_path / "replay.log").read_text()[-3000:]
    again = {_event(json.loads(r.value)) for r in read(isolated, replayed)}
    assert again == live_normal


def replay_alone(
    isolated: Isolated, normal: list[Record], started: int
) -> tuple[subprocess.Popen[bytes], str]:
    """The normal fleet's readings (``normal``) copied alone to a raw topic of their own, and a
    replay of that topic started into another (its process, and that topic)."""
    topics = isolated.topics
    alone = f"{topics.telemetry_raw}.alone"
    replayed = f"{topics.alerts}.alone"
    ensure_topics(
        isolated.settings.kafka,
        [TopicSpec(alone, "device_id"), TopicSpec(replayed, "device_id")],
        1,
    )
    copy = Producer(client_config(isolated.settings.kafka))
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


def normal_devices_in_api(api: str, normal: list[Record]) -> None:
    """Through the API, every normal device scored to its last readings: the scorer publishes
    a device's state at most ``state_every_ms`` of event time after the last one, so its
    newest shown is that close to the newest reading it had."""
    newest: dict[str, int] = {}
    for r in normal:
        device = r.key.decode() if r.key else ""
        newest[device] = max(newest.get(device, 0), json.loads(r.value)["event_ms"])
    states: dict[str, dict[str, Any] | None] = {}
    behind: list[str] = []

    def caught_up() -> bool:
        for device in newest:
            body = httpx.get(f"{api}/devices/{device}", timeout=5)
            states[device] = body.json().get("state") if body.status_code == 200 else None
        behind[:] = [
            d
            for d, s in states.items()
            if not s or s["last_seen_ms"] <= newest[d] - Policy.state_every_ms
        ]
        return not behind

    try:
        wait_until(caught_up, 60, "the normal devices' states in the API")
    except AssertionError as exc:
        raise AssertionError([(d, newest[d], states[d]) for d in behind[:5]]) from exc
    statuses = Counter(s["status"] for s in states.values() if s)
    assert set(statuses) <= {"ok", "alerting"}, statuses


def _event(e: dict[str, Any]) -> tuple[Any, ...]:
    kept = {k: v for k, v in e.items() if k not in IGNORED}
    return (e["event_id"], e["status"], json.dumps(kept, sort_keys=True))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()
