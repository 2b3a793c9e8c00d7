"""A normal fleet beside hostile devices, through the whole path on the local stack: what the
hostile ones cost the normal ones, and proof that nothing of theirs is lost or bent.

Two runs of the same normal fleet (``--devices`` simulated devices at ``--rate`` readings/s,
plus ``PROBES`` probe devices whose spikes give the end-to-end latency: a spike's publish to its
``open`` alert on Kafka), each with a fresh gateway and scorer: *alone*, and *hostile*, where
hostile devices send every case of :mod:`fleetwatch.simulator.hostile` (oversized, non-UTF-8,
deeply nested, NaN, huge and overflowing numbers, a 2^70 ``seq``, far-future and far-past
clocks, NUL bytes, bad metric names, metric floods, duplicate storms) round after round, and
records past the gateway go straight to ``telemetry.raw``; one device floods at 50 times its
rate (``gateway.device_rate``), and a device logged in as itself presents the gateway's client
id again and again.

Figures of the hostile run: every hostile input accounted for (a gateway dead letter, or a
``telemetry.raw`` record the scorer then scored or dead-lettered — it commits past every one of
them), normal readings lost (published, not in ``telemetry.raw``), stage restarts (a stage
process that exited during the run), and whether the normal fleet's alerts are identical, by
event id, to a replay of its own readings alone. The normal fleet's p99 is given beside the
alone run's, and their ratio; the flood's messages taken and dead-lettered; the gateway's MQTT
reconnections. The bench exits non-zero, after its last line, when a figure breaks what the
run must show (:func:`checks`).

    python bench/pipeline/hostile.py [--seconds 60] [--devices 200] [--rate 1]

Last line: {"hostile_inputs": N, "accounted": N, "normal_alerts_identical": true,
"stage_restarts": 0, "lost": 0, "normal_p99_ms": …, "alone_p99_ms": …,
"flood_normal_p99_ratio": …, "flood_sent": …, "flood_taken": …, "flood_rate_limited": …,
"takeover_attempts": …, "gateway_reconnects": 0, "load_avg_1m": …}
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import (
    end_gateway_session,
    isolated_env,
    load_avg_1m,
    percentile,
    stage,
    wait,
    write_results,
)
from bench.pipeline.under_load import Probes, Watch, probe_prefix
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import KafkaSettings, Settings, TopicSettings
from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.mqtt_config import configure
from fleetwatch.simulator import hostile
from fleetwatch.simulator.runner import run as run_fleet
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.credentials import Credentials, login
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.mosquitto import MosquittoBroker
from fleetwatch.stack.topics import delete_topics, ensure_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from fleetwatch.streaming.scorer.replay import IGNORED

FLOOD_TIMES = 50
"""How many times its rate the flooding device publishes."""


def sim_client(settings: Settings, client_id: str) -> Any:
    """A connected MQTT client, looping, logged in with the stack's simulator account."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    account = login(settings, "sim")
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    configure(client, account)
    client.connect(account.host, account.port)
    client.loop_start()
    return client


class Hostile(threading.Thread):
    """Every hostile case, round after round, each round's devices new (``h{tag}-{case}-{n}``);
    and the past-the-gateway records, keyed ``h{tag}-raw``. Counts what it sent per device."""

    def __init__(self, settings: Settings, root: str, topics: TopicSettings, tag: str) -> None:
        super().__init__(daemon=True)
        self.client = sim_client(settings, f"hostile-{tag}")
        self.producer = Producer(client_config(settings.kafka))
        self.root, self.topics, self.prefix = root, topics, f"h{tag}-"
        self.sent: Counter[str] = Counter()
        self.raw_sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for case, payloads in hostile.mqtt_messages(now_ms()).items():
                device = f"{self.prefix}{case}-{n}"
                for payload in payloads:
                    info = self.client.publish(f"{self.root}/{device}/telemetry", payload, qos=1)
                    info.wait_for_publish(10)
                    self.sent[device] += 1
            for value in hostile.raw_records(now_ms()):
                self.producer.produce(self.topics.telemetry_raw, value, key=f"{self.prefix}raw")
                self.raw_sent += 1
            self.producer.flush(10)
            n += 1
            self.stop.wait(1.0)
        self.client.loop_stop()
        self.client.disconnect()


class Flooder(threading.Thread):
    """One device publishing at ``FLOOD_TIMES`` its rate (``gateway.device_rate``) for the whole
    run, QoS 1: what the gateway takes of it is bounded by the device's token bucket, and the
    rest is dead-lettered with the reason. Counts what it sent."""

    def __init__(self, settings: Settings, root: str, tag: str) -> None:
        super().__init__(daemon=True)
        self.client = sim_client(settings, f"flood-{tag}")
        self.device = f"f{tag}-flood"
        self.topic = f"{root}/{self.device}/telemetry"
        self.rate = FLOOD_TIMES * settings.gateway.device_rate
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                now = now_ms()
                payload = reading_payload(self.sent, now, now, {"t": 21.0})
                self.client.publish(self.topic, payload, qos=1)
                self.sent += 1
            self.stop.wait(0.01)
        self.client.loop_stop()
        self.client.disconnect()


class Thief(threading.Thread):
    """A device logged in with its own credentials that presents the gateway's client id again
    and again on the devices' listener, as a device trying to take the gateway's session would."""

    def __init__(self, settings: Settings, gateway_id: str, tag: str) -> None:
        super().__init__(daemon=True)
        self.settings = settings
        self.gateway_id = gateway_id
        self.issued = Credentials(settings).add(f"t{tag}-thief")
        MosquittoBroker(settings).reload()  # the running broker takes the new device
        self.attempts = 0
        self.stop = threading.Event()

    def run(self) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        m = self.settings.mqtt.as_account(self.issued.device_id, self.issued.password)
        while not self.stop.is_set():
            for client_id in (self.gateway_id, f"{self.gateway_id}-0"):
                client = mqtt.Client(
                    CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
                )
                configure(client, m)
                try:
                    client.connect(m.host, m.port, keepalive=5)
                    client.loop_start()
                    self.stop.wait(1.0)
                    client.disconnect()
                    client.loop_stop()
                except OSError:
                    pass
                self.attempts += 1
        Credentials(self.settings).revoke(self.issued.device_id)
        MosquittoBroker(self.settings).reload()


def gateway_reconnects(port: str) -> float:
    """The gateway's MQTT reconnections, from its metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("fleetwatch_gateway_mqtt_reconnects_total "):
                return float(line.split()[1])
    return float("nan")


def read_topic(kafka: KafkaSettings, topic: str) -> list[Any]:
    """Every record of ``topic`` up to its current end."""
    ends = end_offsets(kafka, topic)
    consumer = Consumer(client_config(kafka, {"group.id": f"bench-{uuid.uuid4().hex[:8]}"}))
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    left = {p for p, end in ends.items() if end > 0}
    out: list[Any] = []
    deadline = time.monotonic() + 120
    while left and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=0.5):
            if msg.error() is None:
                out.append(msg)
                if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                    left.discard(msg.partition() or 0)
    consumer.close()
    return out


def one_run(settings: Settings, args: argparse.Namespace, with_hostile: bool) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-hostile-"))
    topics, env = isolated_env(settings, tag, run_dir)
    root = f"b{tag}/devices"
    kafka = settings.kafka
    stages = {
        "gateway": stage(env, run_dir, "gateway", "gateway"),
        "score": stage(env, run_dir, "score", "score"),
    }
    alerts = Watch(kafka, topics.alerts, probe_prefix(tag), only_open=True)
    out: dict[str, Any] = {}
    try:
        checkpoint = versioned(run_dir / "checkpoints", "score", PLAN_VERSION)
        wait(lambda: (checkpoint / "commits" / "0").exists(), 180, "the scorer's first batch")
        alerts.start()
        started = now_ms()
        probes = Probes(settings, root, tag)
        probes.start()
        attacker = Hostile(settings, root, topics, tag) if with_hostile else None
        flooder = Flooder(settings, root, tag) if with_hostile else None
        thief = Thief(settings, env["FLEETWATCH_GATEWAY__CLIENT_ID"], tag) if with_hostile else None
        for thread in (attacker, flooder, thief):
            if thread is not None:
                thread.start()
        scenario = Scenario(
            devices=args.devices,
            rate=args.rate,
            count=int(args.rate * args.seconds),
            seed=17,
            qos=1,
            prefix=f"n{tag}",
            workers=1,
        )
        mqtt = login(settings, "sim").model_copy(update={"root": root})
        totals = run_fleet(scenario, mqtt, threading.Event(), run_dir / "truth.jsonl")
        probes.stop.set()
        for thread in (attacker, flooder, thief):
            if thread is not None:
                thread.stop.set()
                thread.join(30)
        probes.join(30)
        time.sleep(2)
        ends = end_offsets(kafka, topics.telemetry_raw)
        wait(
            lambda: all(
                (committed_offsets(checkpoint, topics.telemetry_raw) or {}).get(p, 0) >= e
                for p, e in ends.items()
            ),
            300,
            "the scorer to commit every record",
        )
        time.sleep(3)  # the last batch's alerts reach the consumer
        sent_spikes = dict(probes.sent)
        lat = alerts.latencies(sent_spikes)
        out["p99_ms"] = percentile(lat, 99)
        out["p50_ms"] = percentile(lat, 50)
        out["spikes_without_alert"] = len(sent_spikes) - len(lat)
        out["stage_restarts"] = sum(1 for p in stages.values() if p.poll() is not None)
        out["gateway_reconnects"] = gateway_reconnects(env["FLEETWATCH_GATEWAY__METRICS_PORT"])
        raw = read_topic(kafka, topics.telemetry_raw)
        normal_keys = (f"n{tag}".encode(), probe_prefix(tag).encode())
        normal = [m for m in raw if (m.key() or b"").startswith(normal_keys)]
        seen = {(m.key(), json.loads(m.value())["seq"]) for m in normal}
        published = totals.sent + len(probes.published)
        out["lost"] = published - len(seen)
        out["normal_readings"] = published
        if attacker is not None and flooder is not None and thief is not None:
            dead = read_topic(kafka, topics.telemetry_deadletter)
            out |= account(attacker, raw, dead)
            out |= flood_account(flooder, raw, dead)
            out["takeover_attempts"] = thief.attempts
            out["normal_alerts_identical"] = replayed_alike(
                settings, env, topics, normal, (f"n{tag}", probe_prefix(tag)), started
            )
    finally:
        alerts.stop.set()
        for p in stages.values():
            p.send_signal(signal.SIGTERM)
        for p in stages.values():
            p.wait(120)
        end_gateway_session(settings, env)
        delete_topics(kafka, topics.model_dump().values())
    return out


def account(attacker: Hostile, raw: list[Any], dead: list[Any]) -> dict[str, Any]:
    """Hostile inputs, and those accounted for: dead-lettered by the gateway, or accepted into
    ``telemetry.raw`` (the scorer committed past them: scored or dead-lettered); records past
    the gateway, dead-lettered by the scorer."""
    prefix = attacker.prefix.encode()
    accepted = Counter(
        (m.key() or b"").decode() for m in raw if (m.key() or b"").startswith(prefix)
    )
    letters = [((m.key() or b"").decode(), dict(m.headers() or []).get("fw.stage")) for m in dead]
    at_gateway = Counter(key for key, stage_name in letters if stage_name == b"gateway" and key)
    raw_key = f"{attacker.prefix}raw"
    by_scorer = sum(1 for key, stage_name in letters if stage_name == b"score" and key == raw_key)
    mqtt_accounted = sum(min(n, accepted[d] + at_gateway[d]) for d, n in attacker.sent.items())
    return {
        "hostile_inputs": sum(attacker.sent.values()) + attacker.raw_sent,
        "accounted": mqtt_accounted + min(by_scorer, attacker.raw_sent),
        "hostile_dead_letters": sum(at_gateway.values()) + by_scorer,
    }


def flood_account(flooder: Flooder, raw: list[Any], dead: list[Any]) -> dict[str, Any]:
    """The flooding device's messages: taken into ``telemetry.raw``, dead-lettered over its
    rate, and in all (each one is either)."""
    key = flooder.device.encode()
    taken = sum(1 for m in raw if m.key() == key)
    limited = sum(
        1
        for m in dead
        if m.key() == key and b"exceeds its rate" in dict(m.headers() or []).get("fw.reason", b"")
    )
    return {"flood_sent": flooder.sent, "flood_taken": taken, "flood_rate_limited": limited}


def replayed_alike(
    settings: Settings,
    env: dict[str, str],
    topics: TopicSettings,
    normal: list[Any],
    prefixes: tuple[str, str],
    started: int,
) -> bool:
    """Whether a replay of the normal fleet's readings alone gives the live alerts of it."""
    kafka = settings.kafka
    alone, replayed = f"{topics.telemetry_raw}.alone", f"{topics.alerts}.alone"
    ensure_topics(kafka, [TopicSpec(alone, "device_id"), TopicSpec(replayed, "device_id")], 1)
    copy = Producer(client_config(kafka))
    for m in normal:
        copy.produce(alone, m.value(), key=m.key(), timestamp=json.loads(m.value())["event_ms"])
    copy.flush(60)

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat()

    replay_env = {**env, "FLEETWATCH_TOPICS__TELEMETRY_RAW": alone}
    result = subprocess.run(
        [
            sys.executable, "-m", "fleetwatch.cli.main", "replay",
            "--from", iso(started - 3_600_000), "--to", iso(now_ms() + 3_600_000),
            "--output-topic", replayed,
        ],
        env=replay_env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    try:
        if result.returncode != 0:
            print(f"replay failed: {result.stderr[-2000:]}", flush=True)
            return False

        def events(topic: str) -> set[tuple[Any, ...]]:
            out = set()
            for m in read_topic(kafka, topic):
                e = json.loads(m.value())
                if e["device_id"].startswith(prefixes):
                    kept = {k: v for k, v in e.items() if k not in IGNORED}
                    out.add((e["event_id"], json.dumps(kept, sort_keys=True)))
            return out

        live, again = events(topics.alerts), events(replayed)
        print(f"normal alert events: live {len(live)}, replayed alone {len(again)}", flush=True)
        return live == again
    finally:
        delete_topics(kafka, [alone, replayed])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--rate", type=float, default=1.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    settings = Settings()
    Stack(settings).up()
    alone = one_run(settings, args, with_hostile=False)
    print(f"alone: {alone}", flush=True)
    attacked = one_run(settings, args, with_hostile=True)
    print(f"hostile: {attacked}", flush=True)
    figures = {
        "hostile_inputs": attacked["hostile_inputs"],
        "accounted": attacked["accounted"],
        "normal_alerts_identical": attacked["normal_alerts_identical"],
        "stage_restarts": alone["stage_restarts"] + attacked["stage_restarts"],
        "lost": alone["lost"] + attacked["lost"],
        "normal_p99_ms": attacked["p99_ms"],
        "alone_p99_ms": alone["p99_ms"],
        "normal_p50_ms": attacked["p50_ms"],
        "alone_p50_ms": alone["p50_ms"],
        "spikes_without_alert": alone["spikes_without_alert"] + attacked["spikes_without_alert"],
        "normal_readings": attacked["normal_readings"],
        "flood_sent": attacked["flood_sent"],
        "flood_taken": attacked["flood_taken"],
        "flood_rate_limited": attacked["flood_rate_limited"],
        "flood_normal_p99_ratio": round(attacked["p99_ms"] / alone["p99_ms"], 2),
        "takeover_attempts": attacked["takeover_attempts"],
        "gateway_reconnects": attacked["gateway_reconnects"],
        "devices": args.devices,
        "rate": args.rate,
        "seconds": args.seconds,
        "load_avg_1m": load_avg_1m(),
    }
    print(json.dumps(figures))
    write_results(__file__, figures)
    failed = [name for name, held in checks(figures).items() if not held]
    if failed:
        sys.exit(f"hostile: not held: {', '.join(failed)}")


def checks(figures: dict[str, Any]) -> dict[str, bool]:
    """What the run must show: every input accounted for, nothing normal lost or bent, no
    stage restarted, the flood bounded and accounted for, the gateway's session untouched."""
    return {
        "every hostile input accounted for": figures["accounted"] == figures["hostile_inputs"],
        "no normal reading lost": figures["lost"] == 0,
        "normal alerts identical": figures["normal_alerts_identical"] is True,
        "no stage restarted": figures["stage_restarts"] == 0,
        "every normal spike alerted": figures["spikes_without_alert"] == 0,
        "every flood message accounted for": figures["flood_taken"] + figures["flood_rate_limited"]
        == figures["flood_sent"],
        "the flood was limited": figures["flood_rate_limited"] > 0,
        "normal p99 within 2x under the flood": figures["flood_normal_p99_ratio"] <= 2.0,
        "the gateway kept its session": figures["gateway_reconnects"] == 0,
    }


if __name__ == "__main__":
    main()
