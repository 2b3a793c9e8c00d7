"""The whole path under load: simulator → MQTT → gateway → Kafka → scorer → ``alerts``.

1,000 simulated devices publish (QoS 1) and make the load; ``PROBES`` probe devices publish
alongside them over the same MQTT broker at 1 reading/s, a spike (60 against the fixed
baseline's 21 ± 8) every ``PROBE_SPIKE_EVERY`` readings at a known publish time. Latency = the
spike's publish time to its ``open`` alert event arriving at a Kafka consumer. (The simulated
fleet's own devices run at levels of their kind, so the fixed baseline is no ground truth for
them; the probes are.) Two phases, 1,000 and 5,000 readings/s;
the ingest hop alone (a probe reading's publish → its arrival on ``telemetry.raw``) is the
baseline of the same run.

Then the scorer's maximum sustainable throughput: a backlog of ``BACKLOG`` readings of the same
fleet written straight to a fresh ``telemetry.raw``, scored by a fresh scorer in micro-batches
of at most ``BATCH`` records. Throughput = records committed per second from the batch that
took it past ``WARM`` of the backlog to the last (a rate it keeps while its lag shrinks is a
rate it sustains); the first batches of a fresh JVM run beside its JIT compilers (~0.6 of the
2 cores here), so their rate is reported apart, as ``cold_throughput_rps`` (first committed
batch to ``WARM``). ``--skip-latency`` runs the backlog alone and writes its own results file,
``pipeline-max_throughput.json``, so the latency figures of ``pipeline-under_load.json`` stay.

Peak RSS is of the scorer's whole process tree (Python driver, JVM, Python workers).

Where each phase's latency went (:mod:`bench.pipeline.latency_anatomy`): the scorer keeps every
progress report (``spark.progress_log``) and its JVM logs its GC pauses, and each probe's
latency is split into ingest, the wait for the micro-batch in progress, its own micro-batch
and delivery; the slowest 1 % of probes are printed with the batch they waited on and their
own, the slowest 1 % of batches with their parts (planning, ``addBatch``, state commit and
RocksDB figures, GC pauses within), and the CPU each process used over the phase (the
scorer's driver, JVM and Python workers apart; of the JVM, its JIT compilers and GC threads
also apart) and the Python workers started.

``--repeat N`` runs the phases N times in a row, each with a fresh scorer, and gives each
run's p50 / p95 / p99 and p99 / p50 per phase: one lucky run is never the figure.
``--noise`` is the simulated fleet's (``realistic`` by default, ``gaussian`` the old stream).
``--warmup S``: the fleet runs at 1,000/s for S seconds (15 by default) before the first phase,
each run. A fresh scorer's micro-batches shorten for minutes as its JIT compilers work through
Spark's code, so each phase also gives the p50 of its batches in its first, middle and last
third (``batch_p50_ms_by_third``): a falling row is a scorer still warming up.

What a reading costs: each phase gives the cores every process used (gateway, Mosquitto,
Kafka, the scorer's driver, JVM and workers, the trainer's with ``--trainer``, and the load
generator as ``bench``), the same as CPU microseconds per reading offered
(``cpu_us_per_reading``), and ``pipeline_cores``: their sum without the load generator.

A :class:`Pipeline` is started once and runs any number of phases; a run here is one
pipeline's warm-up and its two phases. ``bench/pipeline/sustainable_rate.py`` steps the offered
rate up on one pipeline instead.

    python bench/pipeline/under_load.py [--seconds 60] [--repeat 3] [--skip-max | --skip-latency]
        [--warmup S] [--trainer]

Last line: {"p50_ms_1k": [per run], "p99_ms_1k", "p50_ms_5k", "p95_ms_5k", "p99_ms_5k",
"p99_over_p50_1k", "p99_over_p50_5k", "jit_cores" ([1k], [5k]),
"load_avg_1m", "max_throughput_rps", "cold_throughput_rps", "peak_rss_mb",
"pipeline_cores_1k", "pipeline_cores_5k", "cpu_us_per_reading_1k", "cpu_us_per_reading_5k"};
with ``--skip-latency``: {"max_throughput_rps", "cold_throughput_rps", "backlog", "batches",
"max_peak_rss_mb"}.
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
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import (
    RESULTS,
    CpuShares,
    end_gateway_session,
    isolated_env,
    load_avg_1m,
    percentile,
    stage,
    tree_rss_mb,
    wait,
    write_results,
)
from bench.pipeline.latency_anatomy import Batch, batches, decompose, gc_pauses
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.settings import KafkaSettings, Settings
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.simulator.runner import run as run_fleet
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.credentials import login
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.topics import delete_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.scorer.job import PLAN_VERSION

DEVICES, SPIKE_EVERY, BACKLOG, BATCH, WARM = 1000, 25, 1_200_000, 50_000, 0.25
PROBES, PROBE_SPIKE_EVERY = 20, 5
MAX_RESULTS = "pipeline-max_throughput"
"""The results file of a run of the backlog alone (``--skip-latency``)."""


class Probes(threading.Thread):
    """Probe devices: 21.0 normally, 60.0 every PROBE_SPIKE_EVERY-th reading; publish times
    of every reading (``published``) and of the spikes (``sent``) by (device, seq)."""

    def __init__(self, settings: Settings, root: str, tag: str) -> None:
        super().__init__(daemon=True)
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        from fleetwatch.mqtt_config import configure

        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"probe-{tag}")
        configure(self.client, login(settings, "sim"))
        self.client.connect(settings.mqtt.host, settings.mqtt.services_port)
        self.client.loop_start()
        self.root, self.tag = root, tag
        self.prefix = probe_prefix(tag)
        self.sent: dict[tuple[str, int], int] = {}
        self.published: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        from fleetwatch.contracts.telemetry import reading_payload

        seq = 0
        while not self.stop.is_set():
            for i in range(PROBES):
                device = f"{self.prefix}{i}"
                spike = (seq + i) % PROBE_SPIKE_EVERY == 0
                at = now_ms()
                payload = reading_payload(seq, at, at, {"temperature": 60.0 if spike else 21.0})
                self.client.publish(f"{self.root}/{device}/telemetry", payload, qos=1)
                self.published[(device, seq)] = at
                if spike:
                    self.sent[(device, seq)] = at
            seq += 1
            self.stop.wait(1.0)
        self.client.loop_stop()
        self.client.disconnect()


def probe_prefix(tag: str) -> str:
    """The probe devices' ids start with this (the key of their records on every topic)."""
    return f"p{tag}-"


class Watch(threading.Thread):
    """First arrival on a topic of each (device, seq) of the probe devices (records keyed by
    a device id starting with ``prefix``; others are not parsed); with ``rule_id``, of that
    operator rule's alerts only."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        prefix: str,
        only_open: bool,
        rule_id: str | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer(
            client_config(
                kafka,
                {
                    "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 10,
                },
            )
        )
        self.consumer.subscribe([topic])
        self.prefix, self.only_open, self.rule_id = prefix.encode(), only_open, rule_id
        self.arrived: dict[tuple[str, int], int] = {}  # (device, seq) -> arrival ms
        self.event_ms: dict[tuple[str, int], int] = {}  # (device, seq) -> the record's event_ms
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for msg in self.consumer.consume(1000, timeout=0.05):
                if msg.error() is not None or not (msg.key() or b"").startswith(self.prefix):
                    continue
                arrived = now_ms()
                value = json.loads(msg.value() or b"{}")
                if self.only_open and value.get("status") != "open":
                    continue
                if self.rule_id is not None and value.get("rule_id") != self.rule_id:
                    continue
                key = (value["device_id"], value["seq"])
                self.arrived.setdefault(key, arrived)
                self.event_ms.setdefault(key, value.get("event_ms", arrived))
        self.consumer.close()

    def latencies(self, published: dict[tuple[str, int], int]) -> list[float]:
        """Arrival - publish time of each published (device, seq) that arrived."""
        return [float(self.arrived[k] - t) for k, t in published.items() if k in self.arrived]


WORKER_START = b"Starting Streaming TransformWithStateInPandas Python worker"


def worker_starts(log: Path) -> int:
    """The scorer's Python workers started so far (each says so once in its log)."""
    return log.read_bytes().count(WORKER_START) if log.exists() else 0


class Pipeline:
    """The whole path, started once: the gateway and the scorer (and the trainer) as processes
    on topics of their own, the probes publishing, and watches on ``telemetry.raw`` and
    ``alerts``. :meth:`phase` feeds it the fleet at a rate and gives the phase's figures; a
    pipeline runs any number of phases, one after another. Leaving the ``with`` block stops
    the probes, the watches and the stages (joined), ends the gateway's MQTT session and
    deletes the topics; ``peak_rss_mb`` is then the scorer's peak over all its phases."""

    def __init__(self, settings: Settings, noise: str, trainer: bool = False) -> None:
        self.settings, self.noise, self.trainer = settings, noise, trainer
        self.tag = uuid.uuid4().hex[:8]
        self.run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-e2e-"))
        self.progress, self.gc_log = self.run_dir / "progress.jsonl", self.run_dir / "gc.log"
        self.checkpoint = versioned(self.run_dir / "checkpoints", "score", PLAN_VERSION)
        self.stage_procs: list[subprocess.Popen[bytes]] = []
        self.probes: Probes | None = None
        self.sampling = threading.Event()
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.peak_rss_mb = 0.0
        self.phases_run = 0

    def __enter__(self) -> Pipeline:
        settings, run_dir = self.settings, self.run_dir
        self.topics, self.env = isolated_env(settings, self.tag, run_dir)
        self.env["FLEETWATCH_SPARK__PROGRESS_LOG"] = str(self.progress)
        java = settings.spark.java_options
        gc = f"-Xlog:gc:file={self.gc_log}:time"
        self.env["FLEETWATCH_SPARK__JAVA_OPTIONS"] = f"{java} {gc}".strip()
        commands = {"gateway": "gateway", "scorer": "score"}
        commands |= {"trainer": "train"} if self.trainer else {}
        self.stage_procs = [stage(self.env, run_dir, c, c) for c in commands.values()]
        stages = dict(zip(commands, (p.pid for p in self.stage_procs), strict=True))
        brokers = {c.name: c.pid for c in Stack(settings).status() if c.pid}
        self.shares = CpuShares({**stages, **brokers}, ["scorer", "trainer"])
        prefix = probe_prefix(self.tag)
        self.ingest = Watch(settings.kafka, self.topics.telemetry_raw, prefix, only_open=False)
        self.alerts = Watch(settings.kafka, self.topics.alerts, prefix, only_open=True)
        try:
            first = self.checkpoint / "commits" / "0"
            wait(first.exists, 180, "the scorer's first batch")
            self.ingest.start()
            self.alerts.start()
            self.sampler.start()
            self.probes = Probes(settings, f"b{self.tag}/devices", self.tag)
            self.probes.start()
        except BaseException:
            self.close()
            raise
        self.mqtt = login(settings, "sim").model_copy(update={"root": f"b{self.tag}/devices"})
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _sample(self) -> None:
        scorer = self.stage_procs[1].pid  # after the gateway
        while not self.sampling.is_set():
            self.peak_rss_mb = max(self.peak_rss_mb, round(tree_rss_mb(scorer), 1))
            self.sampling.wait(1.0)

    def close(self) -> None:
        self.sampling.set()
        if self.probes is not None:
            self.probes.stop.set()
        self.ingest.stop.set()
        self.alerts.stop.set()
        for thread in (self.sampler, self.probes, self.ingest, self.alerts):
            if thread is not None and thread.ident is not None:
                thread.join()
        running = [p for p in self.stage_procs if p.poll() is None]
        for p in running:
            p.send_signal(signal.SIGTERM)
        for p in running:
            p.wait(120)
        end_gateway_session(self.settings, self.env)
        delete_topics(self.settings.kafka, self.topics.model_dump().values())

    def phase(self, label: str, rate: float, seconds: int) -> dict[str, Any]:
        """Publish the fleet at ``rate`` readings/s a device for ``seconds``, wait for the
        scorer to commit every reading, and give the phase's figures (printed too; with the
        latency's anatomy, but for a phase labelled ``warmup``)."""
        assert self.probes is not None, "a phase runs inside the pipeline's with block"
        kafka, topic, run_dir = self.settings.kafka, self.topics.telemetry_raw, self.run_dir
        self.phases_run += 1
        scenario = Scenario(
            devices=DEVICES,
            rate=rate,
            count=int(rate * seconds),
            seed=11,
            qos=1,
            prefix=f"b{self.tag}",
            # one publisher process keeps 5,000/s on time and costs the shared 2 cores
            # 80 µs CPU a reading; two cost 135 (the hand-off between processes)
            workers=1,
        ).with_overrides(spike_every=SPIKE_EVERY, noise=self.noise)
        lo = now_ms()
        self.shares.start()
        workers_before = worker_starts(run_dir / "score.log")
        truth = run_dir / f"truth-{self.phases_run}-{label}.jsonl"
        totals = run_fleet(scenario, self.mqtt, threading.Event(), truth)
        cores = self.shares.cores()
        ends = None

        def caught_up() -> bool:
            nonlocal ends
            ends = ends or end_offsets(kafka, topic)
            done = committed_offsets(self.checkpoint, topic) or {}
            return all(done.get(p, 0) >= end for p, end in ends.items())

        published_until = now_ms()
        wait(caught_up, 300, "the scorer to catch up")
        caught_up_ms = now_ms() - published_until
        cpu_s = self.shares.seconds()  # the catch-up's work is the readings' too
        time.sleep(2)  # the last batch's alerts reach the consumer
        hi = now_ms()
        published = {k: t for k, t in list(self.probes.published.items()) if lo <= t <= hi}
        base = self.ingest.latencies(published)
        sent = {k: t for k, t in list(self.probes.sent.items()) if lo <= t <= hi - 20_000}
        lat = self.alerts.latencies(sent)
        phase = [b for b in batches(self.progress) if lo <= b.start_ms <= hi]  # this phase's
        pauses = [p for p in gc_pauses(self.gc_log) if lo <= p[0] <= hi]
        parts = decompose(sent, self.ingest.arrived, self.alerts.arrived, phase, pauses)
        offered = totals.sent / max(1e-3, (published_until - lo) / 1000)
        out: dict[str, Any] = {
            "offered_rps": round(offered, 1),
            "readings": totals.sent,
            "probe_spikes": len(sent),
            "probe_spikes_without_alert": len(sent) - len(lat),
            "p50_ms": percentile(lat, 50),
            "p95_ms": percentile(lat, 95),
            "p99_ms": percentile(lat, 99),
            "ingest_p50_ms": percentile(base, 50),
            "ingest_p99_ms": percentile(base, 99),
            "load_avg_1m": load_avg_1m(),
            "cores": cores,
            "cpu_us_per_reading": cpu_per_reading(cpu_s, totals.sent),
            "pipeline_cores": pipeline_cores(cores),
            "catch_up_ms": caught_up_ms,
            "python_worker_starts": worker_starts(run_dir / "score.log") - workers_before,
            "batch_p50_ms_by_third": by_third(phase),
        }
        print(f"{label}: {out}", flush=True)
        if label != "warmup":
            out["anatomy"] = parts
            show_anatomy(parts)
        return out


def latency_phases(
    settings: Settings,
    seconds: int,
    rates: list[float],
    noise: str,
    warmup_s: int,
    trainer: bool = False,
) -> dict[str, Any]:
    """One run on a fresh pipeline: ``warmup_s`` seconds at 1,000/s, then a phase of
    ``seconds`` at each of ``rates`` (readings/s a device), keyed ``warmup``, ``1k``, ``5k``…"""
    out: dict[str, Any] = {}
    with Pipeline(settings, noise, trainer) as pipe:
        out["warmup"] = pipe.phase("warmup", 1.0, warmup_s)
        for rate in rates:
            label = f"{int(DEVICES * rate / 1000)}k"
            out[label] = pipe.phase(label, rate, seconds)
    out["peak_rss_mb"] = pipe.peak_rss_mb
    return out


STAGE_PARTS = ("gateway", "mosquitto", "kafka", "scorer", "trainer")
"""The pipeline's processes in :class:`CpuShares` (a Spark job by its driver, JVM and workers;
its JVM's ``_jit`` and ``_gc`` threads are part of the JVM's figure and are not added again)."""


def pipeline_cores(cores: dict[str, float]) -> float:
    """Cores (or CPU seconds) the pipeline used, without the load generator (``bench``)."""
    return round(
        sum(
            v
            for k, v in cores.items()
            if k.startswith(STAGE_PARTS) and not k.endswith(("_jit", "_gc"))
        ),
        3,
    )


def cpu_per_reading(cpu_s: dict[str, float], readings: int) -> dict[str, float]:
    """CPU microseconds per reading of every process (and of the pipeline without the load
    generator, ``pipeline``): its CPU from the phase's start until the scorer caught up,
    over the readings published."""
    if readings <= 0:
        return {}
    out = {k: round(v * 1e6 / readings, 1) for k, v in cpu_s.items()}
    out["pipeline"] = round(pipeline_cores(cpu_s) * 1e6 / readings, 1)
    return out


def by_third(phase: list[Batch]) -> list[float | None]:
    """The p50 duration of the phase's micro-batches with rows, in its first, middle and
    last third: a scorer still warming up runs shorter batches as the phase goes on."""
    data = [b.duration_ms for b in phase if b.rows > 0]
    cut = [data[i * len(data) // 3 : (i + 1) * len(data) // 3] for i in range(3)]
    return [percentile([float(d) for d in part], 50) for part in cut]


def max_throughput(settings: Settings) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-max-"))
    topics, env = isolated_env(settings, tag, run_dir)
    env["FLEETWATCH_SCORE__MAX_OFFSETS_PER_TRIGGER"] = str(BATCH)
    kafka = settings.kafka
    producer = Producer(client_config(kafka, {"linger.ms": 20}))
    t0 = now_ms() - BACKLOG // DEVICES * 1000
    rng = np.random.default_rng(5)
    for i in range(BACKLOG):
        device, seq = f"m{i % DEVICES}", i // DEVICES
        event_ms = t0 + seq * 1000
        value = 21.0 + rng.normal(0, 0.5) + (30.0 if seq % SPIKE_EVERY == 7 else 0.0)
        record = {
            "v": 1,
            "device_id": device,
            "seq": seq,
            "event_ms": event_ms,
            "device_event_ms": event_ms,
            "device_sent_ms": event_ms,
            "received_ms": event_ms + 5,
            "clock_offset_ms": 0,
            "metrics": {"temperature": value},
        }
        producer.produce(
            topics.telemetry_raw,
            json.dumps(record).encode(),
            key=device.encode(),
            timestamp=event_ms,  # the gateway's records carry their event time
        )
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)
    scorer = stage(env, run_dir, "score", "score")
    checkpoint = versioned(run_dir / "checkpoints", "score", PLAN_VERSION)
    commits = checkpoint / "commits"
    marks: list[tuple[float, int]] = []
    peak = 0.0
    try:
        ends = end_offsets(kafka, topics.telemetry_raw)
        total = sum(ends.values())
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            peak = max(peak, tree_rss_mb(scorer.pid))
            done = committed_offsets(checkpoint, topics.telemetry_raw) if commits.exists() else {}
            n = sum(done.values()) if done else 0
            if not marks or n != marks[-1][1]:
                marks.append((time.monotonic(), n))
            if n >= total:
                break
            time.sleep(0.5)
    finally:
        scorer.send_signal(signal.SIGTERM)
        scorer.wait(120)
        delete_topics(kafka, topics.model_dump().values())
    first = next((m for m in marks if m[1] > 0), None)
    warm = next((m for m in marks if m[1] >= WARM * total), None)
    last = marks[-1]
    if first is None or warm is None or not first[0] < warm[0] < last[0]:
        return {"max_throughput_rps": float("nan"), "max_peak_rss_mb": round(peak, 1)}
    return {
        "max_throughput_rps": round((last[1] - warm[1]) / (last[0] - warm[0])),
        "cold_throughput_rps": round((warm[1] - first[1]) / (warm[0] - first[0])),
        "backlog": total,
        "batches": len(marks) - 1,
        "max_peak_rss_mb": round(peak, 1),
    }


def show_anatomy(parts: dict[str, Any]) -> None:
    """Print where the phase's latency went and its slowest probes and batches."""
    if not parts.get("probes"):
        print("   (no probe matched with a batch)")
        return
    for name in ("latency", "ingest", "wait", "batch", "deliver"):
        print(f"   {name:8s} {parts[name]}")
    b = parts["batches"]
    print(
        f"   batches: {b['n']}, p50 {b['p50']} ms, p99 {b['p99']} ms; "
        f"GC pauses {b['gc_pauses']} (p99 {b['gc_ms_p99']} ms)"
    )
    for probe in parts["slowest_probes"]:
        head = {k: probe[k] for k in ("latency", "ingest", "wait", "batch", "deliver")}
        print(f"   slow probe {head}")
        print(f"      waited on {probe['waited_on']}")
        print(f"      own batch {probe['own_batch']}")
    for batch in b["slowest"]:
        print(f"   slow batch {batch}")


def summary(runs: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """A phase over the runs: each run's p50 / p99 and their ratio, and the worst p99."""
    p50 = [r[label]["p50_ms"] for r in runs]
    p99 = [r[label]["p99_ms"] for r in runs]
    ratio = [round(b / a, 2) if a and b else None for a, b in zip(p50, p99, strict=True)]
    return {
        "p50_ms": p50,
        "p95_ms": [r[label]["p95_ms"] for r in runs],
        "p99_ms": p99,
        "p99_over_p50": ratio,
        "ingest_p99_ms": [r[label]["ingest_p99_ms"] for r in runs],
        "load_avg_1m": [r[label]["load_avg_1m"] for r in runs],
        "jit_cores": [r[label]["cores"].get("scorer_jvm_jit") for r in runs],
        "worst_p99_ms": max((x for x in p99 if x is not None), default=None),
        "pipeline_cores": [r[label]["pipeline_cores"] for r in runs],
        "cpu_us_per_reading": [r[label]["cpu_us_per_reading"] for r in runs],
    }


def write_max_results(figures: dict[str, Any]) -> None:
    """Write a run of the backlog alone (``--skip-latency``) to its own results file,
    ``MAX_RESULTS``: ``pipeline-under_load.json`` keeps the figures of the last run that had
    latency phases."""
    with tempfile.TemporaryDirectory() as tmp:
        record = json.loads(write_results(__file__, figures, Path(tmp)).read_text())
    record["bench"] = MAX_RESULTS
    (RESULTS / f"{MAX_RESULTS}.json").write_text(json.dumps(record, indent=2) + "\n")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="length of each latency phase")
    parser.add_argument("--repeat", type=int, default=1, help="consecutive runs of the phases")
    parser.add_argument(
        "--noise", choices=("realistic", "gaussian"), default="realistic", help="the fleet's"
    )
    parser.add_argument("--skip-max", action="store_true", help="latency phases only")
    parser.add_argument("--skip-latency", action="store_true", help="the backlog only")
    parser.add_argument(
        "--warmup", type=int, default=15, help="seconds at 1,000/s before the first phase"
    )
    parser.add_argument("--trainer", action="store_true", help="run the trainer beside them")
    args = parser.parse_args()
    if args.skip_max and args.skip_latency:
        parser.error("--skip-max and --skip-latency leave nothing to run")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return args


def main() -> None:
    args = arguments()
    settings = Settings()
    stack = Stack(settings)
    was_up = all(c.pid for c in stack.status())
    stack.up()
    runs = []
    try:
        for i in range(0 if args.skip_latency else args.repeat):
            print(f"run {i + 1} of {args.repeat} (load {load_avg_1m()})", flush=True)
            runs.append(
                latency_phases(
                    settings, args.seconds, [1.0, 5.0], args.noise, args.warmup, args.trainer
                )
            )
        top = {} if args.skip_max else max_throughput(settings)
    finally:
        if not was_up:
            stack.down()
    if args.skip_latency:
        print(json.dumps(top))
        write_max_results(top)
        return
    phases = {label: summary(runs, label) for label in ("1k", "5k")}
    for label, figures in phases.items():
        print(f"{label} over {len(runs)} runs: {figures}")
    print(json.dumps({"runs": runs, "max": top}))
    headline = {
        "noise": args.noise,
        "warmup_s": args.warmup,
        "runs": len(runs),
        "p50_ms_1k": phases["1k"]["p50_ms"],
        "p99_ms_1k": phases["1k"]["p99_ms"],
        "p50_ms_5k": phases["5k"]["p50_ms"],
        "p95_ms_5k": phases["5k"]["p95_ms"],
        "p99_ms_5k": phases["5k"]["p99_ms"],
        "p99_over_p50_1k": phases["1k"]["p99_over_p50"],
        "p99_over_p50_5k": phases["5k"]["p99_over_p50"],
        "ingest_p99_ms_5k": phases["5k"]["ingest_p99_ms"],
        "jit_cores": [phases["1k"]["jit_cores"], phases["5k"]["jit_cores"]],
        "load_avg_1m": [phases["1k"]["load_avg_1m"], phases["5k"]["load_avg_1m"]],
        "max_throughput_rps": top.get("max_throughput_rps"),
        "cold_throughput_rps": top.get("cold_throughput_rps"),
        "peak_rss_mb": max(max(r["peak_rss_mb"] for r in runs), top.get("max_peak_rss_mb", 0.0)),
        "trainer": args.trainer,
        "pipeline_cores_1k": phases["1k"]["pipeline_cores"],
        "pipeline_cores_5k": phases["5k"]["pipeline_cores"],
        "cpu_us_per_reading_1k": phases["1k"]["cpu_us_per_reading"],
        "cpu_us_per_reading_5k": phases["5k"]["cpu_us_per_reading"],
    }
    print(json.dumps(headline))
    write_results(__file__, headline)


if __name__ == "__main__":
    main()
