"""The scorer is killed with SIGKILL mid-stream — while a micro-batch it has planned (its
offsets written to the checkpoint) is not committed — and restarted from its checkpoint: no
alert event is lost, none comes out as a second episode, and a replay of the same log with the
same code emits exactly the same events (by id, status, revision and values)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from fleetwatch.kafka_config import client_config
from fleetwatch.stack.processes import wait_for
from fleetwatch.stack.topics import delete_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION
from fleetwatch.streaming.scorer.replay import IGNORED
from tests.integration.conftest import Isolated, fleetwatch
from tests.integration.processes import alive, batch_ids, children
from tests.polling import wait_until

logger = logging.getLogger(__name__)

DEVICES, READINGS = 10, 160
SPIKES = {40: 50.0, 41: 52.0, 42: 50.0, 100: 45.0}  # two episodes per device
# Recent event times: the record timestamp is the event time, and records older than the raw
# topic's retention are deleted at Kafka's next retention check, which made this test lose
# readings now and then (a fixed T0 a year back).
T0 = (time.time_ns() // 1_000_000 // 60_000 - 10) * 60_000


def record(device: str, seq: int) -> dict[str, Any]:
    event_ms = T0 + seq * 1000
    return {
        "v": 1,
        "device_id": device,
        "seq": seq,
        "event_ms": event_ms,
        "device_event_ms": event_ms,
        "device_sent_ms": event_ms,
        "received_ms": event_ms + 10,
        "clock_offset_ms": 0,
        "metrics": {"temperature": SPIKES.get(seq, 21.0)},
    }


def produce(producer: Producer, topic: str, devices: list[str], seqs: range) -> None:
    for seq in seqs:
        for device in devices:
            value = json.dumps(record(device, seq)).encode()
            producer.produce(topic, value, key=device.encode(), timestamp=T0 + seq * 1000)
    producer.flush(30)


def planned_offsets(checkpoint: Path, topic: str, batch: int) -> dict[int, int]:
    """The source offsets of ``topic`` micro-batch ``batch`` reads up to (its offsets file)."""
    for line in reversed((checkpoint / "offsets" / str(batch)).read_text().splitlines()):
        try:
            sources = json.loads(line)
        except ValueError:
            continue
        if isinstance(sources, dict) and topic in sources:
            return {int(p): int(o) for p, o in sources[topic].items()}
    return {}


def uncommitted_batch(checkpoint: Path, topic: str) -> int | None:
    """The micro-batch the scorer has planned past its last commit (``offsets/N`` without
    ``commits/N``, reading beyond the committed offsets), if one is under way."""
    planned = batch_ids(checkpoint / "offsets")
    if not planned or planned[-1] in batch_ids(checkpoint / "commits"):
        return None
    ahead = planned_offsets(checkpoint, topic, planned[-1])
    committed = committed_offsets(checkpoint, topic)
    return planned[-1] if sum(ahead.values()) > sum(committed.values()) else None


@contextlib.contextmanager
def frozen(pids: list[int]) -> Iterator[None]:
    """Stop ``pids`` (SIGSTOP), so what they have written holds still while it is read."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGCONT)


def test_sigkill_and_restart_lose_no_alert_and_a_replay_matches(
    isolated: Isolated, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    raw, alerts = isolated.topics.telemetry_raw, isolated.topics.alerts
    checkpoint = versioned(tmp_path / "checkpoints", "score", PLAN_VERSION)
    devices = [f"d{isolated.tag}-{i}" for i in range(DEVICES)]
    producer = Producer(client_config(isolated.settings.kafka))

    first = isolated.start("score", "score")
    wait_until(lambda: (checkpoint / "metadata").exists(), 120, "the scoring query to start")
    produce(producer, raw, devices, range(0, 60))
    wait_until(
        lambda: committed_offsets(checkpoint, raw) == isolated.end_offsets(raw),
        120,
        "the scorer to commit the first readings",
    )
    produce(producer, raw, devices, range(60, 100))
    wait_until(
        lambda: committed_offsets(checkpoint, raw) == isolated.end_offsets(raw),
        120,
        "the scorer to commit the readings before the second spike",
    )

    # Kill the scorer while the micro-batch with the second spike is planned but not committed:
    # its JVM is frozen the moment the batch's offsets are in the checkpoint without a commit,
    # that is checked again on the frozen files, and then the driver and its JVM are killed. A
    # batch that committed in between is let go, and more readings make another one.
    jvms = children(first.pid)
    assert jvms, "the scorer's JVM"
    killed: int | None = None
    seq = 100
    while killed is None and seq < READINGS:
        step = 10 if seq == 100 else 1
        produce(producer, raw, devices, range(seq, seq + step))
        seq += step
        if not wait_for(lambda: uncommitted_batch(checkpoint, raw) is not None, 30, 0.005):
            continue
        with frozen(jvms):
            killed = uncommitted_batch(checkpoint, raw)
            if killed is not None:
                for pid in [first.pid, *jvms]:
                    os.kill(pid, signal.SIGKILL)
    assert killed is not None, "no kill landed on a micro-batch under way"
    first.wait(10)
    del isolated.procs["score"]
    wait_until(lambda: not any(alive(p) for p in jvms), 60, "the killed scorer's JVM to exit")
    committed = committed_offsets(checkpoint, raw)
    ends_at_kill = isolated.end_offsets(raw)
    assert not (checkpoint / "commits" / str(killed)).exists(), f"batch {killed} committed"
    assert sum(planned_offsets(checkpoint, raw, killed).values()) > sum(committed.values())
    assert sum(committed.values()) < sum(ends_at_kill.values()), "readings left uncommitted"
    logger.info(
        "killed during micro-batch %d (readings up to seq %d produced): committed %s, "
        "planned %s, topic end %s",
        killed,
        seq - 1,
        committed,
        planned_offsets(checkpoint, raw, killed),
        ends_at_kill,
    )
    produce(producer, raw, devices, range(seq, READINGS))

    isolated.start("score-again", "score")
    ends = isolated.end_offsets(raw)
    assert sum(ends.values()) == DEVICES * READINGS
    # the whole log is written: its replay, with the same code into another topic, runs
    # beside the restarted scorer (a fresh checkpoint of its own), compared with it below
    replayed = f"{alerts}.replay"
    replay = isolated.start("replay", "replay", "--output-topic", replayed)
    request.addfinalizer(lambda: delete_topics(isolated.settings.kafka, [replayed]))
    wait_until(
        lambda: committed_offsets(checkpoint, raw) == ends, 180, "the restarted scorer to catch up"
    )
    live = [json.loads(r.value) for r in isolated.read_all(alerts, 4 * DEVICES)]

    # every episode, once: two per device, each opened and resolved, under one id
    by_event: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in live:
        by_event[event["event_id"]].append({k: v for k, v in event.items() if k not in IGNORED})
    assert all(all(c == copies[0] for c in copies) for copies in by_event.values())
    episodes: dict[str, list[str]] = defaultdict(list)
    for event_id in sorted(by_event, key=lambda e: int(e.rsplit(".", 1)[1])):
        episodes[event_id.rsplit(".", 1)[0]].append(by_event[event_id][0]["status"])
    found = sorted({(e["device_id"], e["start_ms"] - T0) for c in by_event.values() for e in c})
    assert len(episodes) == 2 * DEVICES, f"episodes (device, start - T0): {found}"
    assert all(statuses == ["open", "resolve"] for statuses in episodes.values())
    starts = sorted((e["device_id"], e["start_ms"]) for c in by_event.values() for e in c[:1])
    assert {s for _, s in starts} == {T0 + 40_000, T0 + 100_000}

    # the same log, replayed with the same code into another topic: the same events
    isolated.stop("score-again")  # it has done its part: the replay has the machine
    code = replay.wait(timeout=300)
    tail = "\n".join((tmp_path / "replay.log").read_text().splitlines()[-15:])
    assert code == 0, f"the replay exited {code}:\n{tail}"
    again = isolated.read_all(replayed, len(live))
    assert len(again) == len(by_event), f"{len(again)} replayed events; replay said:\n{tail}"
    compared = fleetwatch("replay", "diff", alerts, replayed, env=isolated.env)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert f"{len(by_event)} identical" in compared.stdout
