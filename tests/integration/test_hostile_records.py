"""Records written straight to the topics the stages read, past the gateway (anyone holding a
Kafka login can): each is refused on its own and no stage stops. The scorer dead-letters every
hostile ``telemetry.raw`` record with its reason and place, the trainer reads past them, the
API's materialiser dead-letters the hostile alert and state records, and a normal device's
readings written after them are scored and shown by the API."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer

from fleetwatch.contracts.topics import TopicSpec
from fleetwatch.kafka_config import client_config
from fleetwatch.stack.topics import ensure_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from fleetwatch.streaming.scorer.readings import NOT_UTF8
from fleetwatch.streaming.trainer.job import JOB as TRAIN_JOB
from fleetwatch.streaming.trainer.job import PLAN_VERSION as TRAIN_PLAN
from tests.integration.conftest import Isolated
from tests.integration.topic_reads import read, stable_end
from tests.polling import wait_until

READINGS = 60
NOW = time.time_ns() // 1_000_000
EARLIER = NOW - (READINGS + 1) * 1000
"""The hostile records' time: before the normal readings', so they move no watermark past them."""
READING = b'{"v":1,"seq":1,"event_ms":%d,"metrics":{"t":1.0},' % EARLIER
HOSTILE = [
    READING + b'"firmware":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    READING + b'"firmware":"\xff\xfe\x81"}',
    READING + b'"firmware":"' + b"x" * 900_000 + b'"}',
    b'{"v":1,"seq":1,"event_ms":%d,"metrics":{"t":1e400}}' % EARLIER,
    b'{"v":1,"seq":"1","event_ms":[],"metrics":null}',
    b"\x00\x01\x02",
    b"123456789012345678901234567890",
]


def normal(device: str, seq: int) -> bytes:
    event_ms = NOW + (seq - READINGS) * 1000
    value = 21.0 + 0.1 * (seq % 3)
    record: dict[str, Any] = {"v": 1, "device_id": device, "seq": seq, "event_ms": event_ms}
    record |= {"device_event_ms": event_ms, "device_sent_ms": event_ms}
    record |= {"received_ms": event_ms + 5, "clock_offset_ms": 0, "metrics": {"t": value}}
    return json.dumps(record).encode()


def test_hostile_records_on_every_topic_stop_no_stage(isolated: Isolated, tmp_path: Path) -> None:
    topics = isolated.topics
    learned = f"{topics.model_params}.trainer"
    ensure_topics(isolated.settings.kafka, [TopicSpec(learned, "device_id")], 1)
    isolated.start("score", "score")
    isolated.start("api", "api", "--anonymous-read")
    trainer_env = {
        "FLEETWATCH_TOPICS__MODEL_PARAMS": learned,
        "FLEETWATCH_TRAIN__TRACKING": "false",
        "FLEETWATCH_TRAIN__TRIGGER_INTERVAL": "2 seconds",
    }
    isolated.start("train", "train", env=isolated.env | trainer_env)
    scoring = versioned(tmp_path / "checkpoints", "score", PLAN_VERSION)
    learning = versioned(tmp_path / "checkpoints", TRAIN_JOB, TRAIN_PLAN)
    wait_until(lambda: (scoring / "metadata").exists(), 120, "the scoring query to start")

    producer = Producer(client_config(isolated.settings.kafka, {"message.max.bytes": 2 << 20}))
    hostile_key, device = f"h{isolated.tag}".encode(), f"dev{isolated.tag}"
    for value in HOSTILE:
        for topic in (topics.telemetry_raw, topics.model_params, topics.alerts):
            producer.produce(topic, value, key=hostile_key, timestamp=EARLIER)
        producer.produce(topics.device_state, value, key=hostile_key, timestamp=EARLIER)
    producer.produce(topics.telemetry_raw, READING + b"}", key=b"\xff\xfe", timestamp=EARLIER)
    for seq in range(READINGS):
        value = normal(device, seq)  # the record's timestamp is the reading's event time
        at = json.loads(value)["event_ms"]
        producer.produce(topics.telemetry_raw, value, key=device.encode(), timestamp=at)
    assert producer.flush(30) == 0

    # every record is written (flushed), and nothing else writes the raw topic here
    ends = isolated.end_offsets(topics.telemetry_raw)
    wait_until(
        lambda: committed_offsets(scoring, topics.telemetry_raw) == ends,
        180,
        "the scorer to commit every record",
    )
    wait_until(
        lambda: committed_offsets(learning, topics.telemetry_raw) == ends,
        180,
        "the trainer to commit every record",
    )
    api = f"http://127.0.0.1:{isolated.api_port}"

    def shown() -> dict[str, Any] | None:
        body = httpx.get(f"{api}/devices/{device}", timeout=5)
        state = body.json().get("state") if body.status_code == 200 else None
        return state if state and state["last_seq"] == READINGS - 1 else None

    assert wait_until(shown, 90, "the normal device's last reading in the API") is not None
    for name, proc in isolated.procs.items():
        assert proc.poll() is None, f"{name} stopped; logs in {tmp_path}"

    stable_end(isolated, topics.telemetry_deadletter)
    dead = read(isolated, topics.telemetry_deadletter)
    raw = topics.telemetry_raw.encode()
    scored = [
        d
        for d in dead
        if d.headers.get("fw.stage") == b"score" and d.headers.get("fw.source_topic") == raw
    ]
    # a record whose key or value is not UTF-8 is dead-lettered without its bytes (no Python
    # worker can be handed them): its source offset leads to it
    not_utf8 = [HOSTILE[2], READING + b"}"]
    as_written = [v for v in HOSTILE if v not in not_utf8] + [b""] * len(not_utf8)
    assert sorted(d.value for d in scored) == sorted(as_written)
    places = {(d.headers["fw.source_partition"], d.headers["fw.source_offset"]) for d in scored}
    assert len(places) == len(as_written)
    reasons = {d.value: d.headers["fw.reason"].decode() for d in scored}
    assert reasons[HOSTILE[0]] == "nested 100001 levels deep, more than 32"
    assert reasons[HOSTILE[1]] == "nested 100000 levels deep, more than 32"
    assert reasons[b""] == NOT_UTF8
    assert reasons[HOSTILE[3]] == "firmware is longer than 64 characters or holds a NUL"
    at_api = [d for d in dead if d.headers.get("fw.stage") == b"api" and d.key == hostile_key]
    for topic in (topics.alerts, topics.device_state):
        refused = sorted(d.value for d in at_api if d.headers["fw.source_topic"] == topic.encode())
        assert refused == sorted(HOSTILE), topic
