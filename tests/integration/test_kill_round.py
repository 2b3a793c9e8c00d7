"""The ``kill -9`` round: while a normal fleet and hostile devices publish, the gateway, the
scorer, the trainer, the API, Kafka and Mosquitto are each killed with SIGKILL and started
again: the gateway and the API in turn while the Spark stages start, then the scorer and the
trainer together once each has committed a batch, then Kafka and Mosquitto in turn, each kill
only once what was killed before it has resumed. Then:

- no accepted reading is lost: every message the MQTT broker acknowledged (PUBACK at QoS 1) is
  on ``telemetry.raw`` (by device and seq) or, for a hostile one, among the dead letters;
- no alert is duplicated under a new id: each labelled spike of the normal fleet opens one
  episode per detector (one ``alert_id``), whose ``open`` event has one ``event_id``; a batch
  the scorer computed again after its kill may repeat an event, with the same id and content.

It kills the shared stack's brokers: ``finally`` brings the stack back up, whatever failed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import KafkaException

from fleetwatch.contracts.telemetry import reading_payload
from fleetwatch.simulator import hostile
from fleetwatch.stack.kafka import KafkaBroker
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.mosquitto import MosquittoBroker
from fleetwatch.stack.processes import ManagedProcess
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION as SCORE_PLAN
from fleetwatch.streaming.scorer.replay import IGNORED
from fleetwatch.streaming.trainer.job import PLAN_VERSION as TRAIN_PLAN
from tests.integration.acked_fleet import AckedFleet, Message
from tests.integration.conftest import Isolated, Record
from tests.integration.processes import batch_ids, gone, kill_tree
from tests.integration.topic_reads import read, stable_end
from tests.polling import wait_until

logger = logging.getLogger(__name__)

DEVICES, RATE = 4, 24.0
"""Normal devices, and messages a second in all (one in HOSTILE_EVERY a hostile device's)."""
SPIKE_EVERY, SPIKE = 40, 50.0
"""Every SPIKE_EVERY-th reading of a normal device is a spike (temperature ~21 otherwise), from
the first on: before a device's parameters judge, the fixed baseline does."""
BUDGET = "1000000"
"""``score.false_alerts_per_device_day`` of the stages: a spike every 40th reading is thousands
a day, which the default budget of 1 would learn as the stream's normal (as it should: a
detector's threshold rises to what the stream does that often); this test is about exactly-once
alerts across kills, so every spike stays one."""
HOSTILE_EVERY = 8
STAGES = {
    "gateway": ("gateway",),
    "score": ("score",),
    "train": ("train",),
    "api": ("api", "--anonymous-read"),
}
PLAIN_STAGES = ("gateway", "api")
"""Killed in turn, each back within seconds: while the Spark stages start."""
SPARK_STAGES = ("score", "train")
"""Killed together: a Spark stage's restart (its JVM, its Python workers, a first batch) is the
round's longest wait, and neither stage waits for the other."""


def is_spike(seq: int) -> bool:
    return seq % SPIKE_EVERY == SPIKE_EVERY - 1


def temperature(d: int, seq: int) -> float:
    if is_spike(seq):
        return SPIKE
    return 21.0 + 0.1 * ((seq * 7 + d) % 5 - 2)


def normal_reading(d: int, seq: int, now_ms: int) -> bytes:
    return reading_payload(seq, now_ms, now_ms, {"temperature": temperature(d, seq)})


def hostile_payload(name: str, index: int, now_ms: int) -> bytes:
    return hostile.mqtt_messages(now_ms)[name][index]


def messages(isolated: Isolated, normal: list[str], prefix: str) -> Iterator[Message]:
    """The normal fleet round by round, a hostile device's message every HOSTILE_EVERY-th,
    cycling through every hostile case but the oversized one (endless: the test stops it)."""
    cases = [
        (name, i)
        for name, payloads in hostile.mqtt_messages(0).items()
        if name != "oversized"
        for i in range(len(payloads))
    ]
    hostile_cycle = itertools.cycle(cases)
    root = isolated.mqtt_root
    n = 0
    for seq in itertools.count():
        for d, device in enumerate(normal):
            yield (device, seq), f"{root}/{device}/telemetry", partial(normal_reading, d, seq)
            n += 1
            if n % HOSTILE_EVERY == 0:
                name, i = next(hostile_cycle)
                device_h = f"{prefix}{name}"
                tag = ("hostile", device_h, name, i, n)
                yield tag, f"{root}/{device_h}/telemetry", partial(hostile_payload, name, i)


def raw_total(isolated: Isolated) -> int:
    """Records on the raw topic (-1 while Kafka cannot say: a broker just restarted)."""
    try:
        return sum(isolated.end_offsets(isolated.topics.telemetry_raw).values())
    except KafkaException:
        return -1


def flowing(isolated: Isolated, fleet: AckedFleet, what: str) -> None:
    """Readings are flowing now: the broker acknowledges new ones and ``telemetry.raw`` grows."""
    acked, total = fleet.acknowledged(), raw_total(isolated)
    wait_until(lambda: fleet.acknowledged() > acked, 30, f"new acknowledgements {what}")
    wait_until(lambda: raw_total(isolated) > total, 60, f"new readings on the raw topic {what}")


def last_commit(checkpoint: Path) -> int:
    ids = batch_ids(checkpoint / "commits")
    return ids[-1] if ids else -1


def kill_stage(isolated: Isolated, name: str) -> None:
    """SIGKILL a stage's process tree and start it again (as ``{name}-again``)."""
    proc = isolated.procs.pop(name)
    kill_tree(proc.pid)
    proc.wait(10)
    isolated.start(f"{name}-again", *STAGES[name])


@dataclass(frozen=True)
class Progress:
    """Where the pipeline is: records on the raw topic, the scorer's and the trainer's last
    committed micro-batch."""

    raw: int
    score: int
    train: int

    @classmethod
    def of(cls, isolated: Isolated, score_cp: Path, train_cp: Path) -> Progress:
        return cls(raw_total(isolated), last_commit(score_cp), last_commit(train_cp))


def scored_past(checkpoint: Path, batch: int) -> bool:
    return last_commit(checkpoint) > batch


def api_ready(api: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{api}/readyz", timeout=2).status_code == 200
    return False


def terminate(isolated: Isolated, *stages: str) -> None:
    """SIGTERM the restarted ``stages`` and go on: they shut down while the test reads (the
    fixture waits for each to exit 0, as it does for a stage still running)."""
    for stage in stages:
        isolated.procs[f"{stage}-again"].send_signal(signal.SIGTERM)


def kill_broker(process: ManagedProcess, start: Callable[[], object]) -> None:
    pid = process.pid()
    assert pid is not None, f"{process.name} is not running"
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid), 30, f"{process.name} to die")
    start()


def test_kill_9_of_every_stage_and_broker_loses_no_reading_and_duplicates_no_alert(
    isolated: Isolated, tmp_path: Path
) -> None:
    settings, topics = isolated.settings, isolated.topics
    score_cp = versioned(tmp_path / "checkpoints", "score", SCORE_PLAN)
    train_cp = versioned(tmp_path / "checkpoints", "train", TRAIN_PLAN)
    api = f"http://127.0.0.1:{isolated.api_port}"
    isolated.env["FLEETWATCH_SCORE__FALSE_ALERTS_PER_DEVICE_DAY"] = BUDGET  # restarts too
    # no MLflow run: neither a reading nor an alert goes through it, and it held up each start
    # of the trainer by seconds (its run made before the query starts) and each batch after
    isolated.env["FLEETWATCH_TRAIN__TRACKING"] = "false"
    for name, args in STAGES.items():
        isolated.start(name, *args)
    normal = [f"k{isolated.tag}-{d}" for d in range(DEVICES)]
    fleet = AckedFleet(
        settings, messages(isolated, normal, f"h{isolated.tag}-"), RATE, f"kill9-{isolated.tag}"
    )
    kafka, mosquitto = KafkaBroker(settings), MosquittoBroker(settings)
    log = ""
    started = time.monotonic()

    def kill(name: str) -> Callable[[], bool]:
        """SIGKILL the stage ``name`` and start it again; returns whether it has resumed."""
        kill_stage(isolated, name)
        # measured once the killed process can write nothing more: what comes after is the
        # restarted one's
        before = Progress.of(isolated, score_cp, train_cp)

        def back() -> bool:
            now = Progress.of(isolated, score_cp, train_cp)
            if name == "score":
                return now.score > before.score
            if name == "train":
                return now.train > before.train
            if name == "api":
                return api_ready(api)
            return now.raw > before.raw  # the gateway: readings reach Kafka again

        return back

    def took(name: str, killed_at: float) -> str:
        """The log's line of ``name`` killed at ``killed_at``, back now."""
        return (
            f"{name}: killed at {killed_at - started:.0f} s, "
            f"resumed {time.monotonic() - killed_at:.0f} s later\n"
        )

    def resumed(name: str, back: Callable[[], bool], killed_at: float) -> str:
        wait_until(back, 180, f"the {name} to resume after kill -9")
        return took(name, killed_at)

    try:
        with isolated.mqtt_client() as client:
            # the fleet's first reading has a subscriber (the scorer reads from the earliest)
            isolated.await_gateway(client)
        fleet.start()
        wait_until(partial(api_ready, api), 60, "the API")
        log += f"readings flowing and the API up after {time.monotonic() - started:.0f} s\n"
        for name in PLAIN_STAGES:  # while the Spark stages start
            flowing(isolated, fleet, f"before the {name} is killed")
            killed_at = time.monotonic()
            log += resumed(name, kill(name), killed_at)
        wait_until(lambda: last_commit(score_cp) >= 1, 180, "the scorer's first batches")
        wait_until(lambda: last_commit(train_cp) >= 0, 180, "the trainer's first batch")
        flowing(isolated, fleet, "before the Spark stages are killed")
        killed_at = time.monotonic()
        backs = {name: kill(name) for name in SPARK_STAGES}
        for name, back in backs.items():
            log += resumed(name, back, killed_at)
        for name in ("kafka", "mosquitto"):
            flowing(isolated, fleet, f"before the {name} is killed")
            killed_at = time.monotonic()
            broker = kafka if name == "kafka" else mosquitto
            kill_broker(broker.proc, broker.start)
            broker.wait_ready()
            # back: the fleet's new readings are acknowledged, reach Kafka, and are scored
            flowing(isolated, fleet, f"after {name} came back")
            wait_until(
                partial(scored_past, score_cp, last_commit(score_cp)),
                120,
                "the scorer to go on",
            )
            log += took(name, killed_at)
        flowing(isolated, fleet, "after the round")
    finally:
        fleet.stop()
        fleet.join(60)
        Stack(settings).up()  # the brokers as they were, for the tests after this one
    logger.info("kill round:\n%s", log)
    print(f"kill round:\n{log}")  # noqa: T201 - shown with -s: where the test's time went
    assert not fleet.is_alive()
    for name, proc in isolated.procs.items():
        assert proc.poll() is None, f"{name} stopped; logs in {tmp_path}"
    # what is checked from here on is on Kafka and in the scorer's checkpoint: the trainer and
    # the API have no part in it, the gateway and the scorer none once every reading is scored
    terminate(isolated, "train", "api")

    # -- no accepted reading lost: each on the raw topic, however late it comes --------------
    accepted_normal = {t for t in fleet.published if t[0] != "hostile"}
    on_raw: dict[tuple[str, int], dict[str, Any]] = {}

    def every_accepted_reading_on_raw() -> bool:
        on_raw.clear()
        for record in read(isolated, topics.telemetry_raw):  # the first copy is the one scored
            reading = json.loads(record.value)
            on_raw.setdefault((reading["device_id"], reading["seq"]), reading)
        return accepted_normal <= on_raw.keys()

    with contextlib.suppress(AssertionError):
        wait_until(every_accepted_reading_on_raw, 90, "the accepted readings", interval_s=0.5)
    lost = accepted_normal - on_raw.keys()
    assert not lost, (
        f"{len(lost)} accepted readings not on the raw topic: {sorted(lost)[:5]}; "
        f"{fleet.dropped(lost)} of them acknowledged with no subscriber"
    )
    ends = stable_end(isolated, topics.telemetry_raw)
    wait_until(
        lambda: committed_offsets(score_cp, topics.telemetry_raw) == ends,
        180,
        "the scorer to commit every reading",
    )
    terminate(isolated, "gateway", "score")
    stable_end(isolated, topics.telemetry_deadletter)
    every_accepted_reading_on_raw()
    dead = read(isolated, topics.telemetry_deadletter)
    assert_hostile_accounted(fleet, on_raw, dead)

    # -- no alert duplicated under a new id -------------------------------------------------
    alerts = [json.loads(r.value) for r in read(isolated, topics.alerts)]
    spikes: dict[str, list[int]] = defaultdict(list)
    for (device, seq), reading in sorted(on_raw.items()):
        if device in normal and is_spike(seq):
            spikes[device].append(int(reading["event_ms"]))
    assert sum(map(len, spikes.values())) >= 10, f"too few spikes accepted: {dict(spikes)}"
    assert_one_episode_per_spike([e for e in alerts if e["device_id"] in normal], spikes)


def assert_hostile_accounted(
    fleet: AckedFleet, on_raw: dict[tuple[str, int], Any], dead: list[Record]
) -> None:
    """Each hostile message the broker acknowledged is on the raw topic (its device and seq)
    or among its device's dead letters (the payload, or its first bytes when capped)."""
    dead_by_device: dict[str, set[bytes]] = defaultdict(set)
    for d in dead:
        dead_by_device[d.key.decode() if d.key else ""].add(d.value)
    for tag in (t for t in fleet.published if t[0] == "hostile"):
        _, device, name, _, _ = tag
        payload = fleet.payloads[tag]
        try:
            seq = json.loads(payload).get("seq")
        except (ValueError, AttributeError, RecursionError):
            seq = None
        if seq is not None and (device, seq) in on_raw:
            continue
        assert any(payload.startswith(v) for v in dead_by_device[device]), (
            f"{name}: acknowledged, neither on the raw topic nor dead-lettered: {payload[:80]!r}"
        )


def assert_one_episode_per_spike(
    events: list[dict[str, Any]], spikes: dict[str, list[int]]
) -> None:
    """Every event id's copies are the same event; an episode opens under one event id; each
    spike (device → its spikes' event times) opens a temperature episode, and no detector opens
    a second episode of the device and metric before the next spike."""
    by_event: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_event[e["event_id"]].append({k: v for k, v in e.items() if k not in IGNORED})
    for event_id, copies in by_event.items():
        assert all(c == copies[0] for c in copies), f"{event_id} repeated with other content"
    opens: dict[str, set[str]] = defaultdict(set)
    starts: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for e in events:
        if e["status"] == "open":
            opens[e["alert_id"]].add(e["event_id"])
            starts[(e["device_id"], e["metric"], e["detector"])].add(e["start_ms"])
    twice = {a: ids for a, ids in opens.items() if len(ids) > 1}
    assert not twice, f"episodes opened under more than one event id: {twice}"

    missed = []
    for device, times in sorted(spikes.items()):
        for spike_ms, next_ms in zip(times, [*times[1:], 2**63], strict=True):
            for (d, metric, detector), opened in starts.items():
                within = sorted(s for s in opened if d == device and spike_ms <= s < next_ms)
                assert len(within) <= 1, f"{device} {metric} {detector}: episodes at {within}"
            if not any(
                spike_ms in opened
                for (d, metric, _), opened in starts.items()
                if d == device and metric == "temperature"
            ):
                missed.append((device, spike_ms))
    assert not missed, f"spikes not alerted: {missed}"
