"""Operators' rules on the whole path (issue 72's targets): how soon a hard limit alerts, how
soon an edit is in effect, and whether 1,000 rules keep up with 10,000 devices.

Each run has fresh topics and a fresh scorer (``spark.master`` ``local[N]`` with a task slot
per partition of ``telemetry.raw`` for the rules' real-time query beside the micro-batch
queries, so the fast path runs) and two parts:

*Alerts and an edit.* The simulated fleet (``--devices``, ``--rate`` readings/s in all) and
under_load's probe devices publish over MQTT through the gateway, the learned scorer scoring
them. Rule ``hot`` (``temperature > 55`` on the probes) fires on each probe's spike (60 °C
every ``PROBE_SPIKE_EVERY``-th reading) and resolves on the next. Latency = a spike's publish
to its early ``open`` on ``alerts.fast`` arriving at a consumer (the real-time query), and to
the stateful ``open`` on ``alerts`` (the rules query), over ``--seconds``. Then rule ``edit``
(``temperature > 200`` on ``EDIT_DEVICES`` of the fleet: never fires) gets a version 2
(``temperature > 0``: fires on each of their readings) while readings flow; *edit in effect*
= its publish on the ``rules`` topic to the first alert of version 2 arriving at a consumer,
on either path (each path's also given); and from when new readings are judged by it on the
stateful path: the publish to the event time of the earliest reading version 2 alerts on
(``stateful_readings_ms``: the readings before it were judged by version 1).

*Scale.* ``--scale-rules`` rules (half thresholds on a reading, half ``avg`` / ``min`` /
``count(*)`` over tumbling or sliding windows of 1 to 5 minutes), each naming
``--per-rule`` devices of ``--scale-devices``, at ``--scale-rate`` readings/s for
``--scale-seconds``: over MQTT through the gateway, or with ``--scale-via kafka`` written
straight to ``telemetry.raw`` (the output says which). The rules query's progress is read
from outside, from its checkpoint: every second the records it has committed
(:func:`~fleetwatch.streaming.checkpoints.committed_offsets`) against the topic's end offsets
— the arrival rate, the rate it commits at, and its lag (records not committed yet) — and its
micro-batches' durations (each batch's offsets file to its commit file), whose sum over the
phase gives its processing rate (records per second of batch time: Spark's
``processedRowsPerSecond``; ``busy_share`` is the share of the phase its batches ran, near 1
when they run back to back, the processing rate then near the arrival rate until it can do no
more). It keeps up when, over the phase's second half, it committed at least
``KEEP_UP_SHARE`` of what arrived and, when publishing stopped, was no more than ``MAX_LAG_S``
seconds of readings behind; how long it then took to commit the rest is ``catch_up_ms``. The
phase lasts the longest window, the allowed lateness (2 minutes) and a minute, so every
window size is judged in it. The scorer's model query is given beside it, and the
scorer process's CPU per reading: its driver's, JVM's and Python workers' CPU over the phase
over the readings published.

    python bench/pipeline/rules.py [--repeat 3] [--seconds 60] [--rate 1000] [--devices 1000]
        [--scale-rules 1000] [--scale-devices 10000] [--scale-rate 5000]
        [--scale-seconds 480] [--scale-via mqtt|kafka] [--per-rule 100]
        [--skip-scale | --skip-alerts]

Last line: {"stateless_p50_ms": [per run], "stateless_p95_ms", "stateless_p99_ms",
"stateful_p50_ms", "stateful_p99_ms", "edit_in_effect_ms", "edit_stateful_readings_ms",
"stateless_p99_holds",
"edit_holds", "scale_via", "scale_keeps_up", "scale_input_rps", "scale_committed_rps",
"scale_processed_rps", "scale_lag_end", "scale_catch_up_ms", "scorer_cpu_us_per_reading", …}
(every list: one value per run).
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # see bench/common.py

from bench.common import (
    CpuShares,
    end_gateway_session,
    isolated_env,
    load_avg_1m,
    percentiles,
    stage,
    wait,
    write_results,
)
from bench.pipeline.under_load import PROBES, Probes, Watch, probe_prefix
from fleetwatch.contracts.clock import now_ms
from fleetwatch.contracts.rules import (
    RuleRecord,
    RuleSelector,
    RuleWindow,
    encode,
    rule_key,
)
from fleetwatch.contracts.settings import MqttSettings, Settings
from fleetwatch.contracts.telemetry import encode_record
from fleetwatch.kafka_config import client_config
from fleetwatch.kafka_topic import end_offsets
from fleetwatch.simulator.runner import run as run_fleet
from fleetwatch.simulator.scenario import Scenario
from fleetwatch.stack.credentials import login
from fleetwatch.stack.manager import Stack
from fleetwatch.stack.topics import delete_topics
from fleetwatch.streaming.checkpoints import committed_offsets, versioned
from fleetwatch.streaming.rules.job import PLAN_VERSION as RULES_PLAN
from fleetwatch.streaming.scorer.job import PLAN_VERSION as SCORE_PLAN

STATELESS_TARGET_MS = 250.0
EDIT_TARGET_MS = 5_000.0
EDIT_DEVICES = 100
"""Fleet devices the edited rule judges: at 1 reading/s each, its version 2 has a reading to
fire on every 10 ms."""
GRACE_S = 10.0
"""After the latency phase, how long its last spikes' alerts are waited for."""
EDIT_TIMEOUT_S = 60.0
START_TIMEOUT_S = 300.0
"""A fresh scorer's first micro-batches and its rules' queries (Spark compiles each rule);
twice this at scale."""
KEEP_UP_SHARE = 0.95
MAX_LAG_S = 10.0
CATCH_UP_TIMEOUT_S = 120.0
SAMPLE_S = 1.0
FAST_STARTED = b"fast path for "
NO_FAST_PATH = b"no fast path for rules"


def rule(
    rule_id: str,
    when: str,
    devices: Sequence[str],
    version: int = 1,
    window: RuleWindow | None = None,
) -> RuleRecord:
    """A rule's record as the API publishes it: naming its devices, resolved to the same."""
    chosen = sorted(devices)
    return RuleRecord(
        id=rule_id,
        name=f"bench {rule_id}",
        severity="critical",
        select=RuleSelector(devices=chosen),
        when=when,
        window=window,
        version=version,
        updated_ms=now_ms(),
        devices=chosen,
    )


def publish(producer: Producer, topic: str, records: Sequence[RuleRecord]) -> int:
    """Write ``records`` to the ``rules`` topic; the time (ms) they were all acknowledged."""
    for i, record in enumerate(records):
        producer.produce(topic, encode(record), key=rule_key(record.id).encode())
        if i % 100 == 0:
            producer.poll(0)
    left = producer.flush(30)
    if left:
        raise SystemExit(f"bench: {left} rule records not acknowledged")
    return now_ms()


def scale_rules(devices: Sequence[str], count: int, per_rule: int, seed: int) -> list[RuleRecord]:
    """``count`` rules over the simulated fleet's metrics (temperature ~21 °C, humidity ~55 %),
    half without a window, half over windows of 1 to 5 minutes (every other one sliding by a
    minute), each naming ``per_rule`` devices picked at random; thresholds at the tails, so
    some fire now and then."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        chosen = [str(d) for d in rng.choice(devices, min(per_rule, len(devices)), replace=False)]
        kind = i % 6
        if kind == 0:
            when, window = f"temperature > {rng.uniform(25, 30):.1f}", None
        elif kind == 1:
            when, window = f"humidity < {rng.uniform(35, 45):.1f}", None
        elif kind == 2:
            t, h = rng.uniform(24, 28), rng.uniform(55, 65)
            when, window = f"temperature > {t:.1f} AND humidity > {h:.1f}", None
        else:
            minutes = int(rng.integers(1, 6))
            slide = "1 minute" if i % 2 and minutes > 1 else None
            window = RuleWindow(size=f"{minutes} minutes", slide=slide)
            when = {
                3: f"avg(temperature) > {rng.uniform(24, 27):.1f}",
                4: f"min(humidity) < {rng.uniform(40, 48):.1f}",
                5: "count(*) = 0",
            }[kind]
        out.append(rule(f"s{i:04d}", when, chosen, window=window))
    return out


def scorer_env(settings: Settings, env: dict[str, str]) -> dict[str, str]:
    """The scorer's environment with a task slot per partition of ``telemetry.raw`` for the
    real-time query, and the shuffle partitions of each micro-batch query (the models', the
    rules') beside it."""
    slots = settings.kafka.partitions + 2 * settings.spark.shuffle_partitions
    return {**env, "FLEETWATCH_SPARK__MASTER": f"local[{slots}]"}


def start_scorer(
    settings: Settings,
    env: dict[str, str],
    run_dir: Path,
    procs: list[subprocess.Popen[bytes]],
    timeout_s: float = START_TIMEOUT_S,
) -> subprocess.Popen[bytes]:
    """A fresh scorer (added to ``procs`` at once, for the caller to stop whatever happens),
    once its model query, its rules query and its real-time query run."""
    scorer = stage(scorer_env(settings, env), run_dir, "score", "score")
    procs.append(scorer)
    log = run_dir / "score.log"
    checkpoints = run_dir / "checkpoints"

    def running() -> bool:
        if scorer.poll() is not None:
            raise SystemExit(f"bench: the scorer exited ({scorer.returncode}); see {log}")
        text = log.read_bytes() if log.exists() else b""
        if NO_FAST_PATH in text:
            raise SystemExit(f"bench: the scorer runs no fast path for rules; see {log}")
        return (
            (versioned(checkpoints, "score", SCORE_PLAN) / "commits" / "0").exists()
            and (versioned(checkpoints, "rules", RULES_PLAN) / "commits" / "0").exists()
            and FAST_STARTED in text
        )

    wait(running, timeout_s, "the scorer's queries to run")
    return scorer


def stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.send_signal(signal.SIGTERM)
    for p in running:
        p.wait(120)


def first_arrival(watch: Watch) -> int | None:
    arrived = list(watch.arrived.values())
    return min(arrived) if arrived else None


def first_judged(watch: Watch) -> int | None:
    """The event time of the earliest reading whose alert ``watch`` saw."""
    return min(watch.event_ms.values()) if watch.event_ms else None


def until(probe: Any, timeout_s: float) -> bool:
    """Poll ``probe`` until it holds or ``timeout_s`` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def mqtt_of(settings: Settings, tag: str) -> MqttSettings:
    return login(settings, "sim").model_copy(update={"root": f"b{tag}/devices"})


def fleet_scenario(tag: str, devices: int, rate: float, count: int | None = None) -> Scenario:
    """The simulated fleet at ``rate`` readings/s in all, until stopped (or ``count`` each)."""
    return Scenario(
        devices=devices, rate=rate / devices, count=count, seed=11, qos=1, prefix=f"b{tag}"
    )


def alerts_run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """One run's stateless latency (fast and stateful path) and edit in effect."""
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-rules-"))
    topics, env = isolated_env(settings, tag, run_dir)
    kafka = settings.kafka
    prefix = probe_prefix(tag)
    scenario = fleet_scenario(tag, args.devices, args.rate)
    probes_ids = [f"{prefix}{i}" for i in range(PROBES)]
    edited = [scenario.device_id(i) for i in range(min(EDIT_DEVICES, args.devices))]
    producer = Producer(client_config(kafka))
    publish(
        producer,
        topics.rules,
        [rule("hot", "temperature > 55", probes_ids), rule("edit", "temperature > 200", edited)],
    )
    procs = [stage(env, run_dir, "gateway", "gateway")]
    fast = Watch(kafka, topics.alerts_fast, prefix, only_open=True)
    slow = Watch(kafka, topics.alerts, prefix, only_open=True, rule_id="hot")
    edit_fast = Watch(kafka, topics.alerts_fast, f"b{tag}-", only_open=True, rule_id="edit")
    edit_slow = Watch(kafka, topics.alerts, f"b{tag}-", only_open=True, rule_id="edit")
    watches = [fast, slow, edit_fast, edit_slow]
    stop_fleet = threading.Event()
    fleet = threading.Thread(
        target=run_fleet, args=(scenario, mqtt_of(settings, tag), stop_fleet), name="fleet"
    )
    probes: Probes | None = None
    out: dict[str, Any] = {}
    try:
        scorer = start_scorer(settings, env, run_dir, procs)
        brokers = {c.name: c.pid for c in Stack(settings).status() if c.pid}
        stages = {"gateway": procs[0].pid, "scorer": scorer.pid, **brokers}
        shares = CpuShares(stages, ["scorer"])
        for w in watches:
            w.start()
        probes = Probes(settings, f"b{tag}/devices", tag)
        probes.start()
        fleet.start()
        time.sleep(args.warmup)
        lo, raw_lo = now_ms(), sum(end_offsets(kafka, topics.telemetry_raw).values())
        shares.start()
        time.sleep(args.seconds)
        hi, raw_hi = now_ms(), sum(end_offsets(kafka, topics.telemetry_raw).values())
        cores = shares.cores()
        spikes = {k: t for k, t in list(probes.sent.items()) if lo <= t <= hi}
        until(lambda: all(k in slow.arrived and k in fast.arrived for k in spikes), GRACE_S)
        fast_ms, slow_ms = fast.latencies(spikes), slow.latencies(spikes)
        out.update(
            offered_rps=round((raw_hi - raw_lo) * 1000 / max(1, hi - lo), 1),
            probe_spikes=len(spikes),
            fast=percentiles(fast_ms, 50, 95, 99, 100),
            fast_missed=len(spikes) - len(fast_ms),
            stateful=percentiles(slow_ms, 50, 95, 99, 100),
            stateful_missed=len(spikes) - len(slow_ms),
            cores=cores,
            load_avg_1m=load_avg_1m(),
        )
        version_2 = rule("edit", "temperature > 0", edited, version=2)
        published = publish(producer, topics.rules, [version_2])
        until(lambda: edit_fast.arrived and edit_slow.arrived, EDIT_TIMEOUT_S)
        after = {
            name: first_arrival(w) for name, w in (("fast", edit_fast), ("stateful", edit_slow))
        }
        seen = [a for a in after.values() if a is not None]
        judged = first_judged(edit_slow)
        out["edit"] = {
            "in_effect_ms": min(seen) - published if seen else None,
            **{f"{name}_ms": None if a is None else a - published for name, a in after.items()},
            "stateful_readings_ms": None if judged is None else judged - published,
            "load_avg_1m": load_avg_1m(),
        }
    finally:
        stop_fleet.set()
        if probes is not None:
            probes.stop.set()
            probes.join(10)
        if fleet.is_alive():
            fleet.join(30)
        for w in watches:
            w.stop.set()
            if w.is_alive():
                w.join(10)
        stop_all(procs)
        end_gateway_session(settings, env)
        delete_topics(kafka, topics.model_dump().values())
    out["run_dir"] = str(run_dir)
    return out


class Progress(threading.Thread):
    """Every :data:`SAMPLE_S`: the topic's end offsets and the offsets each checkpoint has
    committed, summed over partitions (``samples``: (ms, end, {name: committed}))."""

    def __init__(self, settings: Settings, topic: str, checkpoints: dict[str, Path]) -> None:
        super().__init__(name="progress")
        self.settings, self.topic, self.checkpoints = settings, topic, checkpoints
        self.samples: list[tuple[int, int, dict[str, int]]] = []
        self.stop = threading.Event()

    def sample(self) -> tuple[int, int, dict[str, int]]:
        end = sum(end_offsets(self.settings.kafka, self.topic).values())
        done = {
            name: sum(committed_offsets(path, self.topic).values())
            for name, path in self.checkpoints.items()
        }
        return now_ms(), end, done

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(self.sample())
            self.stop.wait(SAMPLE_S)


def batch_seconds(checkpoint: Path, lo_ms: int, hi_ms: int) -> tuple[int, float]:
    """Micro-batches a query committed between ``lo_ms`` and ``hi_ms`` and their summed
    duration in seconds (each batch's offsets file written to its commit file written)."""
    n, busy = 0, 0.0
    for commit in (checkpoint / "commits").glob("[0-9]*"):
        try:
            end = commit.stat().st_mtime
            start = (checkpoint / "offsets" / commit.name).stat().st_mtime
        except OSError:
            continue
        if lo_ms <= end * 1000 <= hi_ms:
            n, busy = n + 1, busy + max(0.0, end - start)
    return n, busy


def query_figures(
    samples: list[tuple[int, int, dict[str, int]]], name: str, checkpoint: Path, rate: float
) -> dict[str, Any]:
    """A query's progress over the publishing phase (``samples``): rates over its second half,
    batches and lag over all of it."""
    if len(samples) < 2:
        return {}
    (t0, end0, done0), (t1, end1, done1) = samples[len(samples) // 2], samples[-1]
    seconds = max(1e-3, (t1 - t0) / 1000)
    arrived, committed = end1 - end0, done1[name] - done0[name]
    batches, busy = batch_seconds(checkpoint, samples[0][0], t1)
    rows = done1[name] - samples[0][2][name]
    lag = [end - done[name] for _, end, done in samples]
    lag_end = lag[-1]
    return {
        "input_rps": round(arrived / seconds, 1),
        "committed_rps": round(committed / seconds, 1),
        "processed_rps": round(rows / busy, 1) if busy else None,
        "batches": batches,
        "busy_share": round(busy / max(1e-3, (t1 - samples[0][0]) / 1000), 2),
        "lag_end": lag_end,
        "lag_max": max(lag),
        "lag_end_s": round(lag_end / rate, 1) if rate else None,
        "keeps_up": committed >= KEEP_UP_SHARE * arrived and lag_end <= MAX_LAG_S * rate,
    }


def write_readings(
    settings: Settings, topic: str, devices: Sequence[str], rate: float, seconds: float
) -> int:
    """Readings (temperature, humidity) of ``devices`` in turn, straight to ``topic`` at
    ``rate`` per second for ``seconds``, stamped with the time they are written; how many."""
    producer = Producer(client_config(settings.kafka, {"linger.ms": 5}))
    rng = np.random.default_rng(7)
    tick_s, sent, seqs = 0.05, 0, dict.fromkeys(devices, 0)
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(rate * elapsed) - sent
        temps = (21 + rng.normal(0, 1.5, due)).round(2).tolist()
        hums = (55 + rng.normal(0, 4, due)).round(2).tolist()
        at = now_ms()
        for i in range(due):
            device = devices[(sent + i) % len(devices)]
            seq = seqs[device] = seqs[device] + 1
            metrics = {"temperature": temps[i], "humidity": hums[i]}
            value = encode_record(device, seq, at, at, at, at, 0, metrics)
            producer.produce(topic, value, key=device.encode(), timestamp=at)
        sent += due
        producer.poll(0)
        time.sleep(tick_s)
    producer.flush(30)
    return sent


def scale_run(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """One run of ``--scale-rules`` rules over ``--scale-devices`` at ``--scale-rate``."""
    tag = uuid.uuid4().hex[:8]
    run_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-bench-rules-scale-"))
    topics, env = isolated_env(settings, tag, run_dir)
    kafka = settings.kafka
    seconds, rate = args.scale_seconds, float(args.scale_rate)
    per_device = rate / args.scale_devices
    scenario = fleet_scenario(tag, args.scale_devices, rate, max(1, int(per_device * seconds)))
    devices = [scenario.device_id(i) for i in range(args.scale_devices)]
    records = scale_rules(devices, args.scale_rules, args.per_rule, seed=3)
    publish(Producer(client_config(kafka)), topics.rules, records)
    procs = [stage(env, run_dir, "gateway", "gateway")] if args.scale_via == "mqtt" else []
    checkpoints = {
        "rules": versioned(run_dir / "checkpoints", "rules", RULES_PLAN),
        "score": versioned(run_dir / "checkpoints", "score", SCORE_PLAN),
    }
    progress = Progress(settings, topics.telemetry_raw, checkpoints)
    out: dict[str, Any] = {"via": args.scale_via, "rules": len(records)}
    try:
        scorer = start_scorer(settings, env, run_dir, procs, 2 * START_TIMEOUT_S)
        shares = CpuShares({"scorer": scorer.pid}, ["scorer"])
        progress.start()
        shares.start()
        lo = now_ms()
        if args.scale_via == "mqtt":
            sent = run_fleet(scenario, mqtt_of(settings, tag), threading.Event()).sent
        else:
            sent = write_readings(settings, topics.telemetry_raw, devices, rate, seconds)
        hi = now_ms()
        cores, cpu = shares.cores(), shares.seconds()
        progress.stop.set()
        progress.join()
        samples = progress.samples
        _, end, _ = progress.sample()
        caught = until(
            lambda: (
                sum(committed_offsets(checkpoints["rules"], topics.telemetry_raw).values()) >= end
            ),
            CATCH_UP_TIMEOUT_S,
        )
        scorer_cpu = sum(cpu.get(f"scorer_{part}", 0.0) for part in ("driver", "jvm", "workers"))
        out.update(
            offered_rps=round(sent * 1000 / max(1, hi - lo), 1),
            readings=sent,
            rules_query=query_figures(samples, "rules", checkpoints["rules"], rate),
            score_query=query_figures(samples, "score", checkpoints["score"], rate),
            rules_catch_up_ms=now_ms() - hi if caught else None,
            scorer_cores=cores,
            scorer_cpu_us_per_reading=round(scorer_cpu * 1e6 / max(1, sent), 1),
            load_avg_1m=load_avg_1m(),
        )
    finally:
        progress.stop.set()
        if progress.is_alive():
            progress.join()
        stop_all(procs)
        if args.scale_via == "mqtt":
            end_gateway_session(settings, env)
        delete_topics(kafka, topics.model_dump().values())
    out["run_dir"] = str(run_dir)
    return out


def per_run(runs: Sequence[dict[str, Any]], *path: str) -> list[Any]:
    """The value at ``path`` of each run (None where a run lacks it)."""
    out = []
    for run in runs:
        value: Any = run
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        out.append(value)
    return out


def holds(values: Sequence[float | None], target: float) -> bool | None:
    """Every run within ``target`` (None: no runs)."""
    return all(v is not None and v <= target for v in values) if values else None


def headline(
    alerts: list[dict[str, Any]], scale: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    p99 = per_run(alerts, "fast", "p99")
    edit = per_run(alerts, "edit", "in_effect_ms")
    return {
        "runs": max(len(alerts), len(scale)),
        "rate_rps": args.rate if alerts else None,
        "stateless_p50_ms": per_run(alerts, "fast", "p50"),
        "stateless_p95_ms": per_run(alerts, "fast", "p95"),
        "stateless_p99_ms": p99,
        "stateless_missed": per_run(alerts, "fast_missed"),
        "stateful_p50_ms": per_run(alerts, "stateful", "p50"),
        "stateful_p99_ms": per_run(alerts, "stateful", "p99"),
        "stateful_missed": per_run(alerts, "stateful_missed"),
        "probe_spikes": per_run(alerts, "probe_spikes"),
        "offered_rps": per_run(alerts, "offered_rps"),
        "edit_in_effect_ms": edit,
        "edit_fast_ms": per_run(alerts, "edit", "fast_ms"),
        "edit_stateful_ms": per_run(alerts, "edit", "stateful_ms"),
        "edit_stateful_readings_ms": per_run(alerts, "edit", "stateful_readings_ms"),
        "stateless_p99_holds": holds(p99, STATELESS_TARGET_MS),
        "edit_holds": holds(edit, EDIT_TARGET_MS),
        "load_avg_1m": per_run(alerts, "load_avg_1m"),
        "scale_via": args.scale_via if scale else None,
        "scale_rules": args.scale_rules,
        "scale_devices": args.scale_devices,
        "scale_rate_rps": args.scale_rate,
        "scale_offered_rps": per_run(scale, "offered_rps"),
        "scale_keeps_up": per_run(scale, "rules_query", "keeps_up"),
        "scale_input_rps": per_run(scale, "rules_query", "input_rps"),
        "scale_committed_rps": per_run(scale, "rules_query", "committed_rps"),
        "scale_processed_rps": per_run(scale, "rules_query", "processed_rps"),
        "scale_lag_end": per_run(scale, "rules_query", "lag_end"),
        "scale_catch_up_ms": per_run(scale, "rules_catch_up_ms"),
        "scale_score_lag_end": per_run(scale, "score_query", "lag_end"),
        "scorer_cpu_us_per_reading": per_run(scale, "scorer_cpu_us_per_reading"),
        "scale_load_avg_1m": per_run(scale, "load_avg_1m"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs, each with a fresh scorer")
    parser.add_argument("--seconds", type=int, default=60, help="the latency phase's length")
    parser.add_argument("--warmup", type=int, default=15, help="seconds before it, each run")
    parser.add_argument("--rate", type=float, default=1000.0, help="readings/s over MQTT")
    parser.add_argument("--devices", type=int, default=1000, help="the simulated fleet's")
    parser.add_argument("--scale-rules", type=int, default=1000)
    parser.add_argument("--scale-devices", type=int, default=10_000)
    parser.add_argument("--per-rule", type=int, default=100, help="devices each rule names")
    parser.add_argument("--scale-rate", type=float, default=5000.0, help="readings/s")
    parser.add_argument("--scale-seconds", type=int, default=480, help="the scale phase's length")
    parser.add_argument("--scale-via", choices=("mqtt", "kafka"), default="mqtt")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-alerts", action="store_true", help="the scale part only")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    settings = Settings()
    Stack(settings).up()
    alerts: list[dict[str, Any]] = []
    scale: list[dict[str, Any]] = []
    for i in range(args.repeat):
        print(f"run {i + 1} of {args.repeat} (load {load_avg_1m()})", flush=True)
        if not args.skip_alerts:
            alerts.append(alerts_run(settings, args))
            print(f"alerts and edit: {json.dumps(alerts[-1])}", flush=True)
        if not args.skip_scale:
            try:
                scale.append(scale_run(settings, args))
            except SystemExit as exc:  # a scorer that did not start: the other runs go on
                scale.append({"error": str(exc)})
            print(f"scale: {json.dumps(scale[-1])}", flush=True)
    figures = headline(alerts, scale, args)
    for name, value in figures.items():
        print(f"{name:28s} {value}")
    write_results(__file__, figures)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
